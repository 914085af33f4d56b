#!/usr/bin/env bash
# Call 10, the same warm machine as call 9: the words kernel's stall reasons, shared-memory
# wavefronts and bank conflicts, local-memory traffic and tensor-pipe use (Nsight Compute).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 300 "$ncu" -k regex:matmul_mma_words_bf16 -c 1 \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio',l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.sum,smsp__inst_executed.sum,launch__registers_per_thread,launch__occupancy_limit_registers,sm__warps_active.avg.pct_of_peak_sustained_active \
  bin/bench-replay mma --backend cuda --quick 2>&1 | sed -n '/==PROF== Disconnected/,$p' | grep -v "^cuBLASLt" | head -80
