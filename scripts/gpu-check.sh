#!/usr/bin/env bash
# The GPU check (DESIGN.md section 6), a judge: run on a GPU machine with the release binary
# carried from the development machine (no Rust needed there). It says, case by case, whether
# iteragpu counted what PyTorch counted. It is a one-shot: ONE call, at most ten minutes of
# device time of which the machine's start takes one or two, no room for a second try. The
# call, exactly:
#
#   scripts/gpu-check.sh "$OUT"     with carry ["target/release/iteragpu"] and timeout_s 420
#
# (the whole run must end within 420 s; the default budget of 360 s leaves 60 s for the steps
# that always run after it: nvidia-smi, the judgement, the packing; then give_back).
#
#   scripts/gpu-check.sh [OUTPUT_DIR]      (default: $OUT when set, else a new temporary folder)
#
# Steps (one start-up per tool and step: each `environment` runs once, in JSON, and its text is
# derived from the JSON; `import torch` runs once before the cases):
#  0. The plan: every step with an ESTIMATE of its seconds from the shapes and its share of the
#     budget (printed before anything runs; a rehearsal also prints the GPU run's plan).
#  1. `iteragpu --version` first: a binary that cannot run here (a glibc older than the one it
#     was built against, a wrong architecture) stops the check at once, with the loader's words.
#  2. nvidia-smi facts before (and after, at the end). The torch knobs (TORCH_KNOBS below) are
#     recorded as found (torch-knobs.json) and cleared for every tool.
#  3. One `python3 -c` that imports torch, runs one tiny CUDA product and prints torch's version
#     and the libcublas*/libcublasLt* files it mapped (/proc/self/maps); every iteragpu command
#     after it runs with LD_LIBRARY_PATH starting with that folder, so both tools load the same
#     cuBLAS (iteragpu's loader searches the loader path first). A torch other than 2.11.0 is
#     a failed step (iteragpu mirrors 2.11), still compared (and every case fails on it).
#  4. `iteragpu environment --json` (the same cuBLAS files as torch's, or a failed step).
#  5. Cases, each: `measure` (iteragpu's native engine), `measure --plan` for the GPU's compute
#     capability, and `measure --engine torch --python $PYTHON` with the same options; nvidia-smi's free memory just before each
#     tool starts. float32, float16 and bfloat16 at (batch, context, width) = (1,16,64),
#     (1,1,64) (batch x context = 1: torch leaves the cuBLASLt path there), (2,128,1024) and
#     (8,4096,8192) (the first two float32 ones are the original kit's examples), one float32
#     case with --allow-tf32 (on both sides), one bfloat16 case forced onto the PTX JIT
#     (`--kernel-form ptx`; its PyTorch side is the plain bfloat16 case's). After each case,
#     every document so far is re-packed into OUTPUT_DIR and the cases so far re-judged.
#  6. `environment --device all --json` (the lot checks) and `probe --device all` (copy bandwidth
#     and GEMM throughput per GPU against the datasheet), at most GPU_CHECK_PROBE_S seconds of
#     probing in all, shared among the GPUs and never more than the budget leaves (the CPU's
#     host copies in a rehearsal).
#  7. The refused overwrite (exit 2, file unchanged).
#  8. scripts/gpu_check_report.py judges: per case, every phase row and counter iteragpu |
#     PyTorch | difference | plan with a verdict (a null counter is never the same), the
#     workspaces PyTorch was OBSERVED to allocate (named by what torch allocated them for, in
#     allocation order) against iteragpu's memory_policy, the cuBLAS files of both tools (the
#     same files), the knobs PyTorch ran with (none), the TF32 setting PyTorch's products ran
#     with (read back from torch) against iteragpu's, torch 2.11.0, both numerical checks, the
#     device-time ratio, the memory
#     outside the allocator of both tools, the case's own expectations; then prints the probe's
#     figures as percentages of the datasheet (reported, not judged).
#
# OUTPUT_DIR receives four flat files, each rewritten as the run goes so that a kill at any
# moment (the call's limit) leaves what finished: gpu-check.log (everything printed, as it is
# printed), gpu-check-json.tar.gz (every document, re-packed after each case), summary.txt (the
# judgement of the cases run so far, re-judged after each case and marked PARTIAL until the end)
# and nvidia-smi.txt (before, then before and after). Each is written beside its last copy and
# renamed over it. Every step runs under `timeout -k 5` (SIGKILL 5 s after SIGTERM), nvidia-smi
# included (20 s a call; once it has hung it is not called again). Exit status: 0 when every
# step passed and every case is the same; 1 otherwise (a counter, a workspace, its order, the
# TF32 setting or a cuBLAS file differs, a check failed, a step failed, was killed or was
# skipped for time, torch is not 2.11.0, PyTorch missing on a GPU machine); 2 when the binary is
# missing or cannot run here, or there is no $PYTHON to plan and judge with (nothing else runs).
#
# Environment:
#   ITERAGPU=PATH           the binary (default ./target/release/iteragpu)
#   DEVICE=cuda:N           the device (default cuda:0)
#   PYTHON=PATH             the Python with a CUDA-enabled torch (default python3)
#   GPU_CHECK_BUDGET_S=N    seconds for the steps up to the refused overwrite (default 360, within
#                           the call's limit of 420 s); later steps are skipped, and counted as
#                           failures, once it is spent
#   GPU_CHECK_PROBE_S=N     seconds of probing for all GPUs together (default 30, at least 5
#                           per GPU; 2 in a rehearsal)
#   GPU_CHECK_REHEARSAL=1   rehearse on the CPU reference device with small shapes (DEVICE
#                           defaults to cpu; PyTorch is skipped, nvidia-smi runs only if there is
#                           one; each run is judged against its own plan): proves the script and
#                           the judge without a GPU
#   GPU_CHECK_STEP_S=N      caps every step's own limit (for tests of the bounds)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

