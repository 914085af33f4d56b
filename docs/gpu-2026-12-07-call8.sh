#!/usr/bin/env bash
# Call 8 of 2026-12-07: the final code of the session. test-copy_async and test-limits on host +
# CUDA + NVIDIA Vulkan, test-mma on host + CUDA, and bench-replay mma (the kept async kernel
# beside the words kernel and cuBLAS).
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
for t in copy_async limits; do
  echo "== test-$t on host + CUDA + NVIDIA Vulkan"
  GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu timeout 120 bash run.sh bin/test-$t 2>&1 | grep -E "^test |test result|panicked" | tail -14
done
echo "== test-mma on host + CUDA"
GRAPHED_REQUIRE=cuda,nvrtc GRAPHED_TEST_BACKENDS=host,cuda timeout 150 bin/test-mma --test-threads=1 2>&1 | grep -E "^test |test result|panicked" | tail -18
echo "== bench-replay mma --backend cuda --quick"
GRAPHED_REQUIRE=cuda,nvrtc timeout 200 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -v "^mma " | tee $OUT/mma.txt
