#!/usr/bin/env bash
# The GPU check (DESIGN.md section 6), a judge: run on a GPU machine with the release binary
# carried from the development machine (no Rust needed there), in one call of at most five
# minutes. It says, case by case, whether iteragpu counted what PyTorch counted.
#
#   scripts/gpu-check.sh [OUTPUT_DIR]      (default: $OUT when set, else a new temporary folder)
#
# Steps:
#  1. `iteragpu --version` first: a binary that cannot run here (a glibc older than the one it
#     was built against, a wrong architecture) stops the check at once, with the loader's words.
#  2. nvidia-smi facts before (and after, at the end); `iteragpu environment`.
#  3. Cases, each: `measure` (iteragpu), `measure --plan` for the GPU's compute capability, and
#     bench/pytorch_eager.py with the same options; nvidia-smi's free memory just before each
#     tool starts. float32, float16 and bfloat16 at (batch, context, width) = (1,16,64),
#     (2,128,1024) and (8,4096,8192) (the first two float32 ones are the original kit's examples),
#     one float32 case with --allow-tf32 (on both sides), one bfloat16 case forced onto the PTX
#     JIT (`--kernel-form ptx`; its PyTorch side is the plain bfloat16 case's).
#  4. The refused overwrite (exit 2, file unchanged).
#  5. scripts/gpu_check_report.py judges: per case, every phase row and counter iteragpu |
#     PyTorch | difference | plan with a verdict, both numerical checks, the device-time ratio,
#     the memory outside the allocator of both tools, the case's own expectations.
#
# OUTPUT_DIR receives four files (for a harness that carries back few): gpu-check.log
# (everything printed), summary.txt (the judgement), nvidia-smi.txt (before and after) and
# gpu-check-json.tar.gz (every document). Exit status: 0 when every step passed and every case is
# the same; 1 otherwise (a counter differs, a check failed, a step failed or was skipped for time,
# PyTorch missing on a GPU machine); 2 when the binary is missing or cannot run here.
#
# Environment:
#   ITERAGPU=PATH           the binary (default ./target/release/iteragpu)
#   DEVICE=cuda:N           the device (default cuda:0)
#   PYTHON=PATH             the Python with a CUDA-enabled torch (default python3)
#   GPU_CHECK_BUDGET_S=N    seconds for the whole check (default 280); later steps are skipped,
#                           and counted as failures, once it is spent
#   GPU_CHECK_REHEARSAL=1   rehearse on the CPU reference device with small shapes (DEVICE
#                           defaults to cpu; PyTorch and nvidia-smi are skipped; each run is
#                           judged against its own plan): proves the script and the judge without
#                           a GPU
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
if [ "$REHEARSAL" = 1 ]; then
    DEVICE=${DEVICE:-cpu}
else
    DEVICE=${DEVICE:-cuda:0}
fi
BIN=${ITERAGPU:-./target/release/iteragpu}
BUDGET=${GPU_CHECK_BUDGET_S:-280}
PY=${PYTHON:-python3}
DIR=${1:-${OUT:-}}
[ -n "$DIR" ] || DIR=$(mktemp -d)
mkdir -p "$DIR" || exit 2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# name | options (both tools) | extra options for iteragpu only | judge's notes (peer=, expect=)
if [ "$REHEARSAL" = 1 ]; then
    S="--batch 1 --context 16 --width 64"
    M="--batch 2 --context 16 --width 128"
    L="--batch 2 --context 32 --width 256"
else
    S="--batch 1 --context 16 --width 64"
    M="--batch 2 --context 128 --width 1024"
    L="--batch 8 --context 4096 --width 8192"
