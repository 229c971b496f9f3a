#!/usr/bin/env python3
"""The measurement protocol of `iteragpu measure`, in PyTorch eager, for side-by-side comparison.

Mirrors crates/lab/src/measure/runner.rs step for step:

- Model: Linear(width -> hidden) -> exact GELU -> Linear(hidden -> width), with bias.
- Phases: model_load, inputs, cold_forward, warmup (all passes, one row), warm_forward (one row per
  repeat).
- Each phase: synchronize, read device-wide free memory, read the baseline counters, reset the
  peaks, start the host clock and record the start event, run, record the stop event and
  synchronize, stop the host clock, read the end counters and the device-wide free memory.
- model_load builds the weights on the CPU in float32 with nn.Linear's default initialisation
  (inside the timed region) and copies them with `.to(device, dtype)` in module order (w1, b1, w2,
  b2); inputs are generated on the device.
- A forward pass allocates linear1's output, GELU's output, frees linear1's output, allocates
  linear2's output, frees GELU's output. The output of a phase is alive when its end counters are
  read and freed after the row; in warmup each pass's output is released only once the next
  pass's output exists (`y = model(x)` in a loop). The last warm_forward output is kept for the
  numerical check, then freed.
- The document has the field names of `iteragpu measure --output`. `configuration.memory_policy`
  is OBSERVED, not computed: right after the cold pass (the first products) the caching
  allocator's snapshot (`torch.cuda.memory._snapshot()`, the allocation order from a memory
  history recorded during that pass only) is read, and every live block that is not a tensor of
  the model (the four parameters and the input) is a workspace: in torch 2.11 the cuBLAS
  workspace (32 MiB on compute capability 9.0) then, on the cuBLASLt path, the 1 MiB cuBLASLt
  one. `observed_workspaces` lists them (size, requested size, order); `computed` beside them is
  what torch 2.11's rules (CublasHandlePool.cpp) give for this GPU and environment, for reading
  only: scripts/gpu_check_report.py judges the observed blocks.
- `environment.details.libraries`: the libcublas*.so* and libcublasLt*.so* files this process
  has mapped after the first product (/proc/self/maps), so the judge can require that iteragpu
  loaded the same ones. `environment.details.torch_knobs`: the environment variables that change
  torch's counters or path (TORCH_KNOBS), as this process ran with them and, with
  `--knobs-before FILE` (written by scripts/gpu-check.sh), as they were before gpu-check cleared
  them.
- `check` is PyTorch's own numerical check: its output against a float64 recomputation of its
  own weights and inputs, with iteragpu's bound for the dtype.

Differences, on purpose and stated: weights come from torch's own generator (same bounds,
different values) and inputs from a seeded `uniform_(-1, 1)` on the device, so values differ from
iteragpu's; the check compares with a float64 CPU recomputation of this run's own values, on the
rows iteragpu would sample, against iteragpu's bound for the dtype. `preflight` has no estimate.

usage: pytorch_eager.py --device cuda:N --batch B --context C --width W [--hidden H]
                        [--dtype float32|float16|bfloat16] [--warmup N] [--repeats N] [--seed S]
                        [--allow-tf32] [--knobs-before FILE] --output FILE [--json]
Exit: 0 complete, 1 the run or its check failed (the file is still written), 2 bad options, an
existing --output, no torch or no CUDA device (nothing written).
"""
import argparse
import ctypes
import datetime
import fnmatch
import json
import os
import re
import sys
import time

SCHEMA = "iteragpu.measurement/1"
ENVIRONMENT_SCHEMA = "iteragpu.environment/1"
DTYPE_NAMES = ("float32", "float16", "bfloat16")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# The environment variables torch 2.11 (or a later torch) reads that change its allocator
# counters, its workspaces or its path through addmm; scripts/gpu-check.sh clears them.
TORCH_KNOBS = (
    "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "DISABLE_ADDMM_CUDA_LT",
    "PYTORCH_NO_CUDA_MEMORY_CACHING", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
    "TORCH_CUBLASLT_UNIFIED_WORKSPACE", "TORCH_CUBLAS_WORKSPACE_CACHE",
)
# The torch whose allocator and workspace rules iteragpu mirrors.
MIRRORED_TORCH = "2.11.0"


