#!/usr/bin/env bash
# Our CPU reference device against PyTorch eager on the CPU: same model, same sizes, same thread
# count, in interleaved pairs; one table of per-pair ratios.
#
# usage: bench/cpu-vs-pytorch.sh [--pairs N] [--threads T] [--case TEXT]...
#
#   --pairs N     pairs per case (default 5); a pair is one run of each side, back to back,
#                 the order flipping from pair to pair
#   --threads T   threads for both sides (default 2): `--threads T` for iteragpu,
#                 torch.set_num_threads(T) and OMP/MKL_NUM_THREADS=T for PyTorch
#   --case TEXT   only the cases whose name contains TEXT (repeatable), e.g. --case w1024
#
# Cases: batch 2 x context 128 x width 1024 in float32, bfloat16 and float16; batch 4 x context
# 512 x width 2048 in float32; a width sweep 64..2048 (batch 2, context 128, float32).
# Builds nothing: expects target/release/iteragpu (`cargo build --release --locked`), or the
# binary named by ITERAGPU_BIN. Sets PyTorch up in .cache/bench-venv on its first run (PyPI).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="${ITERAGPU_BIN:-$root/target/release/iteragpu}"
venv="$root/.cache/bench-venv"
py="$venv/bin/python"

die() { echo "cpu-vs-pytorch: $*" >&2; exit 2; }

pairs=5 threads=2 cases=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pairs) [[ $# -ge 2 ]] || die "--pairs needs a value"; pairs=$2; shift 2 ;;
    --threads) [[ $# -ge 2 ]] || die "--threads needs a value"; threads=$2; shift 2 ;;
    --case) [[ $# -ge 2 ]] || die "--case needs a value"; cases+=(--case "$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (accepted: --pairs N, --threads T, --case TEXT)" ;;
  esac
done
[[ "$pairs" =~ ^[1-9][0-9]*$ ]] || die "--pairs must be a positive integer, not '$pairs'"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, not '$threads'"
[[ -x "$bin" ]] || die "$bin is missing: run 'cargo build --release --locked' first"

# PyTorch from PyPI: the default Linux wheel, which depends on the nvidia-* CUDA wheels (several
# GB). Installing torch with --no-deps does not work: libtorch_global_deps.so links libcudart, so
# `import torch` fails without them even on a CPU-only machine (seen with torch 2.15.0). The CPU
# code paths do not use them.
if ! { [[ -x "$py" ]] && "$py" -c 'import torch' 2>/dev/null; }; then
  echo "cpu-vs-pytorch: setting up PyTorch in $venv (first run only: several GB, minutes)" >&2
  python3 -m venv "$venv"
  "$py" -m pip install --quiet torch numpy >&2
  "$py" -c 'import torch' || die "PyTorch does not import from $venv"
fi

exec "$py" "$root/bench/cpu_pairs.py" --bin "$bin" --python "$py" \
  --eager "$root/bench/cpu_eager.py" --pairs "$pairs" --threads "$threads" "${cases[@]}"
