#!/usr/bin/env bash
# Our CPU reference device against PyTorch eager on the CPU, same model and sizes, side by side.
#
# usage: bench/cpu-vs-pytorch.sh [--rounds N] [--threads T] [--dtype float32|bfloat16|float16]
#
# Builds nothing: expects target/release/iteragpu (run `cargo build --release` first), or the
# binary named by ITERAGPU_BIN (to compare two builds). Sets up
# PyTorch (CPU use only) in .cache/bench-venv when it is missing, from PyPI. Runs
# `iteragpu measure --device cpu` and bench/cpu_eager.py alternately, N rounds each (the order
# flips every round so neither side always runs on a cooler or warmer machine), and prints one
# table of the median warm_forward wall time over all warm passes of all rounds.
#
# --threads T sets MATMUL_NUM_THREADS=T for us (matrixmultiply, capped at 4) and
# torch.set_num_threads(T) for PyTorch; without it each side picks its own default.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="${ITERAGPU_BIN:-$root/target/release/iteragpu}"
venv="$root/.cache/bench-venv"
py="$venv/bin/python"

rounds=3
threads=""
dtype=float32
batch=2 context=128 width=1024 warmup=3 repeats=10

die() { echo "cpu-vs-pytorch: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) [[ $# -ge 2 ]] || die "--rounds needs a value"; rounds=$2; shift 2 ;;
    --threads) [[ $# -ge 2 ]] || die "--threads needs a value"; threads=$2; shift 2 ;;
    --dtype) [[ $# -ge 2 ]] || die "--dtype needs a value"; dtype=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (accepted: --rounds N, --threads T, --dtype D)" ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, not '$rounds'"
[[ -z "$threads" || "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, not '$threads'"
case "$dtype" in float32|bfloat16|float16) ;; *) die "--dtype must be float32, bfloat16 or float16, not '$dtype'" ;; esac
[[ -x "$bin" ]] || die "$bin is missing: run 'cargo build --release' first"

# PyTorch from PyPI: the only index reachable here, so the default Linux wheel, which depends on
# the nvidia-* CUDA wheels (several GB). Installing torch with --no-deps does not work:
# libtorch_global_deps.so links libcudart, so `import torch` fails without them even on a CPU-only
# machine (seen with torch 2.15.0). The CPU code paths do not use them.
setup_torch() {
  if [[ -x "$py" ]] && "$py" -c 'import torch' 2>/dev/null; then
    return 0
  fi
  echo "cpu-vs-pytorch: setting up PyTorch in $venv (first run only: several GB, minutes)" >&2
  python3 -m venv "$venv"
  "$py" -m pip install --quiet torch numpy >&2
  "$py" -c 'import torch' || die "PyTorch does not import from $venv"
}
setup_torch

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

physical_cores=$(lscpu -p=CORE,SOCKET 2>/dev/null | grep -v '^#' | sort -u | wc -l)
if [[ -n "$threads" ]]; then
  export MATMUL_NUM_THREADS=$threads
  torch_threads=(--threads "$threads")
  ours_threads="$threads"
else
  torch_threads=()
  ours_threads="${MATMUL_NUM_THREADS:-$physical_cores}"
fi
# matrixmultiply clamps its thread count to 1..=4.
ours_threads=$(( ours_threads < 1 ? 1 : (ours_threads > 4 ? 4 : ours_threads) ))

sizes=(--batch "$batch" --context "$context" --width "$width" --dtype "$dtype"
       --warmup "$warmup" --repeats "$repeats")

run_ours() {
  "$bin" measure --device cpu "${sizes[@]}" --output "$tmp/ours-$1.json" --json \
    > "$tmp/ours-$1.stdout"
}
run_torch() {
  "$py" "$root/bench/cpu_eager.py" "${sizes[@]}" "${torch_threads[@]}" > "$tmp/torch-$1.json"
}

# Other processes competing for the cores distort wall times: say how busy the machine was.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= rounds; r++)); do
  echo "cpu-vs-pytorch: round $r of $rounds" >&2
  if (( r % 2 )); then run_ours "$r"; run_torch "$r"; else run_torch "$r"; run_ours "$r"; fi
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)

"$py" - "$tmp" "$rounds" "$ours_threads" "$load_before" "$load_after" <<'EOF'
import json, os, statistics, sys
tmp, rounds, ours_threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
load_before, load_after = sys.argv[4], sys.argv[5]
ours, torch_, ours_rounds, torch_rounds = [], [], [], []
for r in range(1, rounds + 1):
    with open(f"{tmp}/ours-{r}.json") as f:
        doc = json.load(f)
    if not doc.get("complete"):
        sys.exit(f"cpu-vs-pytorch: iteragpu run {r} is not complete: {doc.get('error')}")
    w = [p["wall_seconds"] for p in doc["phases"] if p["phase"] == "warm_forward"]
    ours += w
    ours_rounds.append(statistics.median(w))
    with open(f"{tmp}/torch-{r}.json") as f:
        t = json.load(f)
    torch_ += t["warm_forward_seconds"]
    torch_rounds.append(t["warm_forward_median_seconds"])
cfg = doc["configuration"]
mo, mt = statistics.median(ours), statistics.median(torch_)
ms = lambda s: f"{s * 1e3:.2f} ms"
print(f"model: Linear({cfg['width']}->{cfg['hidden']}) -> GELU(erf) -> Linear({cfg['hidden']}->{cfg['width']}), "
      f"batch {cfg['batch']}, context {cfg['context']}, {cfg['dtype']}, "
      f"warmup {cfg['warmup']}, {cfg['repeats']} warm passes x {rounds} rounds")
print(f"cpu:   {t['cpu_model']}; torch {t['torch']} (capability {t['cpu_capability']}); "
      f"iteragpu {doc['tool']['version']}")
print(f"load:  {load_before} before, {load_after} after (1/5/15-minute averages; "
      f"{os.cpu_count()} CPUs)")
print()
print(f"{'':28}{'iteragpu --device cpu':>24}{'pytorch eager cpu':>20}")
print(f"{'median warm_forward':28}{ms(mo):>24}{ms(mt):>20}")
print(f"{'min warm_forward':28}{ms(min(ours)):>24}{ms(min(torch_)):>20}")
print(f"{'per-round medians':28}{' '.join(f'{s*1e3:.1f}' for s in ours_rounds):>24}"
      f"{' '.join(f'{s*1e3:.1f}' for s in torch_rounds):>20}")
print(f"{'GFLOP/s at the median':28}{t['forward_flops'] / mo / 1e9:>24.1f}{t['forward_flops'] / mt / 1e9:>20.1f}")
print(f"{'threads':28}{f'{ours_threads} (matrixmultiply GEMM)':>24}{t['threads']:>20}")
print(f"{'ratio ours / torch':28}{mo / mt:>24.2f}")
EOF
