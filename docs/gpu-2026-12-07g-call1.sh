#!/usr/bin/env bash
# Call 1 of the seventh session of 2026-12-07. Pack on the commit it times: `../shared/gpu/pack
# clean`; `bench-prev` from 1ddb0d4 (the three-launch head, the async MMA kernel before
# `ldmatrix_x4`) and `bench-head` from d64d415 (the async kernel on `ldmatrix_x4`, with the
# first lowering of its shared addresses and zero chunks) stripped into .gpu-build/bin first;
# `pack tests -p graphed-kernels --test kernels`, `pack tests -p graphed-nn --test layers`,
# `pack tests --test training --test dag --test ldmatrix --test copy_async --test mma`,
# `pack bin --bench replay`, `pack file ../shared/bench/torch_compiled_step.py`. It runs: the
# changed test binaries on host + CUDA + NVIDIA Vulkan (test-mma on host + CUDA), the fused
# classifier head against bench-prev alternating on CUDA, the MMA products of the three
# binaries beside the words kernel and cuBLAS, and PyTorch's compiled fp32 steps beside
# (the benches and PyTorch first, so a call cut short still has them). `short` as the first
# argument (for a session with little device time left) runs one MLP round, the MMA products
# of bench-head and bench-replay, and test-ldmatrix, test-copy_async and test-mma on CUDA only.
short=${1:-}
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
if [ "$short" = short ]; then
  bin/bench-replay mlp --backend cuda --quick 2>&1 | grep -E "^mlp-[SM] +cuda +(replay|replay\+pdl|eager) |static"
  bin/bench-prev mlp --backend cuda --quick 2>&1 | grep -E "^mlp-[SM] +cuda +(replay|replay\+pdl|eager) |static"
  for b in bench-head bench-replay; do
    echo "== $b mma --backend cuda --quick"
    timeout 100 bin/$b mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -E "^(fwd|dW|dX) "
  done
  for t in ldmatrix copy_async mma; do
    echo "== test-$t on CUDA"
    GRAPHED_REQUIRE=cuda,nvrtc GRAPHED_TEST_BACKENDS=cuda timeout 100 bin/test-$t 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
  done
  exit 0
fi
for b in bench-prev bench-head bench-replay; do
  echo "== $b mma --backend cuda --quick"
  timeout 100 bin/$b mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -E "^(fwd|dW|dX) "
done
for round in 1 2; do
  for b in bench-prev bench-replay; do
    echo "== round $round: $b mlp --backend cuda --quick"
    timeout 100 bin/$b mlp --backend cuda --quick 2>&1 | grep -E "^mlp-[SM] +cuda +(replay|replay\+pdl|eager) |static"
  done
done
sed -e 's/for mode in ("default", "max-autotune-no-cudagraphs")/for mode in ("default",)/' files/torch_compiled_step.py > files/tc.py
echo "== torch_compiled_step.py S M (default mode)"; timeout 130 python3 -u files/tc.py S M 2>&1 | grep -vE "Warning|warn" | tail -8
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc GRAPHED_TEST_BACKENDS=host,cuda,wgpu
for t in ldmatrix copy_async kernels layers training dag; do
  echo "== test-$t"; timeout 120 bin/test-$t 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
done
echo "== test-mma on host + CUDA"
GRAPHED_REQUIRE=cuda,nvrtc GRAPHED_TEST_BACKENDS=host,cuda timeout 150 bin/test-mma 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
unset GRAPHED_TEST_BACKENDS