LIMIT_S=420
REHEARSAL=${GPU_CHECK_REHEARSAL:-0}
if [ "$REHEARSAL" = 1 ]; then
    DEVICE=${DEVICE:-cpu}
else
    DEVICE=${DEVICE:-cuda:0}
fi
BIN=${ITERAGPU:-./target/release/iteragpu}
BUDGET=${GPU_CHECK_BUDGET_S:-360}
if [ "$REHEARSAL" = 1 ]; then
    PROBE_S=${GPU_CHECK_PROBE_S:-2}
else
    PROBE_S=${GPU_CHECK_PROBE_S:-30}
fi
PY=${PYTHON:-python3}
DIR=${1:-${OUT:-}}
[ -n "$DIR" ] || DIR=$(mktemp -d)
mkdir -p "$DIR" || exit 2
WORK=$(mktemp -d)
# Set once nvidia-smi has hung: it is not called again (a file: the calls run in subshells).
SMI_HUNG="$WORK.smi-hung"
trap 'rm -rf "$WORK" "$SMI_HUNG"' EXIT
# Every step runs under `timeout -k 5`: SIGTERM at its limit, SIGKILL 5 s later if it ignores
# that. GPU_CHECK_STEP_S (for tests) caps every step's own limit; nvidia-smi gets SMI_S.
STEP_S=${GPU_CHECK_STEP_S:-}
SMI_S=20
[ -n "$STEP_S" ] && [ "$STEP_S" -lt "$SMI_S" ] && SMI_S=$STEP_S
# The environment variables torch reads that change its counters, its workspaces or its path
# through addmm (the torch engine's TORCH_KNOBS, crates/lab-torch/src/engine.py): recorded as
# found, then cleared.
TORCH_KNOBS=(
    PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF PYTORCH_HIP_ALLOC_CONF
    PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_NO_HIP_MEMORY_CACHING
    CUBLAS_WORKSPACE_CONFIG CUBLASLT_WORKSPACE_SIZE TORCH_CUBLASLT_UNIFIED_WORKSPACE
    TORCH_CUBLAS_WORKSPACE_CACHE HIPBLAS_WORKSPACE_CONFIG ROCBLAS_WORKSPACE_CONFIG
    HIPBLASLT_WORKSPACE_SIZE
    DISABLE_ADDMM_CUDA_LT DISABLE_ADDMM_HIP_LT TORCH_BLAS_PREFER_CUBLASLT
    TORCH_BLAS_PREFER_HIPBLASLT PYTORCH_TUNABLEOP_ENABLED
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE NVIDIA_TF32_OVERRIDE HIPBLASLT_ALLOW_TF32
    CUBLAS_EMULATE_SINGLE_PRECISION CUBLAS_EMULATION_STRATEGY
)

