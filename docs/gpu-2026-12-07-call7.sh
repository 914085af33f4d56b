#!/usr/bin/env bash
# Call 7 of 2026-12-07: four async MMA kernels (experiments x, y, z beside t128-async: 64×64 or
# 64×32 MMA groups, `a` fragments as 64- or 32-bit reads) timed beside the words kernel and cuBLAS.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== bench-replay mma --backend cuda --quick"
timeout 200 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -v "^mma " | tee $OUT/mma.txt
