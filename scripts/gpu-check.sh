#!/usr/bin/env bash
# The GPU check (DESIGN.md section 6): run on a GPU machine with the release binary carried from
# the development machine; no Rust needed there. Budget: under five minutes on one GPU.
#
#   scripts/gpu-check.sh [OUTPUT_DIR]      (default: $OUT when set, else a new temporary folder)
#
# Runs: environment; the original's two example measurements; float16 and bfloat16 at batch 2,
# context 128, width 1024; a large bfloat16 case (batch 8, context 4096, width 8192) with achieved
# TFLOP/s of the warm forward; a refused overwrite (exit 2, file unchanged); and, where
# `import torch` finds a GPU, the same protocol in PyTorch eager (bench/pytorch_eager.py) with both
# tools' counters phase by phase and the time ratios. Ends with one short table.
#
# OUTPUT_DIR receives three files only (so a harness that carries back a few files gets all of
# it): gpu-check.log (everything printed), gpu-check-json.tar.gz (every JSON document) and
# summary.txt (the final table). Exit status: 0 when every step passed, 1 otherwise, 2 when the
# binary is missing.
#
# Environment:
#   ITERAGPU=PATH           the binary (default ./target/release/iteragpu)
#   DEVICE=cuda:N           the device (default cuda:0)
#   GPU_CHECK_BUDGET_S=N    seconds for the whole check (default 270); later steps are skipped
#                           (and counted as failures) once it is spent
#   GPU_CHECK_REHEARSAL=1   rehearse on the CPU reference device with small shapes (DEVICE
#                           defaults to cpu, PyTorch is skipped): proves the script, parsing and
#                           table without a GPU
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
if [ "$REHEARSAL" = 1 ]; then
    DEVICE=${DEVICE:-cpu}
else
    DEVICE=${DEVICE:-cuda:0}
fi
BIN=${ITERAGPU:-./target/release/iteragpu}
BUDGET=${GPU_CHECK_BUDGET_S:-270}
PY=${PYTHON:-python3}
DIR=${1:-${OUT:-}}
[ -n "$DIR" ] || DIR=$(mktemp -d)
mkdir -p "$DIR" || exit 2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# name | options. The first two are the original kit's examples.
if [ "$REHEARSAL" = 1 ]; then
    CASES=(
        "f32-small|--batch 1 --context 16 --width 64 --dtype float32 --warmup 1 --repeats 2"
        "f32-medium|--batch 2 --context 16 --width 128 --dtype float32 --warmup 3 --repeats 5"
        "f16-medium|--batch 2 --context 16 --width 128 --dtype float16 --warmup 3 --repeats 5"
        "bf16-medium|--batch 2 --context 16 --width 128 --dtype bfloat16 --warmup 3 --repeats 5"
        "bf16-large|--batch 2 --context 32 --width 256 --dtype bfloat16 --warmup 2 --repeats 5"
    )
else
    CASES=(
        "f32-small|--batch 1 --context 16 --width 64 --dtype float32 --warmup 1 --repeats 2"
        "f32-medium|--batch 2 --context 128 --width 1024 --dtype float32 --warmup 3 --repeats 5"
        "f16-medium|--batch 2 --context 128 --width 1024 --dtype float16 --warmup 3 --repeats 5"
        "bf16-medium|--batch 2 --context 128 --width 1024 --dtype bfloat16 --warmup 3 --repeats 5"
        "bf16-large|--batch 8 --context 4096 --width 8192 --dtype bfloat16 --warmup 2 --repeats 5"
    )
fi
NAMES=()
for case in "${CASES[@]}"; do NAMES+=("${case%%|*}"); done

