#!/usr/bin/env bash
# Call 6 of 2026-12-07, the same warm machine as call 5: the async and words kernels' stall
# reasons, instructions, shared-memory wavefronts and bank conflicts, tensor-pipe use (Nsight
# Compute, first launch of each: bench-replay's check of the 4096³ forward product).
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 400 "$ncu" -k regex:'matmul_mma_(async|words)_bf16' -c 2 \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio','regex:l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*\.sum$','regex:l1tex__data_pipe_lsu_wavefronts_mem_shared.*\.sum$',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active \
  bin/bench-replay mma --backend cuda --quick 2>&1 | sed -n '/==PROF== Disconnected/,$p' | grep -v "^cuBLASLt" | grep -v "^mma " | head -120