# name | options (both tools) | extra options for iteragpu only | judge's notes (peer=, expect=)
build_cases() {
    local S M L R="--batch 1 --context 1 --width 64"
    if [ "$1" = rehearsal ]; then
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
        "f32-row|$R --dtype float32 --warmup 1 --repeats 2||"
        "f32-medium|$M --dtype float32 --warmup 3 --repeats 5||"
        "f16-small|$S --dtype float16 --warmup 1 --repeats 2||"
        "f16-row|$R --dtype float16 --warmup 1 --repeats 2||"
        "f16-medium|$M --dtype float16 --warmup 3 --repeats 5||"
        "bf16-small|$S --dtype bfloat16 --warmup 1 --repeats 2||"
        "bf16-row|$R --dtype bfloat16 --warmup 1 --repeats 2||"
        "bf16-medium|$M --dtype bfloat16 --warmup 3 --repeats 5||"
        "f32-large|$L --dtype float32 --warmup 1 --repeats 3||"
        "f16-large|$L --dtype float16 --warmup 2 --repeats 5||"
        "bf16-large|$L --dtype bfloat16 --warmup 2 --repeats 5||"
        "tf32-medium|$M --dtype float32 --warmup 3 --repeats 5 --allow-tf32||expect=allow_tf32:true"
    )
    if [ "$1" = rehearsal ]; then
        CASES+=("ptx-medium|$M --dtype bfloat16 --warmup 3 --repeats 5||peer=bf16-medium")
    else
        CASES+=("ptx-medium|$M --dtype bfloat16 --warmup 3 --repeats 5|--kernel-form ptx|peer=bf16-medium|expect=kernel_form:ptx-jit")
    fi
}
build_cases gpu
GPU_CASES=("${CASES[@]}")
[ "$REHEARSAL" = 1 ] && build_cases rehearsal

# One start-up of torch: its version, one tiny CUDA product, and the cuBLAS files that product
# mapped (torch loads its wheel's cuBLAS whatever LD_LIBRARY_PATH says: DT_RPATH and preloading).
TORCH_PROBE='
import os, sys
try:
    import torch
except Exception as e:
    print("pytorch: cannot import torch:", e)
    sys.exit(3)
print("pytorch", torch.__version__, "CUDA", torch.version.cuda)
if not torch.cuda.is_available():
    print("pytorch: torch.cuda.is_available() is False")
    sys.exit(4)
a = torch.ones(8, 8, device=sys.argv[1])
(a @ a).sum().item()
torch.cuda.synchronize()
seen = []
for line in open("/proc/self/maps"):
    f = line.split(None, 5)
    if len(f) == 6:
        p = f[5].strip()
        if os.path.basename(p).startswith("libcublas") and ".so" in p and p not in seen:
            seen.append(p)
for p in seen:
    print("cuBLAS file:", p)
'

failures=0
START=$SECONDS
step() { echo; echo "== [$((SECONDS - START)) s] $*"; }
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# Runs a command under a limit of its own or what is left of the budget (or GPU_CHECK_STEP_S),
# with SIGKILL 5 s after SIGTERM; skipped (a failure) once the budget is spent.
bounded() {
    local max=$1
    shift
    local left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -le 5 ]; then
        echo "skipped: the ${BUDGET} s budget is spent"
        return 124
    fi
    [ "$left" -lt "$max" ] && max=$left
    [ -n "$STEP_S" ] && [ "$STEP_S" -lt "$max" ] && max=$STEP_S
    timeout -k 5 "$max" "$@"
    local rc=$?
    case $rc in
        124) echo "killed: no end within $max s (SIGTERM)" ;;
        137) echo "killed: no end within $max s, nor 5 s after SIGTERM (SIGKILL)" ;;
    esac
    return $rc
}
# A step outside the budget (the judge, the packing, the plan): bounded all the same.
capped() {
    local max=$1
    shift
    [ -n "$STEP_S" ] && [ "$STEP_S" -lt "$max" ] && max=$STEP_S
    timeout -k 5 "$max" "$@"
}
# nvidia-smi is run when found (in a rehearsal too, so that its bound is rehearsed), at most
# SMI_S seconds a call; once it has hung it is not called again in this run.
have_smi() { command -v nvidia-smi >/dev/null 2>&1 && [ ! -e "$SMI_HUNG" ]; }
smi() {
    timeout -k 5 "$SMI_S" nvidia-smi "$@"
    local rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        : >"$SMI_HUNG"
        echo "nvidia-smi: no answer within $SMI_S s (killed); not called again in this run" >&2
    fi
    return $rc
}
smi_facts() {
    if ! have_smi; then
        if [ -e "$SMI_HUNG" ]; then echo "nvidia-smi: not run (it hung before)"; else echo "nvidia-smi: not found"; fi
        return
    fi
    smi --query-gpu=index,uuid,name,driver_version,pci.bus_id,memory.total,memory.used,memory.free,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,clocks.max.sm,mig.mode.current,compute_mode,persistence_mode,pstate --format=csv 2>&1 \
        && smi 2>&1
}
UUID=""
# Free device memory in bytes, as nvidia-smi reports it now (MiB precision), or null.
free_bytes() {
    if have_smi && [ -n "$UUID" ]; then
        local mib
        mib=$(smi --query-gpu=memory.free --format=csv,noheader,nounits -i "$UUID" 2>/dev/null | head -1 | tr -dc '0-9')
        [ -n "$mib" ] && { echo $((mib * 1048576)); return; }
    fi
    echo null
}
judge() { capped 60 "$PY" scripts/gpu_check_report.py "$@"; }

