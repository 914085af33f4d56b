# Sourced by the GPU call scripts docs/gpu-*.sh on the NVIDIA machine: goes to .gpu/, unpacks the
# packed binaries and the Vulkan loader (run.sh), names the card, and points NVRTC at CUDA's
# library for the binaries run directly (run.sh sets it only for what it runs itself).
cd "$(dirname "${BASH_SOURCE[0]}")/../.gpu"
bash run.sh true >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvrtc=$(ls -d /usr/local/cuda*/targets/x86_64-linux/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="${nvrtc:+$nvrtc:}/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}"
