#!/usr/bin/env bash
# The `t128-words-double` variant these binaries held was an experiment, not kept (BENCHMARKS.md,
# second session of 2026-12-07); the script is kept as the record of what ran.
# Call 2 of 2026-12-07: the double-buffered words kernel (`t128-words-double`, one barrier a
# step) beside the words kernel and cuBLAS in one bench run; test-mma on host + CUDA.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== mma --backend cuda --quick"
timeout 150 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | tee $OUT/mma.txt
echo "== test-mma on host + CUDA"
GRAPHED_TEST_BACKENDS=host,cuda timeout 120 bin/test-mma --test-threads=1 2>&1 | tail -4
