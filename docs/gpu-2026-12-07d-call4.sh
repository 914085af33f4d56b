#!/usr/bin/env bash
# Call 4 of the fourth session of 2026-12-07 (the warm H200 of call 3): where an eager MLP-S and
# MLP-M step's time goes now, kernel by kernel (Nsight Compute, each kernel alone, clocks as they
# run; the first 45 launches of each: setup and the first eager steps).
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for w in mlp-S mlp-M; do
  echo "== ncu $w"
  timeout 200 "$ncu" --clock-control none --cache-control none --csv \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size -c 45 \
    bin/bench-replay $w --backend cuda --quick 2>/dev/null | grep -E '^"' > $OUT/ncu-$w.csv
  wc -l $OUT/ncu-$w.csv
done
