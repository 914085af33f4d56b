#!/usr/bin/env bash
# Call 9 of 2026-12-07 (experiment x, not kept: BENCHMARKS.md): the kept async MMA kernel beside
# the same kernel bounded to three workgroups a multiprocessor (166 registers, no spills), with the
# words kernel and cuBLAS.
cd "$(dirname "${BASH_SOURCE[0]}")/../.gpu"
bash run.sh true >/dev/null 2>&1   # unpack the binaries and set up the loader
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvrtc=$(ls -d /usr/local/cuda*/targets/x86_64-linux/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="${nvrtc:+$nvrtc:}/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
export GRAPHED_REQUIRE=cuda,nvrtc
echo "== bench-replay mma --backend cuda --quick"
timeout 200 bin/bench-replay mma --backend cuda --quick 2>&1 | grep -v "^cuBLASLt" | grep -v "^mma " | tee $OUT/mma.txt
