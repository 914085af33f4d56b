#!/usr/bin/env bash
# Call 6, the same warm machine as call 5: PyTorch's mixed-precision step, then test-mma on
# CUDA + NVIDIA Vulkan and every other packed test binary (host + CUDA + NVIDIA Vulkan).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
export GRAPHED_REQUIRE=cuda,wgpu,nvrtc
echo "== torch_mixed_step.py"
timeout 200 python3 -u files/torch_mixed_step.py 2>&1 | tail -12
echo "== test-mma (cuda,wgpu) --skip tiled_f16"
GRAPHED_TEST_BACKENDS=cuda,wgpu timeout 100 bin/test-mma --skip tiled_f16 2>&1 | tail -6 | tee $OUT/test-mma.txt
echo "== every other test binary"
for t in bin/test-*; do
  name=$(basename "$t")
  [[ $name =~ ^test-(ui|compiletest|trybuild|mma|graphed_macros-unit)$ ]] && { echo "$name: skipped"; continue; }
  if timeout 100 "$t" --test-threads=1 >"$OUT/$name.log" 2>&1; then r=ok; else r="FAILED rc=$?"; fi
  echo "$name: $r: $(grep -E '^test result' "$OUT/$name.log" | tail -1)"
  [[ $r = ok ]] || tail -30 "$OUT/$name.log"
done
