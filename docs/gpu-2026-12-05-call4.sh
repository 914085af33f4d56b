#!/usr/bin/env bash
# Call 4: where Auto's words route for gradient products starts paying (bench mma-k).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 bin/bench-replay mma-k --backend cuda 2>&1 | grep -v "^cuBLASLt" | tee $OUT/bench-mma-k.txt
