#!/usr/bin/env bash
# Call 9: where the words MMA kernel stalls, if the machine has Nsight Compute: one launch of
# matmul_mma_words_bf16 at 4096^3 (bench mma's first shape) profiled.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${ncu:-none}"; ls -d /usr/local/cuda* /opt/nvidia* 2>/dev/null
[ -n "$ncu" ] || exit 0
timeout 400 "$ncu" -k regex:matmul_mma_words_bf16 -c 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section SchedulerStats \
  bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | sed -n '/==PROF==/,$p' | head -150
