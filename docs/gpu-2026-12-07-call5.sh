#!/usr/bin/env bash
# Call 5 of 2026-12-07: the async MMA kernel at four MMA groups of 64×64 (128 invocations)
# timed beside the words kernel and cuBLAS (`bench-replay mma`), then test-mma on host + CUDA.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== bench-replay mma --backend cuda --quick"
timeout 200 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -v "^mma " | tee $OUT/mma.txt
echo "== test-mma on host + CUDA"
GRAPHED_TEST_BACKENDS=host,cuda timeout 150 bin/test-mma --test-threads=1 2>&1 | tail -4
