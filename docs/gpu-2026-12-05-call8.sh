#!/usr/bin/env bash
# Call 8: the fp32 MLP steps beside torch.compile + one CUDA graph in one call (call 5 lost
# torch_compiled_step.py's result lines to its `tail`).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== bench-replay mlp --backend cuda --quick"
timeout 100 bin/bench-replay mlp --backend cuda --quick 2>&1 | grep -E "static bytes|^mlp-[SM] +cuda +(eager|replay)(\+split|\+tuned)? " | tee $OUT/bench-mlp.txt
echo "== torch_compiled_step.py S M"
timeout 200 python3 -u files/torch_compiled_step.py S M 2>&1 | grep -E "^[SM] torch"
