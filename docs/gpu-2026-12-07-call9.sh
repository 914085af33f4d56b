#!/usr/bin/env bash
# Call 9 of 2026-12-07 (experiment x, not kept: BENCHMARKS.md): the kept async MMA kernel beside
# the same kernel bounded to three workgroups a multiprocessor (166 registers, no spills), with the
# words kernel and cuBLAS.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== bench-replay mma --backend cuda --quick"
timeout 200 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -v "^mma " | tee $OUT/mma.txt
