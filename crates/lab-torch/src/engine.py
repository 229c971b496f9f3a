#!/usr/bin/env python3
"""iteragpu's torch engine: the measurement protocol of `iteragpu measure`, run by PyTorch eager on
a CUDA or ROCm GPU (torch's ROCm build answers the same torch.cuda calls and counters).

This file is the one copy: `iteragpu measure --engine torch` carries it inside the binary (so
inside the kit and the wheel) and runs it with the machine's Python; the notebook carries it too,
generated from this file (a test checks the two are equal), so that it measures without the
binary. It mirrors crates/lab/src/measure/runner.rs step for step:

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
- The memory policy is OBSERVED, not computed: right after the cold pass the caching allocator's
  snapshot (the allocation order from a memory history recorded during that pass only) is read,
  and every live block that is not a tensor of the model (the four parameters and the input) is a
  workspace, named by its size for this backend (workspace_sizes): in torch 2.11 on CUDA the
  cuBLAS workspace (32 MiB on compute capability 9.0) then, on the cuBLASLt path, the 1 MiB
  cuBLASLt one; on ROCm the hipBLAS (32 MiB, 128 MiB on gfx94x/gfx95x) and hipBLASLt (76 MiB)
  ones, each only when its handle is used. `engine.observed_workspaces` lists them;
  `engine.computed_policy` is what torch 2.11's rules (CublasHandlePool.cpp) give, for reading
  only.
- `engine.blas_libraries`: the BLAS files this process mapped after the first product
  (/proc/self/maps: libcublas*, libcublasLt*, libhipblas*, librocblas*, libhipblaslt*).
  `engine.allocator_knobs`: every environment variable that changes torch's counters, workspaces,
  path or float32 math (TORCH_KNOBS), as this process ran with it. `engine.matmul`: the matmul
  settings read back from torch after the run (`allow_tf32`, the float32 matmul precision, the
  preferred BLAS library); `configuration.math_mode` says what they mean.
- `check`: the output against a float64 CPU recomputation of this run's own weights and inputs,
  on the rows iteragpu samples, with iteragpu's bound for the dtype.

Weights come from torch's own generator (same bounds, different values) and inputs from a seeded
`uniform_(-1, 1)` on the device, so values differ from the native engine's.

usage: engine.py --device cuda:N --batch B --context C --width W [--hidden H]
                 [--dtype float32|float16|bfloat16] [--warmup N] [--repeats N] [--seed S]
                 [--allow-tf32] [--estimate BYTES] [--max-memory-fraction F] [--max-memory BYTES]
                 --output FILE|-
Exit: 0 complete (the document written, or printed with --output -), 1 the run or its check
failed (the document still written), 2 refused: bad options, an existing --output, no torch or a
torch that sees no GPU (nothing written), 3 the run would not fit (nothing written).
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

ENGINE_VERSION = 1
SCHEMA = "iteragpu.measurement/1"
ENVIRONMENT_SCHEMA = "iteragpu.environment/1"
DTYPE_NAMES = ("float32", "float16", "bfloat16")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# The environment variables that change torch's allocator counters, its workspaces, its path
# through addmm, or the math its products run (torch 2.11's libc10/libc10_cuda/libtorch_cpu/
# libtorch_cuda strings, its ROCm build's CublasHandlePool.cpp and Context.cpp, and cuBLAS 13's
# own variables): cleared by gpu-check for every tool, and recorded as found in every document.
TORCH_KNOBS = (
    # the caching allocator
    "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NO_HIP_MEMORY_CACHING",
    # the BLAS workspaces (CUDA, then ROCm: hipBLAS, rocBLAS, hipBLASLt)
    "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
    "TORCH_CUBLAS_WORKSPACE_CACHE", "HIPBLAS_WORKSPACE_CONFIG", "ROCBLAS_WORKSPACE_CONFIG",
    "HIPBLASLT_WORKSPACE_SIZE",
    # the path of a product: addmm off the Lt path, plain products onto it, tuned kernels
    "DISABLE_ADDMM_CUDA_LT", "DISABLE_ADDMM_HIP_LT", "TORCH_BLAS_PREFER_CUBLASLT",
    "TORCH_BLAS_PREFER_HIPBLASLT", "PYTORCH_TUNABLEOP_ENABLED",
    # the math a float32 product runs (TF32 forced on or off, emulation)
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE", "HIPBLASLT_ALLOW_TF32",
    "CUBLAS_EMULATE_SINGLE_PRECISION", "CUBLAS_EMULATION_STRATEGY",
)
BLAS_FILES = ("libcublas*.so*", "libhipblas*.so*", "librocblas*.so*")
# The torch whose allocator and workspace rules iteragpu mirrors.
MIRRORED_TORCH = "2.11.0"
PREFIX = "iteragpu: torch engine"


class Refused(Exception):
    """A refusal before anything is written: exit 2 (or 3: would not fit), one sentence."""

    def __init__(self, message, code=2):
        super().__init__(message)
        self.code = code


def parse_args(argv):
    p = argparse.ArgumentParser(prog="engine.py",
                                description="iteragpu's measurement protocol in PyTorch eager")
    p.add_argument("--device", required=True, help="cuda:N (an NVIDIA GPU, or an AMD GPU under ROCm)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int)
    p.add_argument("--dtype", choices=DTYPE_NAMES, default="float32")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allow-tf32", action="store_true")
    p.add_argument("--estimate", type=int, metavar="BYTES",
                   help="the pre-flight estimate of the run's peak reserved bytes")
    p.add_argument("--max-memory-fraction", type=float, default=1.0, metavar="F")
    p.add_argument("--max-memory", type=int, metavar="BYTES")
    p.add_argument("--tool-version", default=f"engine-{ENGINE_VERSION}")
    p.add_argument("--tool-commit")
    p.add_argument("--output", required=True, help="the document to create, or - for stdout")
    # Never a product path: runs the protocol on torch's CPU device, so that a machine without a
    # GPU can test the phase order, the document's fields and the numerical check. The allocator
    # counters do not exist there and are written as null (unavailable).
    p.add_argument("--test-only-cpu", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    for name in ("batch", "context", "width", "repeats"):
        if getattr(a, name) < 1:
            raise Refused(f"--{name} {getattr(a, name)}: must be at least 1")
    if a.warmup < 0 or a.seed < 0 or (a.hidden is not None and a.hidden < 1):
        raise Refused("--warmup and --seed must be at least 0, --hidden at least 1")
    if not 0.0 < a.max_memory_fraction <= 1.0:
        raise Refused(f"--max-memory-fraction {a.max_memory_fraction}: must be above 0 and at most 1")
    return a


def bound(dtype, allow_tf32):
    """lab::measure::check::bound."""
    return 1e-5 if (dtype == "float32" and not allow_tf32) else 1e-2


def math_mode(dtype, allow_tf32):
    """lab::device::gpu_math_mode."""
    if dtype == "float32":
        if allow_tf32:
            return "float32 products may use TF32 (--allow-tf32)"
        return "float32 products in strict float32 (no TF32)"
    return f"{dtype} storage, float32 accumulation"


def matmul_settings(torch):
    """The matmul settings the products ran with, read back from torch after the run (not the
    options asked for): `allow_tf32` is torch.backends.cuda.matmul.allow_tf32, which cuBLAS's
    math mode and cuBLASLt's compute type follow (CUBLAS_COMPUTE_32F_FAST_TF32 when true)."""
    def read(get):
        try:
            return get()
        except Exception as e:  # an older or newer torch without one of these
            return f"unreadable: {type(e).__name__}: {e}"

    m = torch.backends.cuda.matmul
    allow = read(lambda: bool(m.allow_tf32))
    return {
        "allow_tf32": allow,
        "float32_matmul_precision": read(torch.get_float32_matmul_precision),
        "fp32_precision": read(lambda: m.fp32_precision),
        "allow_fp16_reduced_precision_reduction": read(lambda: m.allow_fp16_reduced_precision_reduction),
        "allow_bf16_reduced_precision_reduction": read(lambda: m.allow_bf16_reduced_precision_reduction),
        "preferred_blas_library": read(lambda: str(torch.backends.cuda.preferred_blas_library())),
        "float32_math": "tf32" if allow is True else ("ieee" if allow is False else "unknown"),
    }


