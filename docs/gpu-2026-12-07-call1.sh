#!/usr/bin/env bash
# Call 1 of 2026-12-07: the words kernel before (bench-replay-before, 9e68ae1) and after
# `store_word` tells NVRTC that `w0 < 256` (no spills), side by side on one machine.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
for b in before after; do
  bin=bin/bench-replay; [ $b = before ] && bin=bin/bench-replay-before
  echo "== $b: mma --backend cuda --quick"
  timeout 110 $bin mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -E "^(fwd|dW|dX) " | tee $OUT/mma-$b.txt
done
for b in after before; do
  bin=bin/bench-replay; [ $b = before ] && bin=bin/bench-replay-before
  echo "== $b: mixed --precision bf16 --backend cuda --quick"
  timeout 90 $bin mixed --precision bf16 --backend cuda --quick 2>&1 | tee $OUT/mixed-$b.txt | tail -12
done
echo "== test-mma on host + CUDA"
GRAPHED_TEST_BACKENDS=host,cuda timeout 100 bin/test-mma --test-threads=1 2>&1 | tail -4