def die(message, code=2):
    print(f"pytorch_eager: error: {message}", file=sys.stderr)
    sys.exit(code)


def parse_args(argv):
    p = argparse.ArgumentParser(description="iteragpu's measurement protocol in PyTorch eager")
    p.add_argument("--device", required=True, help="cuda:N")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int)
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allow-tf32", action="store_true")
    p.add_argument("--knobs-before", metavar="FILE",
                   help="a JSON object {name: value or null}: the knobs as seen before they were cleared")
    p.add_argument("--output", required=True)
    p.add_argument("--json", action="store_true", help="print the document on stdout")
    a = p.parse_args(argv)
    for name in ("batch", "context", "width", "repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    if a.warmup < 0 or (a.hidden is not None and a.hidden < 1) or a.seed < 0:
        p.error("--warmup and --seed must be >= 0, --hidden >= 1")
    return a


def bound(dtype, allow_tf32):
    """lab::measure::check::bound."""
    return 1e-5 if (dtype == "float32" and not allow_tf32) else 1e-2


def math_mode(dtype, allow_tf32):
    """lab::device::Device::math_mode."""
    if dtype == "float32":
        if allow_tf32:
            return "float32 products may use TF32 (--allow-tf32)"
        return "float32 products in strict float32 (no TF32)"
    return f"{dtype} storage, float32 accumulation"


def sample_rows(rows, width, hidden):
    """lab::measure::check::sample_rows: first, last and evenly spread rows (2 to 8)."""
    per_row = 4 * width * hidden
    budget = min(max(2_000_000_000 // max(per_row, 1), 2), 8)
    n = min(budget, rows)
    if n <= 1:
        return [0]
    out = []
    for i in range(n):
        r = i * (rows - 1) // (n - 1)
        if not out or out[-1] != r:
            out.append(r)
    return out


def check_env(value):
    """c10::utils::check_env: exactly "1" is true and "0" is false; anything else (torch warns
    "Ignoring invalid value for boolean flag") is no value, as if unset."""
    if value == "1":
        return True
    if value == "0":
        return False
    return None


def computed_policy(props, rows):
    """What torch 2.11.0's rules give, for reading beside the observed blocks (never judged):
    parseChosenWorkspaceSize, parseCUDABlasLtWorkspaceSize, getCUDABlasLtWorkspaceSize (an unset
    TORCH_CUBLASLT_UNIFIED_WORKSPACE caps the Lt size at the cuBLAS size) and
    getCUDABlasLtWorkspace (only "1" shares the cuBLAS workspace), from this GPU's compute
    capability and the environment this process runs with; no cuBLASLt workspace when addmm
    leaves the Lt path (DISABLE_ADDMM_CUDA_LT=1, or a product with a dimension of 1)."""
    sm90 = props.major == 9 and props.minor == 0
    default = 4096 * 8 * 1024 if sm90 else 4096 * 1024 * 2 + 16 * 1024 * 8
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    cublas = default
    if config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", config)
        if pairs:
            cublas = sum(int(size) * 1024 * int(count) for size, count in pairs)
    lt = 1024 * 1024
    try:
        lt = int(os.environ["CUBLASLT_WORKSPACE_SIZE"]) * 1024
    except (KeyError, ValueError):
        pass
    unified_env = check_env(os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"))
    if unified_env is None or unified_env:
        lt = min(lt, cublas)
    unified = unified_env is True
    lt_path = rows > 1 and not check_env(os.environ.get("DISABLE_ADDMM_CUDA_LT"))
    blocks = [cublas] + ([lt] if lt_path and not unified else [])
    return {
        "label": f"computed from torch {MIRRORED_TORCH}'s rules, not observed (for reading only)",
        "cublas_workspace_bytes": cublas,
        "cublaslt_workspace_bytes": lt,
        "cublaslt_workspace_unified": unified,
        "cublaslt_path": lt_path,
        "blocks": blocks,
    }


def start_history(torch, device):
    """Records the allocator's alloc/free order (no stack traces) during the cold pass only, so
    the workspaces can be told apart by the order they were allocated in."""
    try:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=100000, device=device)
        return True
    except Exception:  # an older or newer torch without this private API: order by size
        return False


def stop_history(torch, device, started):
    if started:
        try:
            torch.cuda.memory._record_memory_history(enabled=None, device=device)
        except Exception:
            pass


def observe_workspaces(torch, index, tensors, history):
    """The allocator's live blocks that are not the model's tensors, after the cold pass: the
    workspaces torch allocated on its first products. Returns (blocks in allocation order, how
    the order was found)."""
    try:
        snap = torch.cuda.memory._snapshot()
        segments = snap.get("segments") or []
        traces = snap.get("device_traces") or []
    except Exception:
        segments, traces = torch.cuda.memory_snapshot(), []
    owned = [(t.data_ptr(), t.data_ptr() + max(t.numel() * t.element_size(), 1)) for t in tensors]
    blocks = []
    for seg in segments:
        if seg.get("device", index) != index:
            continue
        address = seg.get("address", 0)
        for b in seg.get("blocks") or []:
            start = b.get("address", address)
            address = start + b.get("size", 0)
            if b.get("state") != "active_allocated":
                continue
            if any(start <= lo < start + b.get("size", 0) for lo, _ in owned):
                continue
            blocks.append({
                "address": start,
                "size": b.get("size"),
                "requested_size": b.get("requested_size", b.get("size")),
                "segment_type": seg.get("segment_type"),
                "order": None,
            })
    order = {}
    trace = traces[index] if history and index < len(traces) else []
    for i, entry in enumerate(trace):
        if entry.get("action") == "alloc":
            order[entry.get("addr")] = i  # the last alloc at an address is the live block's
    if blocks and all(b["address"] in order for b in blocks):
        for b in blocks:
            b["order"] = order[b["address"]]
        blocks.sort(key=lambda b: b["order"])
        how = "in allocation order (memory history of the cold pass)"
    else:
        blocks.sort(key=lambda b: -(b["requested_size"] or 0))
        how = "by size (no allocation order was recorded)"
    roles = ("cuBLAS workspace", "cuBLASLt workspace")
    for i, b in enumerate(blocks):
        b["role"] = roles[i] if i < len(roles) else "unknown"
    return blocks, how


def observed_policy(torch, observed, how, error, computed):
    sizes = [b["requested_size"] for b in observed or []]
    return {
        "allocator": "PyTorch CUDA caching allocator (this torch's own)"
                     + (f", PYTORCH_CUDA_ALLOC_CONF={os.environ['PYTORCH_CUDA_ALLOC_CONF']}"
                        if "PYTORCH_CUDA_ALLOC_CONF" in os.environ else "")
                     + (f", PYTORCH_ALLOC_CONF={os.environ['PYTORCH_ALLOC_CONF']}"
                        if "PYTORCH_ALLOC_CONF" in os.environ else "")
                     + ("" if "PYTORCH_CUDA_ALLOC_CONF" in os.environ or "PYTORCH_ALLOC_CONF" in os.environ
                        else ", default configuration"),
        "mirrors": f"torch {torch.__version__}",
        # The first block allocated is the cuBLAS workspace, the second the cuBLASLt one; none
        # (0) when that workspace was not allocated; null when nothing was observed.
        "cublas_workspace_bytes": None if observed is None else (sizes[0] if sizes else 0),
        "cublaslt_workspace_bytes": None if observed is None else (sizes[1] if len(sizes) > 1 else 0),
        # A shared (unified) Lt workspace is not a block of its own: not observable as a flag.
        "cublaslt_workspace_unified": None,
        "workspaces_from": ("observed: the allocator's live blocks after the cold pass that are not "
                            f"tensors of the model, {how}") if observed is not None
                           else f"not observed: {error}",
        "observed_workspaces": observed,
        "observation_error": error,
        "computed": computed,
    }


def loaded_cublas():
    """The libcublas*.so* and libcublasLt*.so* files this process has mapped (/proc/self/maps)."""
    files = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                if fnmatch.fnmatch(os.path.basename(path), "libcublas*.so*") and path not in files:
                    files.append(path)
    except OSError:
        pass
    return files


def library_version(path, symbol):
    """major.minor.patch from cublasGetProperty / cublasLtGetProperty of the mapped file."""
    try:
        lib = ctypes.CDLL(path)
        get = getattr(lib, symbol)
        parts = []
        for kind in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            v = ctypes.c_int(0)
            if get(kind, ctypes.byref(v)) != 0:
                return None
            parts.append(str(v.value))
        return ".".join(parts)
    except (OSError, AttributeError, TypeError):
        return None


def describe_libraries(files):
    lt = [p for p in files if os.path.basename(p).startswith("libcublasLt")]
    blas = [p for p in files if not os.path.basename(p).startswith("libcublasLt")]
    return {
        "cublas": {"library": blas[0] if blas else None,
                   "version": library_version(blas[0], "cublasGetProperty") if blas else None},
        "cublaslt": {"library": lt[0] if lt else None,
                     "version": library_version(lt[0], "cublasLtGetProperty") if lt else None},
        "found_via": "torch's own loading; the files mapped in /proc/self/maps after the first product",
        "files": files,
    }


def knobs(path):
    before = None
    if path:
        try:
            with open(path) as f:
                before = json.load(f)
        except (OSError, ValueError) as e:
            before = {"error": f"--knobs-before {path}: {e}"}
    return {
        "as_run": {k: os.environ.get(k) for k in TORCH_KNOBS},
        "before_clearing": before,
    }


def main(argv):
    a = parse_args(argv)
    if os.path.exists(a.output):
        die(f"--output {a.output} already exists; choose a new file (nothing was written)")
    try:
        import torch
        import torch.nn as nn
    except ImportError as e:
        die(f"PyTorch is not installed for {sys.executable} ({e}); nothing was written")
    if not a.device.startswith("cuda"):
        die(f"--device {a.device!r}: this comparison needs a CUDA device (cuda:N)")
    if not torch.cuda.is_available():
        die("torch sees no usable CUDA device (torch.cuda.is_available() is False); nothing was written")

    hidden = a.hidden or 4 * a.width
    rows = a.batch * a.context
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[a.dtype]
    # float32 matmuls use TF32 only with --allow-tf32 ("high"); "highest" is strict float32, which
    # gemm_and_bias turns into CUBLAS_COMPUTE_32F.
    torch.set_float32_matmul_precision("high" if a.allow_tf32 else "highest")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    # Device set-up, timed on its own (device_init_seconds), never inside model_load.
    t0 = time.perf_counter()
    try:
        device = torch.device(a.device)
        torch.cuda.set_device(device)
        torch.cuda.init()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError) as e:
        die(f"--device {a.device}: {e}")
    device_init = time.perf_counter() - t0

    def counters():
        s = torch.cuda.memory_stats(device)
        return {
            "allocated": s.get("allocated_bytes.all.current", 0),
            "reserved": s.get("reserved_bytes.all.current", 0),
            "requested": s.get("requested_bytes.all.current", 0),
            "peak_allocated": s.get("allocated_bytes.all.peak", 0),
            "peak_reserved": s.get("reserved_bytes.all.peak", 0),
            "peak_requested": s.get("requested_bytes.all.peak", 0),
        }

    def device_memory():
        free, total = torch.cuda.mem_get_info(device)
        return {"free_bytes": free, "total_bytes": total, "process_used_bytes": None}

    def run_phase(phase, index, body):
        """runner.rs `phase`: returns (row, what body returned)."""
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        before = device_memory()
        base = counters()
        torch.cuda.reset_peak_memory_stats(device)
        t = time.perf_counter()
        start.record()
        result = body()
        stop.record()
        stop.synchronize()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
        end = counters()
        after = device_memory()
        row = {
            "phase": phase,
            "index": index,
            "wall_seconds": wall,
            "device_seconds": start.elapsed_time(stop) / 1000.0,
            "memory": {
                "baseline_allocated_bytes": base["allocated"],
                "baseline_reserved_bytes": base["reserved"],
                "end_allocated_bytes": end["allocated"],
                "end_reserved_bytes": end["reserved"],
                "peak_allocated_bytes": end["peak_allocated"],
                "peak_reserved_bytes": end["peak_reserved"],
                "baseline_requested_bytes": base["requested"],
                "end_requested_bytes": end["requested"],
                "peak_requested_bytes": end["peak_requested"],
                "device_before": before,
                "device_after": after,
            },
        }
        return row, result

    state = {}
    gelu = nn.GELU()  # exact erf form (approximate="none")

    def load():
        # On the CPU in float32 with nn.Linear's default initialisation, then copied (and
        # converted) parameter by parameter in module order: w1, b1, w2, b2.
        torch.manual_seed(a.seed)
        model = nn.Sequential(nn.Linear(a.width, hidden), nn.Linear(hidden, a.width))
        return model.to(device=device, dtype=dtype)

    def inputs():
        gen = torch.Generator(device=device)
        gen.manual_seed(a.seed)
        x = torch.empty((a.batch, a.context, a.width), dtype=dtype, device=device)
        return x.uniform_(-1.0, 1.0, generator=gen)

    def forward():
        model, x = state["model"], state["x"]
        h = model[0](x)
        g = gelu(h)
        del h
        y = model[1](g)
        del g
        return y

    def warm_all():
        # As `y = model(x)` in a loop: the previous output is released only once the new exists.
        y = None
        for _ in range(a.warmup):
            y = forward()
        return y

    phases = []
    error = None
    check = None
    device_index = device.index if device.index is not None else torch.cuda.current_device()
    observed, observed_how = None, None
    observed_error = "the run stopped before the cold pass ended"
    libraries = describe_libraries(loaded_cublas())
    libraries["found_via"] += " (read before any product: the run stopped first)"
    current = "model_load"
    preflight_free = device_memory()["free_bytes"]
    try:
        with torch.no_grad():
            row, state["model"] = run_phase("model_load", 0, load)
            phases.append(row)
            current = "inputs"
            row, state["x"] = run_phase("inputs", 0, inputs)
            phases.append(row)
            current = "cold_forward"
            # The memory history (alloc order only, no stack traces) is on for the cold pass
            # alone; it changes no counter.
            history = start_history(torch, device)
            try:
                row, y = run_phase("cold_forward", 0, forward)
                phases.append(row)
                del y
                # Outside any phase: the workspaces the first products allocated, and the cuBLAS
                # files they ran from.
                try:
                    tensors = list(state["model"].parameters()) + [state["x"]]
                    observed, observed_how = observe_workspaces(torch, device_index, tensors, history)
                    observed_error = None
                except Exception as e:  # never lose the run to the observation
                    observed_error = f"reading the allocator's snapshot failed: {type(e).__name__}: {e}"
                libraries = describe_libraries(loaded_cublas())
            finally:
                stop_history(torch, device, history)
            current = "warmup"
            row, y = run_phase("warmup", 0, warm_all)
            phases.append(row)
            del y
            current = "warm_forward"
            last = None
            for i in range(a.repeats):
                row, y = run_phase("warm_forward", i, forward)
                phases.append(row)
                if i + 1 == a.repeats:
                    last = y
                del y
            current = None
            sample = sample_rows(rows, a.width, hidden)
            model, x = state["model"], state["x"]
            got = last.reshape(rows, a.width)[sample].double().cpu()
            del last
            xs = x.reshape(rows, a.width)[sample].double().cpu()
            w1, b1 = model[0].weight.cpu().double(), model[0].bias.cpu().double()
            w2, b2 = model[1].weight.cpu().double(), model[1].bias.cpu().double()
            ref = torch.nn.functional.gelu(xs @ w1.T + b1) @ w2.T + b2
            diff = (got - ref).abs().max().item()
            rel = diff / max(ref.abs().max().item(), 1e-300)
            finite = bool(torch.isfinite(got).all().item())
            b = bound(a.dtype, a.allow_tf32)
            check = {
                "method": "float64 CPU recomputation of sampled rows from PyTorch's own weights and inputs",
                "rows": sample,
                "max_abs_error": diff if finite else None,
                "relative_error": rel if finite else None,
                "bound": b,
                "passed": finite and rel <= b,
            }
            if not check["passed"]:
                error = {
                    "phase": None,
                    "kind": "check_failed",
                    "message": f"the numerical check failed: relative error {rel:.3e} exceeds the bound {b:.1e} for {a.dtype}",
                    "allocated_bytes": None,
                    "reserved_bytes": None,
                }
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
        oom = isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)
        where = f"in phase {current}" if current else "after the last phase"
        error = {
            "phase": current,
            "kind": "out_of_memory" if oom else "device",
            "message": f"{where}: " + (str(e).splitlines() or [""])[0],
            "allocated_bytes": torch.cuda.memory_allocated(device),
            "reserved_bytes": torch.cuda.memory_reserved(device),
        }

    props = torch.cuda.get_device_properties(device)
    tool = {"name": "pytorch-eager", "version": torch.__version__, "commit": None}
    layers = [
        {"name": "linear1", "kind": "linear", "in_features": a.width, "out_features": hidden,
         "parameters": a.width * hidden + hidden},
        {"name": "gelu", "kind": "gelu", "in_features": hidden, "out_features": hidden, "parameters": 0},
        {"name": "linear2", "kind": "linear", "in_features": hidden, "out_features": a.width,
         "parameters": hidden * a.width + a.width},
    ]
    parameter_count = sum(layer["parameters"] for layer in layers)
    doc = {
        "schema": SCHEMA,
        "tool": tool,
        "started_utc": started,
        "device_init_seconds": device_init,
        "environment": {
            "schema": ENVIRONMENT_SCHEMA,
            "tool": tool,
            "requested_device": a.device,
            "backend": "pytorch",
            "reference_device": False,
            "usable": True,
            "problem": None,
            "details": {
                "torch": torch.__version__,
                "torch_cuda": torch.version.cuda,
                "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "default"),
                "mirrored_torch": MIRRORED_TORCH,
                "libraries": libraries,
                "torch_knobs": knobs(a.knobs_before),
                "gpu": {
                    "name": props.name,
                    "compute_capability": f"{props.major}.{props.minor}",
                    "sm_count": props.multi_processor_count,
                    "total_memory_bytes": props.total_memory,
                },
            },
        },
        "configuration": {
            "device": a.device,
            "batch": a.batch,
            "context": a.context,
            "width": a.width,
            "hidden": hidden,
            "hidden_source": "--hidden" if a.hidden else "4 x width",
            "dtype": a.dtype,
            "warmup": a.warmup,
            "repeats": a.repeats,
            "seed": a.seed,
            "allow_tf32": a.allow_tf32,
            "math_mode": math_mode(a.dtype, a.allow_tf32),
            "memory_policy": observed_policy(torch, observed, observed_how, observed_error,
                                             computed_policy(props, rows)),
        },
        "synthetic_model": {
            "description": "Linear(width -> hidden) -> GELU (exact erf) -> Linear(hidden -> width), with bias",
            "layers": layers,
            "parameter_count": parameter_count,
            "parameter_bytes": parameter_count * DTYPE_BYTES[a.dtype],
            "input_shape": [a.batch, a.context, a.width],
            "hidden_shape": [a.batch, a.context, hidden],
            "output_shape": [a.batch, a.context, a.width],
            "dtype": a.dtype,
            "forward_flops": 2 * 2 * rows * a.width * hidden,
        },
        "preflight": {"estimated_peak_reserved_bytes": None, "device_free_bytes": preflight_free},
        "phases": phases,
        "check": check,
        "complete": error is None and check is not None and check["passed"],
        "error": error,
    }
    # Created exclusively through a temporary file in the same folder, moved into place whole.
    folder = os.path.dirname(os.path.abspath(a.output))
    tmp = os.path.join(folder, f".{os.path.basename(a.output)}.{os.getpid()}.tmp")
    with open(tmp, "x") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    try:
        os.link(tmp, a.output)  # fails if the output appeared meanwhile: never overwrite
        os.unlink(tmp)
    except FileExistsError:
        os.unlink(tmp)
        die(f"--output {a.output} appeared during the run; the document was not written")
    except OSError:  # a file system without hard links
        if os.path.exists(a.output):
            os.unlink(tmp)
            die(f"--output {a.output} appeared during the run; the document was not written")
        os.replace(tmp, a.output)
    if a.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        for r in phases:
            dev = r["device_seconds"]
            print(f"  {r['phase']:<13} #{r['index']:<3} wall {r['wall_seconds'] * 1e3:10.3f} ms  "
                  f"device {dev * 1e3:10.3f} ms  peak allocated {r['memory']['peak_allocated_bytes']:>14} B")
        print(f"complete: {doc['complete']}  ({a.output})")
    if not torch.__version__.startswith(MIRRORED_TORCH):
        print(f"pytorch_eager: note: torch {torch.__version__}; iteragpu mirrors torch "
              f"{MIRRORED_TORCH.rsplit('.', 1)[0]} (compared all the same)", file=sys.stderr)
    if error:
        print(f"pytorch_eager: error: the run is incomplete: {error['message']}", file=sys.stderr)
    return 0 if doc["complete"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
