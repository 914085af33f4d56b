#!/usr/bin/env bash
# Call 4 of 2026-12-07: the kernel language's `copy_async` (cp.async) on CUDA and NVIDIA Vulkan,
# test-mma with the async MMA variant (`t128-async`) on host + CUDA, and `bench-replay mma`
# timing it beside the words kernel and cuBLAS in one run.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
echo "== test-copy_async on host + CUDA + NVIDIA Vulkan"
GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu timeout 120 bash run.sh bin/test-copy_async 2>&1 | tail -12
echo "== test-limits on host + CUDA + NVIDIA Vulkan"
GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu timeout 60 bash run.sh bin/test-limits 2>&1 | tail -4
echo "== test-mma on host + CUDA"
GRAPHED_REQUIRE=cuda,nvrtc GRAPHED_TEST_BACKENDS=host,cuda timeout 150 bin/test-mma --test-threads=1 2>&1 | tail -22
echo "== bench-replay mma --backend cuda --quick"
GRAPHED_REQUIRE=cuda,nvrtc timeout 200 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | tee $OUT/mma.txt