def math_mode_ran(dtype, settings):
    """math_mode as lab::device::gpu_math_mode words it, from what torch ran with."""
    if dtype != "float32":
        return math_mode(dtype, False)
    if settings["allow_tf32"] is True:
        return math_mode(dtype, True)
    if settings["allow_tf32"] is False:
        return math_mode(dtype, False)
    return f"float32 products, TF32 unknown ({settings['allow_tf32']})"


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


def computed_policy(major, minor, rows, hip):
    """What torch 2.11.0's rules give, for reading beside the observed blocks (never judged):
    parseChosenWorkspaceSize, parseCUDABlasLtWorkspaceSize, getCUDABlasLtWorkspaceSize (an unset
    TORCH_CUBLASLT_UNIFIED_WORKSPACE caps the Lt size at the cuBLAS size) and
    getCUDABlasLtWorkspace (only "1" shares the cuBLAS workspace); no cuBLASLt workspace when addmm
    leaves the Lt path (DISABLE_ADDMM_CUDA_LT=1, or a product with a dimension of 1)."""
    if hip:
        return {"label": "not computed: iteragpu mirrors torch's CUDA rules, not its ROCm ones"}
    sm90 = major == 9 and minor == 0
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
    return {
        "label": f"computed from torch {MIRRORED_TORCH}'s rules, not observed (for reading only)",
        "cublas_workspace_bytes": cublas,
        "cublaslt_workspace_bytes": lt,
        "cublaslt_workspace_unified": unified,
        "cublaslt_path": lt_path,
        "blocks": [cublas] + ([lt] if lt_path and not unified else []),
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


def workspace_config(value):
    """parseChosenWorkspaceSize's reading of `:SIZE:COUNT` pairs (KiB); None when none parse."""
    pairs = re.findall(r":([0-9]+):([0-9]+)", value or "")
    return sum(int(size) * 1024 * int(count) for size, count in pairs) if pairs else None


def env_kib(*names):
    """parseCUDABlasLtWorkspaceSize: the first of `names` that is set, in KiB, as bytes; None
    when none is set or it does not parse (torch warns and keeps its default)."""
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            try:
                return int(value) * 1024
            except ValueError:
                return None
    return None


def workspace_sizes(hip, major, minor, arch):
    """What each BLAS workspace torch allocates through its caching allocator measures, per
    backend (torch 2.11's CublasHandlePool.cpp, CUDA and ROCm), in this environment: a list of
    (role, bytes). The blocks observed after the cold pass are named by these sizes, not by their
    position: on ROCm the hipBLASLt block is allocated without a hipBLAS one (its handles are
    separate), so a position would call it the cuBLAS workspace."""
    if hip:
        chosen = workspace_config(os.environ.get("CUBLAS_WORKSPACE_CONFIG")
                                  or os.environ.get("HIPBLAS_WORKSPACE_CONFIG")
                                  or os.environ.get("ROCBLAS_WORKSPACE_CONFIG"))
        if chosen is None:
            gfx94_95 = (arch or "").startswith(("gfx94", "gfx95"))
            chosen = (128 if gfx94_95 else 32) * 1024 * 1024
        lt = env_kib("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE")
        return [("hipBLAS workspace", chosen),
                ("hipBLASLt workspace", 76 * 1024 * 1024 if lt is None else lt)]
    chosen = workspace_config(os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    if chosen is None:
        chosen = 4096 * 8 * 1024 if (major, minor) == (9, 0) else 4096 * 1024 * 2 + 16 * 1024 * 8
    lt = env_kib("CUBLASLT_WORKSPACE_SIZE")
    lt = 1024 * 1024 if lt is None else lt
    unified = check_env(os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"))
    if unified is not False:  # getCUDABlasLtWorkspaceSize: unset or "1" caps it
        lt = min(lt, chosen)
    roles = [("cuBLAS workspace", chosen)]
    if unified is not True:  # getCUDABlasLtWorkspace: only "1" shares the cuBLAS block
        roles.append(("cuBLASLt workspace", lt))
    return roles


def name_workspaces(blocks, sizes):
    """Names each block by the workspace whose size it has (`sizes`: workspace_sizes); a size
    that fits none, or more than one, is named so, never guessed."""
    for b in blocks:
        size = b["requested_size"]
        fits = [role for role, n in sizes if n == size]
        if len(fits) == 1:
            b["role"] = fits[0]
        elif fits:
            b["role"] = f"ambiguous: {' or '.join(fits)} (both {size} bytes)"
        else:
            b["role"] = (f"unknown: {size} bytes is no BLAS workspace of this torch ("
                         + ", ".join(f"{role} {n}" for role, n in sizes) + ")")
    return blocks


def observe_workspaces(torch, index, tensors, history, sizes):
    """The allocator's live blocks that are not the model's tensors, after the cold pass: the
    workspaces torch allocated on its first products, each named by its size for this backend
    (`sizes`: workspace_sizes). Returns (blocks in allocation order, how the order was found)."""
    try:
        snap = torch.cuda.memory._snapshot()
        segments = snap.get("segments") or []
        traces = snap.get("device_traces") or []
    except Exception:
        segments, traces = torch.cuda.memory_snapshot(), []
    owned = [t.data_ptr() for t in tensors]
    blocks = []
    for seg in segments:
        if seg.get("device", index) != index:
            continue
        address = seg.get("address", 0)
        for b in seg.get("blocks") or []:
            start = b.get("address", address)
            size = b.get("size", 0)
            address = start + size
            if b.get("state") != "active_allocated":
                continue
            if any(start <= lo < start + size for lo in owned):
                continue
            blocks.append({
                "address": start,
                "size": size,
                "requested_size": b.get("requested_size", size),
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
        blocks.sort(key=lambda b: b["address"])
        how = "by address: NO allocation order was recorded"
    how += "; named by size (" + ", ".join(f"{role} {n}" for role, n in sizes) + " bytes here)"
    return name_workspaces(blocks, sizes), how


def loaded_blas():
    """The BLAS library files this process has mapped (/proc/self/maps), in mapping order."""
    files = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                name = os.path.basename(path)
                if any(fnmatch.fnmatch(name, p) for p in BLAS_FILES) and path not in files:
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


def describe_libraries(files, found_via):
    """The cuBLAS and cuBLASLt files (what the GPU check compares with iteragpu's own), and all."""
    lt = [p for p in files if os.path.basename(p).startswith("libcublasLt")]
    blas = [p for p in files if os.path.basename(p).startswith("libcublas.")]
    return {
        "cublas": {"library": blas[0] if blas else None,
                   "version": library_version(blas[0], "cublasGetProperty") if blas else None},
        "cublaslt": {"library": lt[0] if lt else None,
                     "version": library_version(lt[0], "cublasLtGetProperty") if lt else None},
        "found_via": found_via,
        "files": files,
    }


def allocator_text():
    set_ = [f"{k}={os.environ[k]}" for k in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
                                              "PYTORCH_HIP_ALLOC_CONF") if k in os.environ]
    return "PyTorch caching allocator (this torch's own), " + (", ".join(set_) or "default configuration")


def memory_policy(torch_version, observed, how, error):
    """`configuration.memory_policy` as iteragpu's documents hold it, from what was observed."""
    def named(*roles):
        return sum(b["requested_size"] for b in observed or [] if b.get("role") in roles)

    unified = os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE")
    return {
        "allocator": allocator_text(),
        "mirrors": f"torch {torch_version} itself (observed)",
        # By what each block was allocated for (hipBLAS and hipBLASLt on ROCm), never by position.
        "cublas_workspace_bytes": named("cuBLAS workspace", "hipBLAS workspace"),
        "cublaslt_workspace_bytes": named("cuBLASLt workspace", "hipBLASLt workspace"),
        # A shared (unified) Lt workspace is no block of its own: taken from the variable.
        "cublaslt_workspace_unified": check_env(unified) is True,
        "workspaces_from": ("observed: the allocator's live blocks after the cold pass that are not "
                            f"tensors of the model, {how}") if observed is not None
                           else f"not observed: {error}",
        "torch_cublaslt_unified_workspace": {"1": "1", "0": "0"}.get(unified, "unset"),
        "disable_addmm_cuda_lt": check_env(os.environ.get("DISABLE_ADDMM_CUDA_LT")) is True,
        "linear_paths": [],
    }


def write_document(doc, output):
    """Created exclusively through a temporary file in the same folder, moved into place whole."""
    text = json.dumps(doc, indent=2) + "\n"
    if output == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    folder = os.path.dirname(os.path.abspath(output))
    tmp = os.path.join(folder, f".{os.path.basename(output)}.{os.getpid()}.tmp")
    with open(tmp, "x") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, output)  # fails if the output appeared meanwhile: never overwrite
        os.unlink(tmp)
    except FileExistsError:
        os.unlink(tmp)
        raise Refused(f"--output {output} appeared during the run; the document was not written")
    except OSError:  # a file system without hard links
        if os.path.exists(output):
            os.unlink(tmp)
            raise Refused(f"--output {output} appeared during the run; the document was not written")
        os.replace(tmp, output)


def import_torch():
    try:
        import torch
        return torch
    except Exception as e:  # ImportError, or a broken install (OSError on a missing library)
        raise Refused(f"PyTorch cannot be imported by {sys.executable} ({type(e).__name__}: {e}); "
                      "install PyTorch for CUDA or ROCm there, or choose another Python; "
                      "nothing was written")


def open_device(torch, a):
    """The GPU, or a refusal: the torch engine never falls back to the CPU."""
    build = torch_build(torch)
    m = re.fullmatch(r"cuda:([0-9]{1,3})", a.device)
    if not m:
        raise Refused(f"--device {a.device!r}: the torch engine measures a GPU, cuda:N (on ROCm too, "
                      "where torch calls AMD GPUs cuda:N)")
    if not torch.cuda.is_available():
        raise Refused(f"torch {torch.__version__} ({build}) in {sys.executable} sees no GPU "
                      "(torch.cuda.is_available() is False); the torch engine never falls back to "
                      "the CPU; nothing was written")
    count = torch.cuda.device_count()
    if int(m.group(1)) >= count:
        raise Refused(f"--device {a.device}: torch sees {count} GPU(s), cuda:0 to cuda:{count - 1}; "
                      "nothing was written")
    return torch.device(a.device)


def torch_build(torch):
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"ROCm, HIP {hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return "CPU only"


def main(argv):
    a = parse_args(argv)
    if a.output != "-" and os.path.lexists(a.output):
        raise Refused(f"--output {a.output} already exists; choose a new file (nothing was written)")
    torch = import_torch()
    import torch.nn as nn
    cpu = a.test_only_cpu
    hip = bool(getattr(torch.version, "hip", None))
    hidden = a.hidden or 4 * a.width
    rows = a.batch * a.context
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[a.dtype]
    # float32 matmuls use TF32 only with --allow-tf32 ("high"); "highest" is strict float32, which
    # gemm_and_bias turns into CUBLAS_COMPUTE_32F.
    torch.set_float32_matmul_precision("high" if a.allow_tf32 else "highest")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    # Device set-up, timed on its own (device_init_seconds), never inside model_load.
    t0 = time.perf_counter()
    if cpu:
        device = torch.device("cpu")
    else:
        device = open_device(torch, a)
        try:
            torch.cuda.set_device(device)
            torch.cuda.init()
            torch.cuda.synchronize()
        except (RuntimeError, ValueError) as e:
            raise Refused(f"--device {a.device}: {e}; nothing was written")
    device_init = time.perf_counter() - t0

    def sync():
        if not cpu:
            torch.cuda.synchronize()

    def counters():
        if cpu:
            return None
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
        if cpu:
            return None
        free, total = torch.cuda.mem_get_info(device)
        return {"free_bytes": free, "total_bytes": total, "process_used_bytes": None}

    preflight_free = None if cpu else device_memory()["free_bytes"]
    if a.estimate is not None and not cpu:
        limit, why = int(preflight_free * a.max_memory_fraction), (
            f" ({a.max_memory_fraction} of {preflight_free} free)" if a.max_memory_fraction < 1 else "")
        if a.max_memory is not None and a.max_memory < limit:
            limit, why = a.max_memory, f" under --max-memory {a.max_memory}"
        if a.estimate > limit:
            raise Refused(f"this run needs an estimated {a.estimate} bytes ({a.estimate / 2**30:.2f} GiB) "
                          f"of allocator segments at its peak but the device has {limit} bytes "
                          f"({limit / 2**30:.2f} GiB) available{why}; reduce --batch, --context, "
                          "--width or --hidden", code=3)

    def counter(c, key):
        return None if c is None else c[key]

    def run_phase(phase, index, body):
        """runner.rs `phase`: returns (row, what body returned)."""
        events = None if cpu else (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        sync()
        before = device_memory()
        base = counters()
        if not cpu:
            torch.cuda.reset_peak_memory_stats(device)
        t = time.perf_counter()
        if events:
            events[0].record()
        result = body()
        if events:
            events[1].record()
            events[1].synchronize()
        sync()
        wall = time.perf_counter() - t
        end = counters()
        after = device_memory()
        row = {
            "phase": phase,
            "index": index,
            "wall_seconds": wall,
            "device_seconds": events[0].elapsed_time(events[1]) / 1000.0 if events else None,
            "memory": {
                "baseline_allocated_bytes": counter(base, "allocated"),
                "baseline_reserved_bytes": counter(base, "reserved"),
                "end_allocated_bytes": counter(end, "allocated"),
                "end_reserved_bytes": counter(end, "reserved"),
                "peak_allocated_bytes": counter(end, "peak_allocated"),
                "peak_reserved_bytes": counter(end, "peak_reserved"),
                "baseline_requested_bytes": counter(base, "requested"),
                "end_requested_bytes": counter(end, "requested"),
                "peak_requested_bytes": counter(end, "peak_requested"),
                "device_before": before,
                "device_after": after,
            },
        }
        print(f"  {phase:<13} #{index:<3} {wall * 1e3:>10.3f} ms", file=sys.stderr, flush=True)
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
    device_index = 0 if cpu else (device.index if device.index is not None else torch.cuda.current_device())
    observed, observed_how = None, None
    observed_error = ("no caching allocator on the CPU (--test-only-cpu)" if cpu
                      else "the run stopped before the cold pass ended")
    libraries = describe_libraries(loaded_blas(), "the files mapped in /proc/self/maps before any "
                                   "product (the run stopped first)")
    current = "model_load"
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
            history = False if cpu else start_history(torch, device)
            try:
                row, y = run_phase("cold_forward", 0, forward)
                phases.append(row)
                del y
                # Outside any phase: the workspaces the first products allocated, and the BLAS
                # files they ran from.
                if not cpu:
                    try:
                        tensors = list(state["model"].parameters()) + [state["x"]]
                        props = torch.cuda.get_device_properties(device)
                        sizes = workspace_sizes(hip, props.major, props.minor,
                                                getattr(props, "gcnArchName", None))
                        observed, observed_how = observe_workspaces(torch, device_index, tensors,
                                                                    history, sizes)
                        observed_error = None
                    except Exception as e:  # never lose the run to the observation
                        observed_error = f"reading the allocator's snapshot failed: {type(e).__name__}: {e}"
                libraries = describe_libraries(loaded_blas(), "torch's own loading: the files mapped "
                                               "in /proc/self/maps after the first product")
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
            finite = bool(torch.isfinite(got).all().item())
            diff = (got - ref).abs().max().item()
            rel = diff / max(ref.abs().max().item(), 1e-300)
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
                    "message": (f"the numerical check failed: relative error {rel:.3e} exceeds the "
                                f"bound {b:.0e} for {a.dtype}") if finite else
                               "the numerical check failed: the output holds non-finite values",
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
            "allocated_bytes": None if cpu else torch.cuda.memory_allocated(device),
            "reserved_bytes": None if cpu else torch.cuda.memory_reserved(device),
        }

    if cpu:
        gpu = None
        major = minor = 0
    else:
        props = torch.cuda.get_device_properties(device)
        major, minor = props.major, props.minor
        gpu = {
            "name": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "architecture": getattr(props, "gcnArchName", None) if hip else f"sm_{props.major}{props.minor}",
            "sm_count": props.multi_processor_count,
            "total_memory_bytes": props.total_memory,
            "uuid": str(getattr(props, "uuid", "")) or None,
        }
    tool = {"name": "iteragpu", "version": a.tool_version, "commit": a.tool_commit}
    layers = [
        {"name": "linear1", "kind": "linear", "in_features": a.width, "out_features": hidden,
         "parameters": a.width * hidden + hidden},
        {"name": "gelu", "kind": "gelu", "in_features": hidden, "out_features": hidden, "parameters": 0},
        {"name": "linear2", "kind": "linear", "in_features": hidden, "out_features": a.width,
         "parameters": hidden * a.width + a.width},
    ]
    parameter_count = sum(layer["parameters"] for layer in layers)
    build = torch_build(torch)
    matmul = matmul_settings(torch)
    doc = {
        "schema": SCHEMA,
        "tool": tool,
        "started_utc": started,
        "device_init_seconds": device_init,
        "environment": {
            "schema": ENVIRONMENT_SCHEMA,
            "tool": tool,
            "requested_device": a.device,
            "backend": "torch-cpu-test-only" if cpu else ("torch-rocm" if hip else "torch-cuda"),
            "reference_device": cpu,
            "usable": True,
            "problem": None,
            "details": {
                "engine": "torch",
                "torch": torch.__version__,
                "torch_build": build,
                "python": sys.executable,
                "libraries": libraries,
                "gpu": gpu,
            },
        },
        "engine": {
            "name": "torch",
            "version": torch.__version__,
            "build": build,
            "python": sys.executable,
            "program_version": ENGINE_VERSION,
            "blas_libraries": libraries["files"],
            "allocator_knobs": {k: os.environ.get(k) for k in TORCH_KNOBS},
            "matmul": matmul,
            "mirrored_torch": MIRRORED_TORCH,
            "counters": ("unavailable: torch's CPU device has no caching allocator (--test-only-cpu, "
                         "never a product path)") if cpu else "torch.cuda.memory_stats",
            "observed_workspaces": observed,
            "observation_error": observed_error,
            "computed_policy": None if cpu else computed_policy(major, minor, rows, hip),
        },
        "configuration": {
            "device": a.device,
            "batch": a.batch,
            "context": a.context,
            "width": a.width,
            "hidden": hidden,
            "hidden_source": "--hidden" if a.hidden else "4 x width (default)",
            "dtype": a.dtype,
            "warmup": a.warmup,
            "repeats": a.repeats,
            "seed": a.seed,
            "allow_tf32": a.allow_tf32,
            "math_mode": math_mode_ran(a.dtype, matmul),
            "memory_policy": memory_policy(torch.__version__, observed, observed_how, observed_error),
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
        "preflight": {"estimated_peak_reserved_bytes": a.estimate or 0, "device_free_bytes": preflight_free},
        "phases": phases,
        "check": check,
        "complete": error is None and check is not None and check["passed"],
        "error": error,
    }
    write_document(doc, a.output)
    if not torch.__version__.startswith(MIRRORED_TORCH):
        print(f"{PREFIX}: note: torch {torch.__version__}; iteragpu mirrors torch "
              f"{MIRRORED_TORCH.rsplit('.', 1)[0]}'s counters (compared all the same)", file=sys.stderr)
    return 0 if doc["complete"] else 1


def entry(argv):
    try:
        return main(argv)
    except Refused as e:
        print(f"{PREFIX}: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