# What has finished so far, into $DIR as each case ends: every document (re-packed whole) and the
# judgement of the cases so far, each written beside its last copy and renamed over it, so that a
# kill at any moment leaves the last whole copy of both (the log is written as the run goes).
names=()
peer_flag=()
pack() {
    local part="$DIR/.gpu-check-json.tar.gz.part"
    if capped 60 tar -czf "$part" -C "$WORK" . 2>/dev/null; then
        mv -f "$part" "$DIR/gpu-check-json.tar.gz"
    else
        rm -f "$part"
        echo "packing the documents failed"
        return 1
    fi
    [ "${#names[@]}" -gt 0 ] || return 0
    part="$DIR/.summary.txt.part"
    {
        echo "PARTIAL: the judgement of the ${#names[@]} case(s) run so far; the run went on after them,"
        echo "or was stopped (the last lines of gpu-check.log say which)."
        echo
        judge "$WORK" "${peer_flag[@]}" "${names[@]}"
    } >"$part" 2>&1
    mv -f "$part" "$DIR/summary.txt"
}
# Stopped by a signal (the call's limit; bash runs this once the step in progress has ended or
# been killed): pack once more, and stop.
on_signal() {
    trap '' TERM INT HUP
    echo
    echo "gpu-check: stopped by a signal after $((SECONDS - START)) s; packing what finished"
    pack
    exit 143
}

