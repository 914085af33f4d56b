#!/usr/bin/env bash
# Call 2 of the seventh session of 2026-12-07 (little device time left). Pack on the commit it
# times: `../shared/gpu/pack clean`; `bench-prev` from 1ddb0d4 stripped into .gpu-build/bin
# first; `pack tests -p graphed-nn --test layers`, `pack tests --test training --test ldmatrix
# --test mma --test mixed`, `pack bin --bench replay`. It runs: the MLP steps and the bf16
# mixed-M step against bench-prev (the head fused only up to 65,536 input elements; `Auto`
# taking the async MMA variant), then the changed test binaries on CUDA.
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
for b in bench-prev bench-replay bench-prev bench-replay; do
  echo "== $b mlp --backend cuda --quick"
  timeout 60 bin/$b mlp --backend cuda --quick 2>&1 | grep -E "^mlp-[SM] +cuda +(replay|replay\+pdl) "
done
for b in bench-prev bench-replay; do
  echo "== $b mixed-M --precision bf16 --backend cuda --quick"
  timeout 60 bin/$b mixed-M --precision bf16 --backend cuda --quick 2>&1 | grep -E "^mixed-M bf16 on cuda: (replay|eager) "
done
export GRAPHED_REQUIRE=cuda,nvrtc GRAPHED_TEST_BACKENDS=cuda
for t in ldmatrix layers training mma mixed; do
  echo "== test-$t on CUDA"; timeout 60 bin/test-$t 2>&1 | grep -E "test result|panicked|FAILED" | tail -5
done