fi
CASES=(
    "f32-small|$S --dtype float32 --warmup 1 --repeats 2||"
    "f32-medium|$M --dtype float32 --warmup 3 --repeats 5||"
    "f16-small|$S --dtype float16 --warmup 1 --repeats 2||"
    "f16-medium|$M --dtype float16 --warmup 3 --repeats 5||"
    "bf16-small|$S --dtype bfloat16 --warmup 1 --repeats 2||"
    "bf16-medium|$M --dtype bfloat16 --warmup 3 --repeats 5||"
    "f32-large|$L --dtype float32 --warmup 1 --repeats 3||"
    "f16-large|$L --dtype float16 --warmup 2 --repeats 5||"
    "bf16-large|$L --dtype bfloat16 --warmup 2 --repeats 5||"
    "tf32-medium|$M --dtype float32 --warmup 3 --repeats 5 --allow-tf32||expect=allow_tf32:true"
)
if [ "$REHEARSAL" = 1 ]; then
    CASES+=("ptx-medium|$M --dtype bfloat16 --warmup 3 --repeats 5||peer=bf16-medium")
else
    CASES+=("ptx-medium|$M --dtype bfloat16 --warmup 3 --repeats 5|--kernel-form ptx|peer=bf16-medium|expect=kernel_form:ptx-jit")
fi

failures=0
START=$SECONDS
step() { echo; echo "== [$((SECONDS - START)) s] $*"; }
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# Runs a command under a limit of its own or what is left of the budget; skipped (a failure)
# once the budget is spent.
bounded() {
    local max=$1
    shift
    local left=$((BUDGET - (SECONDS - START)))
    [ "$left" -lt "$max" ] && max=$left
    if [ "$max" -le 5 ]; then
        echo "skipped: the ${BUDGET} s budget is spent"
        return 124
    fi
    timeout "$max" "$@"
}
have_smi() { [ "$REHEARSAL" != 1 ] && command -v nvidia-smi >/dev/null 2>&1; }
smi_facts() {
    if ! have_smi; then
        if [ "$REHEARSAL" = 1 ]; then echo "nvidia-smi: not run (rehearsal)"; else echo "nvidia-smi: not found"; fi
        return
    fi
    nvidia-smi --query-gpu=index,uuid,name,driver_version,pci.bus_id,memory.total,memory.used,memory.free,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,clocks.max.sm,mig.mode.current,compute_mode,persistence_mode,pstate --format=csv 2>&1
    nvidia-smi 2>&1
}
UUID=""
# Free device memory in bytes, as nvidia-smi reports it now (MiB precision), or null.
free_bytes() {
    if have_smi && [ -n "$UUID" ]; then
        local mib
        mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i "$UUID" 2>/dev/null | head -1 | tr -dc '0-9')
        [ -n "$mib" ] && { echo $((mib * 1048576)); return; }
    fi
    echo null
}