failures=0
START=$SECONDS
step() { echo; echo "== [$((SECONDS - START)) s] $*"; }
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# Seconds a step may take: its own limit, or what is left of the budget.
limit() {
    local left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
# Runs a command under `limit`; skips it (as a failure) once the budget is spent.
bounded() {
    local max=$1
    shift
    local t
    t=$(limit "$max")
    if [ "$t" -le 5 ]; then
        echo "skipped: the ${BUDGET} s budget is spent"
        return 124
    fi
    timeout "$t" "$@"
}

summary() {
    if command -v "$PY" >/dev/null 2>&1; then
        "$PY" - "$WORK" "${NAMES[@]}" <<'PY'
import json, os, statistics, sys

d, names = sys.argv[1], sys.argv[2:]
MiB = 1024 * 1024


def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def rows(doc, phase):
    return [r for r in (doc or {}).get("phases", []) if r.get("phase") == phase]


def seconds(doc, phase):
    """Median device seconds of a phase's rows, else median wall seconds; and which clock."""
    rs = rows(doc, phase)
    dev = [r["device_seconds"] for r in rs if r.get("device_seconds")]
    if dev:
        return statistics.median(dev), "dev"
    wall = [r["wall_seconds"] for r in rs if r.get("wall_seconds")]
    return (statistics.median(wall), "wall") if wall else (None, "")


def num(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


env = load(os.path.join(d, "environment.json")) or {}
det = env.get("details") or {}
gpu = det.get("gpu") or {}
libs = det.get("libraries") or {}
print(
    f"device {env.get('requested_device')}: {gpu.get('name') or env.get('backend')} "
    f"cc {gpu.get('compute_capability', '-')}, driver {(det.get('nvml') or {}).get('driver_version', '-')} "
    f"(CUDA {(det.get('driver') or {}).get('cuda_version', '-')}), kernels {det.get('kernel_form', '-')}, "
    f"cuBLAS {(libs.get('cublas') or {}).get('version', '-')}"
)
print(
    f"{'case':<12} {'dtype':<9} {'shape':<14} {'cold ms':>9} {'warm ms':>9} {'TFLOP/s':>8} "
    f"{'peak res MiB':>12} {'check':>11} {'torch ms':>9} {'ratio':>6}"
)
for n in names:
    doc = load(os.path.join(d, n + ".json"))
    if not doc:
        print(f"{n:<12} (no document)")
        continue
    c, m = doc["configuration"], doc["synthetic_model"]
    cold, _ = seconds(doc, "cold_forward")
    warm, clock = seconds(doc, "warm_forward")
    tflops = m["forward_flops"] / warm / 1e12 if warm else None
    peak = max((r["memory"]["peak_reserved_bytes"] for r in doc.get("phases", [])), default=None)
    chk = doc.get("check") or {}
    verdict = (num(chk.get("relative_error"), ".1e") + (" ok" if chk.get("passed") else " BAD")) if chk else "none"
    tdoc = load(os.path.join(d, n + ".torch.json"))
    twarm, _ = seconds(tdoc, "warm_forward") if tdoc else (None, "")
    ratio = warm / twarm if (warm and twarm) else None
    shape = f"{c['batch']}x{c['context']}x{c['width']}"
    print(
        f"{n:<12} {c['dtype']:<9} {shape:<14} {num(cold and cold * 1e3, '9.3f'):>9} "
        f"{num(warm and warm * 1e3, '9.3f'):>9} {num(tflops, '8.2f'):>8} "
        f"{num(peak and peak / MiB, '12.1f'):>12} {verdict:>11} {num(twarm and twarm * 1e3, '9.3f'):>9} "
        f"{num(ratio, '6.2f'):>6}" + ("" if clock in ("dev", "") else f"  ({clock} clock)")
    )
    if not doc.get("complete"):
        print(f"   incomplete: {(doc.get('error') or {}).get('message')}")

for n in names:
    doc, tdoc = load(os.path.join(d, n + ".json")), load(os.path.join(d, n + ".torch.json"))
    if not (doc and tdoc):
        continue
    print(f"\n{n}: allocator counters in MiB (iteragpu | pytorch); time ratio iteragpu/pytorch (device clocks)")
    print(f"  {'phase':<15} {'end alloc':>19} {'peak alloc':>19} {'end reserved':>19} {'peak reserved':>19} {'ratio':>6}")
    theirs = {(r["phase"], r["index"]): r for r in tdoc.get("phases", [])}
    for a in doc.get("phases", []):
        b = theirs.get((a["phase"], a["index"]))
        if b is None:
            continue
        ma, mb = a["memory"], b["memory"]

        def pair(k):
            return f"{ma[k] / MiB:8.1f} | {mb[k] / MiB:8.1f}"

        ra, rb = a.get("device_seconds"), b.get("device_seconds")
        label = a["phase"] + (f"[{a['index']}]" if a["phase"] == "warm_forward" else "")
        print(
            f"  {label:<15} {pair('end_allocated_bytes'):>19} {pair('peak_allocated_bytes'):>19} "
            f"{pair('end_reserved_bytes'):>19} {pair('peak_reserved_bytes'):>19} "
            f"{num(ra / rb if (ra and rb) else None, '6.2f'):>6}"
        )
PY
    elif command -v jq >/dev/null 2>&1; then
        for name in "${NAMES[@]}"; do
            [ -f "$WORK/$name.json" ] && jq -r --arg n "$name" \
                '[$n, .configuration.dtype, (.check.relative_error|tostring), (.complete|tostring)] | @tsv' \
                "$WORK/$name.json"
        done
    else
        for name in "${NAMES[@]}"; do
            echo "$name: $(grep -o '"complete": [a-z]*' "$WORK/$name.json" 2>/dev/null)"
        done
    fi
}

main() {
    echo "gpu-check: device $DEVICE, binary $BIN, budget ${BUDGET} s$([ "$REHEARSAL" = 1 ] && echo ', REHEARSAL (CPU, small shapes)')"
    if [ ! -x "$BIN" ]; then
        echo "no binary at $BIN (build it with cargo build --release and carry it, or set ITERAGPU)"
        return 2
    fi

    step "environment"
    bounded 60 "$BIN" environment --device "$DEVICE" || fail "environment"
    if bounded 60 "$BIN" environment --device "$DEVICE" --json >"$WORK/environment.json"; then
        grep -q '"usable": true' "$WORK/environment.json" || fail "environment: $DEVICE is not usable"
    else
        fail "environment --json"
    fi

    for case in "${CASES[@]}"; do
        local name=${case%%|*} opts=${case#*|}
        step "measure $name: $opts"
        # shellcheck disable=SC2086
        bounded 100 "$BIN" measure --device "$DEVICE" $opts --output "$WORK/$name.json" \
            || fail "measure $name (exit $?)"
    done

    step "refused overwrite"
    local target="$WORK/f32-small.json" before rc
    if [ ! -f "$target" ]; then
        fail "no f32-small.json to try overwriting"
    else
        before=$(sha256sum "$target")
        bounded 30 "$BIN" measure --device "$DEVICE" --batch 1 --context 16 --width 64 \
            --dtype float32 --warmup 1 --repeats 2 --output "$target"
        rc=$?
        if [ "$rc" -eq 2 ]; then
            echo "refused with exit 2, as expected"
        else
            fail "an existing --output gave exit $rc, not 2"
        fi
        [ "$before" = "$(sha256sum "$target")" ] || fail "the existing file changed"
    fi

    if [ "$REHEARSAL" = 1 ]; then
        step "pytorch eager: skipped in a rehearsal"
    elif command -v "$PY" >/dev/null 2>&1 \
        && "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        for case in "${CASES[@]}"; do
            local name=${case%%|*} opts=${case#*|}
            step "pytorch eager $name"
            # shellcheck disable=SC2086
            bounded 100 "$PY" bench/pytorch_eager.py --device "$DEVICE" $opts \
                --output "$WORK/$name.torch.json" || fail "pytorch $name (exit $?)"
        done
    else
        step "pytorch eager: skipped ($PY with a CUDA-enabled torch is not installed here)"
    fi

    step "summary"
    summary | tee "$DIR/summary.txt"
    tar -czf "$DIR/gpu-check-json.tar.gz" -C "$WORK" . || fail "packing the JSON documents"
    echo
    echo "outputs: $DIR/gpu-check.log, $DIR/gpu-check-json.tar.gz, $DIR/summary.txt ($((SECONDS - START)) s)"
    if [ "$failures" -eq 0 ]; then
        echo "gpu-check: all steps passed"
        return 0
    fi
    echo "gpu-check: $failures step(s) failed"
    return 1
}

main 2>&1 | tee "$DIR/gpu-check.log"
exit "${PIPESTATUS[0]}"
