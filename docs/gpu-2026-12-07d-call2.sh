#!/usr/bin/env bash
# Call 2 of the fourth session of 2026-12-07: AdamW one launch a layer (Classifier::update_per_layer).
# The segments' followers now read the lead's step and take their own workgroups. The changed test binaries on host + CUDA + NVIDIA Vulkan, then the fp32 MLP steps and the bf16
# mixed-M step with the one-launch update beside (+whole), PyTorch's compiled steps beside
# (torch.compile default mode + one CUDA graph: the max-autotune passes replaced out for time).
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu
for t in training dag; do
  echo "== test-$t"; timeout 60 bin/test-$t 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
done
echo "== test-kernels optim"; timeout 60 bin/test-kernels optim 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
echo "== test-mixed (host + CUDA)"; GRAPHED_TEST_BACKENDS=host,cuda GRAPHED_REQUIRE=cuda,nvrtc timeout 90 bin/test-mixed 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
unset GRAPHED_TEST_BACKENDS
echo "== bench-replay mlp --backend cuda --quick"
timeout 150 bin/bench-replay mlp --backend cuda --quick 2>&1 | grep -vE "^cuBLASLt|products|sentinel" | tee $OUT/mlp.txt | grep -E "^mlp-|static"
sed -e 's/for mode in ("default", "max-autotune-no-cudagraphs")/for mode in ("default",)/' files/torch_compiled_step.py > files/tc.py
sed -e 's/mode="max-autotune-no-cudagraphs"/mode="default"/' files/torch_mixed_step.py > files/tm.py
echo "== torch_compiled_step.py S M (default mode)"; timeout 130 python3 -u files/tc.py S M 2>&1 | grep -vE "Warning|warn" | tail -8
echo "== bench-replay mixed-M --precision bf16 --backend cuda --quick"
timeout 100 bin/bench-replay mixed-M --precision bf16 --backend cuda --quick 2>&1 | grep -vE "^cuBLASLt|products|sentinel" | tee $OUT/mixed.txt | grep -E "^mixed-|TFLOP"
echo "== torch_mixed_step.py M (compile default mode)"; timeout 120 python3 -u files/tm.py M 2>&1 | grep -vE "Warning|warn" | tail -8
echo "== bench-replay mixed-L --precision bf16 --backend cuda --quick"
timeout 120 bin/bench-replay mixed-L --precision bf16 --backend cuda --quick 2>&1 | grep -vE "^cuBLASLt|products|sentinel" | tee $OUT/mixed-L.txt | grep -E "^mixed-|TFLOP"
echo "== bench-replay mlp --backend wgpu --quick (NVIDIA Vulkan)"
timeout 100 bash run.sh bin/bench-replay mlp --backend wgpu --quick 2>&1 | grep -E "^mlp-" | tee $OUT/mlp-wgpu.txt
