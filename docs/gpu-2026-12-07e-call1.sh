#!/usr/bin/env bash
# Call 1 of the fifth session of 2026-12-07: the fused classifier head (bench-replay, 584db40: the last
# layer, the loss and its input gradient in one launch) against three launches (bench-prev, 1ddb0d4),
# alternating, twice each on CUDA and once each on NVIDIA Vulkan; the changed test binaries on host + CUDA
# + NVIDIA Vulkan; PyTorch's compiled fp32 steps (torch.compile default mode + one CUDA graph) and its
# eager-API graphs (torch_mlp_step.py) beside.
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu
for t in kernels layers training dag long_run; do
  echo "== test-$t"; timeout 150 bin/test-$t 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
done
unset GRAPHED_TEST_BACKENDS
for round in 1 2; do
  for b in bench-prev bench-replay; do
    echo "== round $round: $b mlp --backend cuda --quick"
    timeout 150 bin/$b mlp --backend cuda --quick 2>&1 | grep -E "^mlp-[SM] +cuda +(replay|replay\+pdl|eager) |static"
  done
done
for b in bench-prev bench-replay; do
  echo "== $b mlp --backend wgpu --quick"
  timeout 150 bin/$b mlp --backend wgpu --quick 2>&1 | grep -E "^mlp-[SM] +wgpu +(replay|eager) "
done
sed -e 's/for mode in ("default", "max-autotune-no-cudagraphs")/for mode in ("default",)/' files/torch_compiled_step.py > files/tc.py
echo "== torch_compiled_step.py S M (default mode)"; timeout 130 python3 -u files/tc.py S M 2>&1 | grep -vE "Warning|warn" | tail -8
echo "== torch_mlp_step.py S M"; timeout 100 python3 -u files/torch_mlp_step.py S M 2>&1 | grep -vE "Warning|warn" | tail -10