main() {
    echo "gpu-check: device $DEVICE, binary $BIN, budget ${BUDGET} s$([ "$REHEARSAL" = 1 ] && echo ', REHEARSAL (CPU, small shapes)')"
    step "the binary runs here"
    if [ ! -x "$BIN" ]; then
        echo "no binary at $BIN (build it with cargo build --release and carry it, or set ITERAGPU)"
        return 2
    fi
    if ! "$BIN" --version; then
        echo "$BIN does not run on this machine (see the loader's message above: a glibc older than"
        echo "the build's, or another architecture); build it for this machine (docs/gpu-runs.md)"
        ldd --version 2>&1 | head -1
        return 2
    fi
    ldd --version 2>&1 | head -1

    step "nvidia-smi before"
    smi_facts | tee "$WORK/nvidia-smi-before.txt"

    step "environment"
    bounded 60 "$BIN" environment --device "$DEVICE" || fail "environment"
    if bounded 60 "$BIN" environment --device "$DEVICE" --json >"$WORK/environment.json"; then
        grep -q '"usable": true' "$WORK/environment.json" || fail "environment: $DEVICE is not usable"
    else
        fail "environment --json"
    fi
    local cc="" plan_device=cpu
    if [ "$REHEARSAL" != 1 ]; then
        cc=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["details"]["gpu"]["compute_capability"])' "$WORK/environment.json" 2>/dev/null)
        UUID=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["details"]["gpu"]["uuid"])' "$WORK/environment.json" 2>/dev/null)
        plan_device=cuda
        [ -n "$cc" ] || fail "no compute capability in the environment report"
    fi

    local torch=0
    if [ "$REHEARSAL" = 1 ]; then
        echo "pytorch: skipped in a rehearsal (each run is judged against its plan)"
    elif command -v "$PY" >/dev/null 2>&1 \
        && "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        torch=1
        "$PY" -c "import torch; print('pytorch', torch.__version__, 'CUDA', torch.version.cuda)"
    else
        fail "pytorch: $PY has no CUDA-enabled torch here, so nothing can be compared with it"
    fi

    local names=() case name opts ours_only notes ours_free torch_free
    for case in "${CASES[@]}"; do
        IFS='|' read -r name opts ours_only notes <<<"$case"
        names+=("$name${notes:+|$notes}")
        notes=${notes//|/ }
        step "$name: iteragpu measure $opts $ours_only"
        ours_free=$(free_bytes)
        # shellcheck disable=SC2086
        bounded 100 "$BIN" measure --device "$DEVICE" $opts $ours_only --output "$WORK/$name.json" \
            || fail "measure $name (exit $?)"
        if [ "$plan_device" = cuda ] && [ -n "$cc" ]; then
            # shellcheck disable=SC2086
            "$BIN" measure --plan --device cuda --compute-capability "$cc" $opts --json >"$WORK/$name.plan.json" \
                || fail "measure --plan $name"
        elif [ "$plan_device" = cpu ]; then
            # shellcheck disable=SC2086
            "$BIN" measure --plan --device cpu $opts --json >"$WORK/$name.plan.json" || fail "measure --plan $name"
        fi
        torch_free=null
        if [ "$torch" = 1 ] && [[ "$notes" != *peer=* ]]; then
            step "$name: pytorch eager"
            torch_free=$(free_bytes)
            # shellcheck disable=SC2086
            # PyTorch's defaults, as iteragpu's (whose knobs are options, not the environment).
            bounded 120 env -u CUBLAS_WORKSPACE_CONFIG -u CUBLASLT_WORKSPACE_SIZE \
                -u TORCH_CUBLASLT_UNIFIED_WORKSPACE -u PYTORCH_CUDA_ALLOC_CONF \
                "$PY" bench/pytorch_eager.py --device "$DEVICE" $opts --output "$WORK/$name.torch.json" \
                || fail "pytorch $name (exit $?)"
        fi
        echo "{\"ours\": $ours_free, \"torch\": $torch_free}" >"$WORK/$name.free.json"
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

    step "nvidia-smi after"
    smi_facts | tee "$WORK/nvidia-smi-after.txt"
    { echo "== before"; cat "$WORK/nvidia-smi-before.txt"; echo; echo "== after"; cat "$WORK/nvidia-smi-after.txt"; } >"$DIR/nvidia-smi.txt"

    step "judgement"
    local peer_flag=()
    [ "$REHEARSAL" = 1 ] || peer_flag=(--require-peer)
    if command -v "$PY" >/dev/null 2>&1; then
        "$PY" scripts/gpu_check_report.py "$WORK" "${peer_flag[@]}" "${names[@]}" | tee "$DIR/summary.txt"
        [ "${PIPESTATUS[0]}" -eq 0 ] || fail "the judgement found differences or failures (summary.txt)"
    else
        fail "no $PY to judge with"
    fi
    tar -czf "$DIR/gpu-check-json.tar.gz" -C "$WORK" . || fail "packing the documents"
    echo
    echo "outputs: $DIR/gpu-check.log, $DIR/summary.txt, $DIR/nvidia-smi.txt, $DIR/gpu-check-json.tar.gz ($((SECONDS - START)) s)"
    if [ "$failures" -eq 0 ]; then
        echo "gpu-check: all steps passed, every case the same"
        return 0
    fi
    echo "gpu-check: $failures step(s) failed"
    return 1
}

main 2>&1 | tee "$DIR/gpu-check.log"
exit "${PIPESTATUS[0]}"
