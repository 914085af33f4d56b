#!/usr/bin/env bash
# The `t128-words-double` variant these binaries held was an experiment, not kept (BENCHMARKS.md,
# second session of 2026-12-07); the script is kept as the record of what ran.
# Call 3 of 2026-12-07: `t128-words-double` now also reads each half step's fragments before
# the products of the half before it, across the barrier (no register bound: 192 registers,
# one workgroup a multiprocessor), beside the words kernel and cuBLAS in one bench run;
# test-mma on host + CUDA; then Nsight Compute's stall reasons for the new kernel.
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== mma --backend cuda --quick"
timeout 150 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -E "^(fwd|dW|dX) " | tee $OUT/mma.txt
echo "== test-mma on host + CUDA"
GRAPHED_TEST_BACKENDS=host,cuda timeout 120 bin/test-mma --test-threads=1 2>&1 | tail -3
echo "== ncu: matmul_mma_words_double_bf16"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 "$ncu" -k regex:matmul_mma_words_double_bf16 -c 1 \
  --metrics 'regex:smsp__average_warps_issue_stalled_(short_scoreboard|wait|barrier|long_scoreboard|mio_throttle|math_pipe_throttle|not_selected|selected|dispatch_stall)_per_issue_active\.ratio',sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
  bin/bench-replay mma --backend cuda --quick 2>&1 | sed -n '/==PROF== Disconnected/,$p' | grep -v "^cuBLASLt" | head -40