main() {
    echo "gpu-check: device $DEVICE, binary $BIN, budget ${BUDGET} s within the call's ${LIMIT_S} s$([ "$REHEARSAL" = 1 ] && echo ', REHEARSAL (CPU, small shapes)')"
    [ "$BUDGET" -le $((LIMIT_S - 40)) ] \
        || echo "WARNING: a budget of ${BUDGET} s leaves under 40 s of the ${LIMIT_S} s call for nvidia-smi, the judgement and the packing"
    if ! command -v "$PY" >/dev/null 2>&1; then
        echo "no $PY: the plan, the knobs and the judgement need it (set PYTHON)"
        return 2
    fi
    local rehearsal_flag=()
    [ "$REHEARSAL" = 1 ] && rehearsal_flag=(--rehearsal)
    step "the plan"
    trap on_signal TERM INT HUP
    [ "$REHEARSAL" = 1 ] || peer_flag=(--require-peer)
    judge --plan "${rehearsal_flag[@]}" --budget "$BUDGET" --limit "$LIMIT_S" --probe-seconds "$PROBE_S" "${CASES[@]}"
    if [ "$REHEARSAL" = 1 ]; then
        echo
        echo "the GPU run's plan (scripts/gpu-check.sh \"\$OUT\" on one GPU), for comparison:"
        judge --plan --budget "${GPU_CHECK_BUDGET_S:-360}" --limit "$LIMIT_S" --probe-seconds "${GPU_CHECK_PROBE_S:-30}" "${GPU_CASES[@]}"
    fi

    step "the binary runs here"
    if [ ! -x "$BIN" ]; then
        echo "no binary at $BIN (build it with cargo build --release and carry it, or set ITERAGPU)"
        return 2
    fi
    if ! capped 30 "$BIN" --version; then
        echo "$BIN does not run on this machine (see the loader's message above: a glibc older than"
        echo "the build's, or another architecture); build it for this machine (docs/gpu-runs.md)"
        capped 10 ldd --version 2>&1 | head -1
        return 2
    fi
    capped 10 ldd --version 2>&1 | head -1

    step "nvidia-smi before; the torch knobs"
    smi_facts | tee "$WORK/nvidia-smi-before.txt"
    { echo "== before"; cat "$WORK/nvidia-smi-before.txt"; } >"$DIR/nvidia-smi.txt"
    judge --record-knobs "$WORK/torch-knobs.json" "${TORCH_KNOBS[@]}" || fail "recording the torch knobs"
    unset "${TORCH_KNOBS[@]}"

    local torch=0 torch_files=() line dirs="" d rc
    if [ "$REHEARSAL" = 1 ]; then
        step "pytorch: skipped in a rehearsal (each run is judged against its plan; no cuBLAS folder)"
    else
        step "pytorch and its cuBLAS (one import torch, one tiny product)"
        bounded 120 "$PY" -c "$TORCH_PROBE" "$DEVICE" >"$WORK/torch-probe.txt" 2>&1
        rc=$?
        cat "$WORK/torch-probe.txt"
        if [ "$rc" -eq 0 ]; then
            torch=1
        else
            fail "pytorch: $PY has no CUDA-enabled torch here (exit $rc), so nothing can be compared with it"
        fi
        while IFS= read -r line; do
            case "$line" in "cuBLAS file: "*) torch_files+=("${line#cuBLAS file: }") ;; esac
        done <"$WORK/torch-probe.txt"
        line=$(sed -n 's/^pytorch \([^ ]*\) CUDA.*/\1/p' "$WORK/torch-probe.txt" | head -1)
        if [ -n "$line" ] && [ "${line%%+*}" != 2.11.0 ]; then
            fail "torch $line is not 2.11.0, the torch iteragpu mirrors: compared all the same, but no case can be the same"
        fi
        # cuBLASLt's folder first (iteragpu's loader opens cuBLASLt by name, then cuBLAS beside it).
        for d in $(for f in "${torch_files[@]}"; do case "${f##*/}" in libcublasLt*) dirname "$f" ;; esac; done) \
            $(for f in "${torch_files[@]}"; do dirname "$f"; done); do
            case ":$dirs:" in *":$d:"*) ;; *) dirs=${dirs:+$dirs:}$d ;; esac
        done
        if [ -n "$dirs" ]; then
            export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            echo "every iteragpu command runs with LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
        elif [ "$torch" = 1 ]; then
            fail "pytorch: no libcublas file in its /proc/self/maps after a product"
        fi
    fi

    step "environment"
    local cc="" plan_device=cpu gpus=1 desc
    if bounded 60 "$BIN" environment --device "$DEVICE" --json >"$WORK/environment.json"; then
        desc=$(judge --environment "$WORK/environment.json" "${torch_files[@]}")
        rc=$?
        echo "$desc"
        [ "$rc" -eq 0 ] || fail "environment: $DEVICE is not usable, or its cuBLAS is not torch's (see above)"
    else
        fail "environment --json"
        desc=""
    fi
    if [ "$REHEARSAL" != 1 ]; then
        cc=$(sed -n 's/^  compute capability: //p' <<<"$desc" | head -1)
        UUID=$(sed -n 's/^  uuid: //p' <<<"$desc" | head -1)
        gpus=$(sed -n 's/^  visible devices: //p' <<<"$desc" | head -1)
        [ -n "$gpus" ] || gpus=1
        plan_device=cuda
        [ -n "$cc" ] || fail "no compute capability in the environment report"
    fi

    local case name opts ours_only notes ours_free torch_free
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
            bounded 30 "$BIN" measure --plan --device cuda --compute-capability "$cc" $opts --json >"$WORK/$name.plan.json" \
                || fail "measure --plan $name"
        elif [ "$plan_device" = cpu ]; then
            # shellcheck disable=SC2086
            bounded 30 "$BIN" measure --plan --device cpu $opts --json >"$WORK/$name.plan.json" || fail "measure --plan $name"
        fi
        torch_free=null
        if [ "$torch" = 1 ] && [[ "$notes" != *peer=* ]]; then
            step "$name: iteragpu measure --engine torch"
            torch_free=$(free_bytes)
            # shellcheck disable=SC2086
            bounded 120 "$BIN" measure --engine torch --python "$PY" --device "$DEVICE" $opts \
                --output "$WORK/$name.torch.json" || fail "measure --engine torch $name (exit $?)"
        fi
        echo "{\"ours\": $ours_free, \"torch\": $torch_free}" >"$WORK/$name.free.json"
        pack || fail "packing after $name"
    done

    step "the lot and the probe"
    local probe_device=all per_gpu left
    if [ "$REHEARSAL" = 1 ]; then
        probe_device=cpu
        echo "environment --device all: skipped in a rehearsal (no GPU)"
    elif bounded 60 "$BIN" environment --device all --json >"$WORK/lot.json"; then
        desc=$(judge --lot "$WORK/lot.json")
        echo "$desc"
        d=$(sed -n 's/^visible devices: //p' <<<"$desc" | head -1)
        [ -n "$d" ] && gpus=$d
    else
        fail "environment --device all"
    fi
    # The probe's own bound is per GPU: PROBE_S shared among them, at least 5 s each (less leaves
    # most figures skipped), within what the budget leaves (less a margin for set-up and the
    # steps after it).
    left=$((BUDGET - (SECONDS - START) - 40))
    per_gpu=$((PROBE_S / gpus))
    [ "$per_gpu" -lt 5 ] && [ "$REHEARSAL" != 1 ] && per_gpu=5
    [ $((per_gpu * gpus)) -gt "$left" ] && per_gpu=$((left / gpus))
    if [ "$per_gpu" -lt 1 ]; then
        fail "probe: skipped, the ${BUDGET} s budget leaves no time for it"
    else
        echo "probe --device $probe_device --seconds $per_gpu ($gpus GPU(s))"
        bounded $((per_gpu * gpus + 30)) "$BIN" probe --device "$probe_device" --seconds "$per_gpu" \
            --output "$WORK/probe.json" || fail "probe (exit $?)"
    fi

    step "refused overwrite"
    local target="$WORK/f32-small.json" before
    if [ ! -f "$target" ]; then
        fail "no f32-small.json to try overwriting"
    else
        before=$(capped 30 sha256sum "$target")
        bounded 30 "$BIN" measure --device "$DEVICE" --batch 1 --context 16 --width 64 \
            --dtype float32 --warmup 1 --repeats 2 --output "$target"
        rc=$?
        if [ "$rc" -eq 2 ]; then
            echo "refused with exit 2, as expected"
        else
            fail "an existing --output gave exit $rc, not 2"
        fi
        [ "$before" = "$(capped 30 sha256sum "$target")" ] || fail "the existing file changed"
    fi

    step "nvidia-smi after"
    smi_facts | tee "$WORK/nvidia-smi-after.txt"
    { echo "== before"; cat "$WORK/nvidia-smi-before.txt"; echo; echo "== after"; cat "$WORK/nvidia-smi-after.txt"; } >"$DIR/nvidia-smi.txt"

    step "judgement"
    pack || fail "packing the documents"
    judge "$WORK" "${peer_flag[@]}" "${names[@]}" | tee "$DIR/.summary.txt.part"
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "the judgement found differences or failures (summary.txt)"
    mv -f "$DIR/.summary.txt.part" "$DIR/summary.txt"
    echo
    echo "outputs: $DIR/gpu-check.log, $DIR/summary.txt, $DIR/nvidia-smi.txt, $DIR/gpu-check-json.tar.gz ($((SECONDS - START)) s)"
    if [ "$failures" -eq 0 ]; then
        echo "gpu-check: all steps passed, every case the same"
        return 0
    fi
    echo "gpu-check: $failures step(s) failed"
    return 1
}

# A SIGTERM (INT, HUP) to the whole run reaches main, which packs once more once the step in
# progress has ended (on_signal); the log's tee ignores it so as to log that to the end, and this
# shell waits for both before its EXIT trap removes $WORK.
trap ':' TERM INT HUP
main 2>&1 | (trap '' TERM INT HUP; exec tee "$DIR/gpu-check.log")
exit "${PIPESTATUS[0]}"
