#!/usr/bin/env bash
# Call 5 of the fourth session of 2026-12-07: every tiling of the MLP products, MLP-M's k = 10
# input gradient (512x1024x10) among them (bench-replay tiles).
exec > >(tee "$OUT/all.txt") 2>&1   # the whole output also in a file
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"   # cd .gpu, unpack, name the card, NVRTC
export GRAPHED_REQUIRE=cuda,nvrtc
timeout 200 bin/bench-replay tiles --backend cuda --quick 2>&1 | grep -E "^tiles|^(S|M) " | grep -v "^cuBLASLt"
