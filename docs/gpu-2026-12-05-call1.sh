#!/usr/bin/env bash
# Call 1: the words route for gradient products timed (bench mma), test-mma on CUDA + NVIDIA
# Vulkan, then every other packed test binary (host + CUDA + NVIDIA Vulkan).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc
echo "== bench-replay mma --backend cuda"
timeout 200 bin/bench-replay mma --backend cuda 2>&1 | tee $OUT/bench-mma.txt
echo "== test-mma (cuda,wgpu) --skip tiled_f16"
GRAPHED_TEST_BACKENDS=cuda,wgpu timeout 150 bin/test-mma --skip tiled_f16 2>&1 | tail -25 | tee $OUT/test-mma.txt
echo "== test-mma tiled_f16 (cuda)"
GRAPHED_TEST_BACKENDS=cuda timeout 60 bin/test-mma tiled_f16 2>&1 | tail -5 | tee -a $OUT/test-mma.txt
echo "== every other test binary"
for t in bin/test-*; do
  name=$(basename "$t")
  [[ $name =~ ^test-(ui|compiletest|trybuild|mma|graphed_macros-unit)$ ]] && { echo "$name: skipped"; continue; }
  if timeout 120 "$t" --test-threads=1 >"$OUT/$name.log" 2>&1; then r=ok; else r="FAILED rc=$?"; fi
  echo "$name: $r: $(grep -E '^test result' "$OUT/$name.log" | tail -1)"
  [[ $r = ok ]] || tail -30 "$OUT/$name.log"
done
