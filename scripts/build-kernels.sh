#!/usr/bin/env bash
# Compiles kernels/lab.cu to PTX (NVRTC) and to cubins (ptxas), without a GPU.
#
#   scripts/build-kernels.sh            regenerate kernels/generated/
#   scripts/build-kernels.sh OUT_DIR    write into OUT_DIR instead (CI compares it with the
#                                       committed files)
#
# The tools come from PyPI wheels installed into a venv under .cache/ (gitignored, reused):
#  - nvidia-cuda-nvrtc-cu12 12.0.x: its PTX carries `.version 8.0`, which every R525+ driver can
#    JIT (a newer NVRTC writes a newer PTX ISA that older drivers refuse);
#  - nvidia-cuda-nvcc-cu12 12.9.x: its ptxas knows the newest architectures (sm_100, sm_120).
# Both versions are pinned so that the outputs are reproducible byte for byte.
set -euo pipefail
cd "$(dirname "$0")/.."

NVRTC_VERSION=12.0.140
NVCC_VERSION=12.9.86
ARCHS="sm_80 sm_86 sm_89 sm_90 sm_100 sm_120"
OUT=${1:-kernels/generated}
VENV=.cache/kernel-tools/venv

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.versions" 2>/dev/null)" != "$NVRTC_VERSION $NVCC_VERSION" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        "nvidia-cuda-nvrtc-cu12==$NVRTC_VERSION" "nvidia-cuda-nvcc-cu12==$NVCC_VERSION"
    echo "$NVRTC_VERSION $NVCC_VERSION" > "$VENV/.versions"
fi
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NVRTC_LIB="$SITE/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
PTXAS="$SITE/nvidia/cuda_nvcc/bin/ptxas"

mkdir -p "$OUT"
"$VENV/bin/python" scripts/nvrtc_ptx.py "$NVRTC_LIB" kernels/lab.cu "$OUT/lab.ptx" \
    -arch=compute_80 -default-device -std=c++17
for arch in $ARCHS; do
    "$PTXAS" -arch="$arch" -O3 "$OUT/lab.ptx" -o "$OUT/lab.$arch.cubin"
done
echo "kernels: $OUT/lab.ptx and cubins for $ARCHS ($("$PTXAS" --version | tail -1))"
