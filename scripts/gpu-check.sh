#!/usr/bin/env bash
# The GPU check (DESIGN.md section 6): run on a GPU machine with the release binary carried from
# the development machine; no Rust needed there. At most about five minutes.
#
#   scripts/gpu-check.sh [OUTPUT_DIR]      (default: $OUT when set, else a temporary folder)
#
# Runs: environment; the original's two example measurements (float32); float16 and bfloat16 at
# batch 2, context 128, width 1024; a large bfloat16 case (batch 8, context 4096, width 8192) with
# achieved TFLOP/s of the warm forward; a refused overwrite; and, where `import torch` works, the
# same protocol in PyTorch eager (bench/pytorch_eager.py) with both tools' counters phase by phase
# and time ratios. Ends with one short table. Exit status: non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

BIN=${ITERAGPU:-./target/release/iteragpu}
DIR=${1:-${OUT:-$(mktemp -d)}}
mkdir -p "$DIR"
failures=0
step() { echo; echo "== $*"; }
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

[ -x "$BIN" ] || { echo "no binary at $BIN (build with cargo build --release and carry it)"; exit 2; }

step "environment"
timeout 60 "$BIN" environment --device cuda:0 || fail "environment"
timeout 60 "$BIN" environment --device cuda:0 --json > "$DIR/environment.json" || fail "environment --json"

# name | options
CASES=(
  "f32-small|--batch 1 --context 16 --width 64 --dtype float32 --warmup 1 --repeats 2"
  "f32-medium|--batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5"
  "f16-medium|--batch 2 --context 128 --width 1024 --dtype float16 --warmup 3 --repeats 5"
  "bf16-medium|--batch 2 --context 128 --width 1024 --dtype bfloat16 --warmup 3 --repeats 5"
  "bf16-large|--batch 8 --context 4096 --width 8192 --dtype bfloat16 --warmup 2 --repeats 5"
)

for case in "${CASES[@]}"; do
    name=${case%%|*}
    opts=${case#*|}
    step "measure $name: $opts"
    # shellcheck disable=SC2086
    timeout 120 "$BIN" measure --device cuda:0 $opts --output "$DIR/$name.json" || fail "measure $name"
done

step "refused overwrite"
before=$(sha256sum "$DIR/f32-small.json" 2>/dev/null)
if [ ! -f "$DIR/f32-small.json" ]; then
    fail "no f32-small.json to try overwriting"
elif timeout 60 "$BIN" measure --device cuda:0 --batch 1 --context 16 --width 64 --dtype float32 \
    --warmup 1 --repeats 2 --output "$DIR/f32-small.json"; then
    fail "an existing output file was not refused"
else
    echo "refused (exit $?), as expected"
    [ "$before" = "$(sha256sum "$DIR/f32-small.json")" ] || fail "the existing file changed"
fi

if command -v python3 >/dev/null && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    for case in "${CASES[@]}"; do
        name=${case%%|*}
        opts=${case#*|}
        step "pytorch eager $name"
        # shellcheck disable=SC2086
        timeout 120 python3 bench/pytorch_eager.py --device cuda:0 $opts --output "$DIR/$name.torch.json" \
            || fail "pytorch $name"
    done
else
    step "pytorch eager: skipped (python3 with a CUDA-enabled torch is not installed here)"
fi

step "summary ($DIR)"
if command -v python3 >/dev/null; then
    python3 - "$DIR" "${CASES[@]%%|*}" <<'PY'
import json, os, statistics, sys
d, names = sys.argv[1], sys.argv[2:]
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except (OSError, ValueError): return None
env = load(os.path.join(d, "environment.json")) or {}
det = env.get("details") or {}
gpu = det.get("gpu") or {}
print(f"GPU: {gpu.get('name')} cc {gpu.get('compute_capability')}  driver {((det.get('nvml') or {}).get('driver_version'))} "
      f"(CUDA {(det.get('driver') or {}).get('cuda_version')})  kernels: {det.get('kernel_form')}  "
      f"cuBLAS {((det.get('libraries') or {}).get('cublas') or {}).get('version')}")
print(f"{'case':<12} {'dtype':<9} {'shape':<16} {'warm ms':>9} {'TFLOP/s':>8} {'check':>10} {'torch ms':>9} {'ratio':>6}")
def warm(doc):
    t = [r["device_seconds"] for r in doc.get("phases", []) if r["phase"] == "warm_forward" and r.get("device_seconds")]
    return statistics.median(t) if t else None
for n in names:
    doc = load(os.path.join(d, n + ".json"))
    if not doc:
        print(f"{n:<12} (no document)"); continue
    c, m = doc["configuration"], doc["synthetic_model"]
    w = warm(doc)
    tf = m["forward_flops"] / w / 1e12 if w else None
    chk = doc.get("check") or {}
    torch_doc = load(os.path.join(d, n + ".torch.json"))
    tw = warm(torch_doc) if torch_doc else None
    shape = f"{c['batch']}x{c['context']}x{c['width']}"
    print(f"{n:<12} {c['dtype']:<9} {shape:<16} {w*1e3 if w else float('nan'):>9.3f} {tf if tf else float('nan'):>8.1f} "
          f"{('%.1e' % chk['relative_error']) + (' ok' if chk.get('passed') else ' BAD') if chk else 'none':>10} "
          f"{tw*1e3 if tw else float('nan'):>9.3f} {w/tw if (w and tw) else float('nan'):>6.2f}")
    if not doc.get("complete"):
        print(f"   incomplete: {(doc.get('error') or {}).get('message')}")
MiB = 1024 * 1024
for n in names:
    doc, tdoc = load(os.path.join(d, n + ".json")), load(os.path.join(d, n + ".torch.json"))
    if not (doc and tdoc): continue
    print(f"\n{n}: allocator counters, MiB (iteragpu | pytorch), device seconds ratio iteragpu/pytorch")
    print(f"  {'phase':<15} {'end alloc':>19} {'peak alloc':>19} {'end reserved':>19} {'peak reserved':>19} {'time ratio':>10}")
    for a, b in zip(doc["phases"], tdoc["phases"]):
        ma, mb = a["memory"], b["memory"]
        def pair(k): return f"{ma[k]/MiB:8.1f} | {mb[k]/MiB:8.1f}"
        ratio = a["device_seconds"] / b["device_seconds"] if a.get("device_seconds") and b.get("device_seconds") else float("nan")
        label = a["phase"] + (f"[{a['index']}]" if a["phase"] == "warm_forward" else "")
        print(f"  {label:<15} {pair('end_allocated_bytes'):>19} {pair('peak_allocated_bytes'):>19} "
              f"{pair('end_reserved_bytes'):>19} {pair('peak_reserved_bytes'):>19} {ratio:>10.2f}")
PY
elif command -v jq >/dev/null; then
    for name in "${CASES[@]%%|*}"; do
        [ -f "$DIR/$name.json" ] && jq -r --arg n "$name" \
            '[$n, .configuration.dtype, (.check.relative_error|tostring), (.complete|tostring)] | @tsv' "$DIR/$name.json"
    done
else
    for name in "${CASES[@]%%|*}"; do
        echo "$name: $(grep -o '"complete": [a-z]*' "$DIR/$name.json" 2>/dev/null)"
    done
fi

echo
if [ "$failures" -eq 0 ]; then echo "gpu-check: all steps passed"; else echo "gpu-check: $failures step(s) failed"; fi
[ "$failures" -eq 0 ]
