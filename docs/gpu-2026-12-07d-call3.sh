#!/usr/bin/env bash
# Call 3 of the fourth session of 2026-12-07: Adam's workgroups one per 2048 parameters (bench-replay)
# against one per 256 (bench-prev, eab47f6), twice each, alternating, in one call; the changed test
# binaries on host + CUDA + NVIDIA Vulkan; PyTorch's compiled fp32 steps beside.
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu
for t in training dag; do
  echo "== test-$t"; timeout 60 bin/test-$t 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
done
echo "== test-kernels"; timeout 120 bin/test-kernels 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
echo "== test-mixed (host + CUDA)"; GRAPHED_TEST_BACKENDS=host,cuda GRAPHED_REQUIRE=cuda,nvrtc timeout 90 bin/test-mixed 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
unset GRAPHED_TEST_BACKENDS
for round in 1 2; do
  for b in bench-prev bench-replay; do
    echo "== round $round: $b mlp --backend cuda --quick"
    timeout 150 bin/$b mlp --backend cuda --quick 2>&1 | grep -E "^mlp-[SM] +cuda +(replay|replay\+pdl|eager) "
  done
done
sed -e 's/for mode in ("default", "max-autotune-no-cudagraphs")/for mode in ("default",)/' files/torch_compiled_step.py > files/tc.py 2>/dev/null
echo "== torch_compiled_step.py S M (default mode)"; timeout 130 python3 -u files/tc.py S M 2>&1 | grep -vE "Warning|warn" | tail -8
