#!/usr/bin/env bash
# Call 2: the staged MMA variant and Auto's words route for gradient products timed (bench mma),
# test-mma on CUDA + NVIDIA Vulkan; the MLP steps of issue 17 with PyTorch's beside.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc
echo "== bench-replay mma --backend cuda"
timeout 220 bin/bench-replay mma --backend cuda 2>&1 | tee $OUT/bench-mma.txt
echo "== test-mma (cuda,wgpu) --skip tiled_f16"
GRAPHED_TEST_BACKENDS=cuda,wgpu timeout 150 bin/test-mma --skip tiled_f16 2>&1 | tail -25 | tee $OUT/test-mma.txt
echo "== bench-replay mlp --backend cuda --quick"
timeout 120 bin/bench-replay mlp --backend cuda --quick 2>&1 | tee $OUT/bench-mlp.txt
echo "== torch_compiled_step.py S / M, torch_mlp_step.py"
timeout 150 python3 -u files/torch_compiled_step.py S M 2>&1 | tail -12
timeout 60 python3 -u files/torch_mlp_step.py 2>&1 | tail -12
echo "== bench-replay mixed --precision bf16 --backend cuda --quick"
timeout 150 bin/bench-replay mixed --precision bf16 --backend cuda --quick 2>&1 | tee $OUT/bench-mixed.txt
echo "== torch_mixed_step.py"
timeout 150 python3 -u files/torch_mixed_step.py 2>&1 | tail -12
