#!/usr/bin/env bash
# The `t128-words-double` variant these binaries held was an experiment, not kept (BENCHMARKS.md,
# second session of 2026-12-07); the script is kept as the record of what ran.
# Call 2 of 2026-12-07: the double-buffered words kernel (`t128-words-double`, one barrier a
# step) beside the words kernel and cuBLAS in one bench run; test-mma on host + CUDA.
cd "$(dirname "${BASH_SOURCE[0]}")/../.gpu"
bash run.sh true >/dev/null 2>&1   # unpack the binaries and set up the loader
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvrtc=$(ls -d /usr/local/cuda*/targets/x86_64-linux/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="${nvrtc:+$nvrtc:}/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== mma --backend cuda --quick"
timeout 150 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | tee $OUT/mma.txt
echo "== test-mma on host + CUDA"
GRAPHED_TEST_BACKENDS=host,cuda timeout 120 bin/test-mma --test-threads=1 2>&1 | tail -4
