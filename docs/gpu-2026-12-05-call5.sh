#!/usr/bin/env bash
# Call 5 (asked for an H200): the products and the steps at the session's final code, with
# PyTorch's references beside in the same call (issues 17 and 18's "one H200 run").
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc
echo "== bench-replay mma --backend cuda --quick"
timeout 150 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | tee $OUT/bench-mma.txt
echo "== bench-replay mlp --backend cuda --quick"
timeout 100 bin/bench-replay mlp --backend cuda --quick 2>&1 | tee $OUT/bench-mlp.txt
echo "== torch_compiled_step.py S M"
timeout 120 python3 -u files/torch_compiled_step.py S M 2>&1 | tail -12
echo "== torch_mlp_step.py"
timeout 50 python3 -u files/torch_mlp_step.py 2>&1 | tail -12
echo "== bench-replay mixed --precision bf16 --backend cuda --quick"
timeout 100 bin/bench-replay mixed --precision bf16 --backend cuda --quick 2>&1 | tee $OUT/bench-mixed.txt
