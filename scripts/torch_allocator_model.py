#!/usr/bin/env python3
"""An independent model of what PyTorch 2.11's CUDA caching allocator reports for iteragpu's
measurement protocol, written from PyTorch's sources, not from iteragpu's Rust code; it checks
`iteragpu measure --plan --json`.

Two parts, each from its source:

1. The allocation sequence PyTorch eager makes for the protocol of the torch engine (crates/lab-torch/src/engine.py):
   `nn.Linear` parameters copied with `.to(device, dtype)` in module order (w1, b1, w2, b2; a
   blocking CPU->GPU copy converts on the CPU, so no temporary on the GPU), the inputs, and per
   forward pass: `F.linear` on the contiguous 3-D input = `_flatten_nd_linear` (Linear.cpp) =
   `addmm(b, x.reshape(rows, in), W.t())`, which allocates its output (the structured kernel's
   `set_output`), then takes one of two paths in `addmm_out_cuda_impl` (native/cuda/Blas.cpp):
   - the cuBLASLt path when `isGloballyDisabledAddmmCudaLt` is false (`DISABLE_ADDMM_CUDA_LT` is
     not "1") and `isInputCompliesAddmmCudaLt` holds (beta 1; result 2-D contiguous; `self`
     contiguous, 1-D or squeezable to 1-D, its last size mat2's columns; double, float, half or
     bfloat16; `mat1_sizes[0] > 1 && mat1_sizes[1] > 1 && mat2_sizes[0] > 1 && mat2_sizes[1] > 1`):
     `gemm_and_bias` -> `getCurrentCUDABlasLtHandle()` -> `getCurrentCUDABlasHandle()` ->
     `setWorkspaceForHandle()` allocates the cuBLAS workspace on the first use of the handle, then
     `CublasLtWorkspace()` -> `getCUDABlasLtWorkspace()` -> `getNewCUDABlasLtWorkspace()` the
     cuBLASLt workspace on its first use, unless unified;
   - otherwise `at::native::copy_(result, expand_size(self, ...))` (no allocation), then
     `launchGemmCublas` -> `at::cuda::blas::gemm` -> `getCurrentCUDABlasHandle()`, which allocates
     only the cuBLAS workspace, on the first use of the handle.
   Sizes (aten/src/ATen/cuda/CublasHandlePool.cpp, checked in the 2.11.0 binary): the cuBLAS
   workspace `parseChosenWorkspaceSize`, 32 MiB when `major == 9 && minor == 0`, else
   4096*1024*2 + 16*1024*8; the cuBLASLt one `parseCUDABlasLtWorkspaceSize`, 1024 KiB, cut to the
   cuBLAS size by `getCUDABlasLtWorkspaceSize` when `check_env("TORCH_CUBLASLT_UNIFIED_WORKSPACE")`
   has no value or is true, and shared with cuBLAS by `getCUDABlasLtWorkspace` only when it is
   true (`check_env`: "1" true, "0" false, anything else no value). GELU allocates a new tensor,
   linear1's output dies (`del h`), linear2's output, GELU's output dies. Each phase's output is
   freed after its row; warm-up passes free the previous output once the next exists
   (`y = model(x)`).

2. The allocator, c10/cuda/CUDACachingAllocator.cpp in its default configuration (no
   max_split_size, no roundup_power2_divisions, no expandable segments, no garbage collection),
   one stream: `round_size` (at least kMinBlockSize = 512, multiples of 512); `get_pool`
   (size <= kSmallSize = 1 MiB is small); `get_allocation_size` (kSmallBuffer 2 MiB for small,
   kLargeBuffer 20 MiB below kMinLargeAlloc 10 MiB, else rounded up to kRoundLarge 2 MiB);
   `get_free_block` (`pool.blocks.lower_bound(search_key)` under `BlockComparatorSize`: stream,
   then size, then address; the search key's address is null, so the smallest block that fits,
   lowest address first); `alloc_block` (a new segment, counted in reserved_bytes); `should_split`
   (small pool: remaining >= kMinBlockSize; large: remaining > kSmallSize); `alloc_found_block`
   (the block keeps the front, the remainder goes back to the pool; allocated_bytes grows by the
   block's size, requested_bytes by the request); `free_block` with `try_merge_blocks` on prev then
   next; `resetPeakStats` sets every peak to its current value. New segments are given increasing
   addresses (the order cudaMalloc hands them out in a fresh process; only ties between free
   blocks of one size depend on it).

usage:
  torch_allocator_model.py --batch B --context C --width W [--hidden H] [--dtype D]
      [--warmup N] [--repeats N] --compute-capability MAJOR.MINOR
      [--cublas-workspace BYTES|:KIB:COUNT] [--cublaslt-workspace BYTES]
      [--cublaslt-unified-workspace[=1|0]] [--disable-addmm-cuda-lt] [--json]
  torch_allocator_model.py --compare PLAN.json [workspace options]
      compares `iteragpu measure --plan --json` (shape and compute capability read from it) with
      this model, counter by counter and step by step; exit 1 on any difference.
"""
import argparse
import json
import re
import sys

K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = 1048576
K_SMALL_BUFFER = 2097152
K_LARGE_BUFFER = 20971520
K_MIN_LARGE_ALLOC = 10485760
K_ROUND_LARGE = 2097152

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
PHASES = ("model_load", "inputs", "cold_forward", "warmup", "warm_forward")


# ---- The allocator (CUDACachingAllocator.cpp, DeviceCachingAllocator) ----


class Block:
    def __init__(self, size, ptr, small):
        self.size = size
        self.ptr = ptr
        self.small = small
        self.allocated = False
        self.requested = 0
        self.prev = None
        self.next = None


class Stat:
    def __init__(self):
        self.current = 0
        self.peak = 0

    def increase(self, n):
        self.current += n
        self.peak = max(self.peak, self.current)

    def decrease(self, n):
        self.current -= n
        assert self.current >= 0


def round_size(size):
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def get_allocation_size(size):
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Allocator:
    def __init__(self):
        self.small_blocks = []  # free blocks; kept unsorted, searched under BlockComparatorSize
        self.large_blocks = []
        self.allocated = Stat()
        self.reserved = Stat()
        self.requested = Stat()
        self.next_address = 1 << 40

    def pool(self, small):
        return self.small_blocks if small else self.large_blocks

    def get_free_block(self, pool, size):
        fits = [b for b in pool if b.size >= size]
        if not fits:
            return None
        best = min(fits, key=lambda b: (b.size, b.ptr))
        pool.remove(best)
        return best

    def should_split(self, block, size):
        remaining = block.size - size
        if block.small:
            return remaining >= K_MIN_BLOCK_SIZE
        return remaining > K_SMALL_SIZE

    def malloc(self, orig_size):
        """Returns (block, new segment bytes)."""
        assert orig_size > 0, "PyTorch allocates nothing for 0 bytes"
        size = round_size(orig_size)
        small = size <= K_SMALL_SIZE
        pool = self.pool(small)
        block = self.get_free_block(pool, size)
        new_segment = 0
        if block is None:
            alloc_size = get_allocation_size(size)
            block = Block(alloc_size, self.next_address, small)
            self.next_address += alloc_size
            self.reserved.increase(alloc_size)
            new_segment = alloc_size
        if self.should_split(block, size):
            remaining = block
            block = Block(size, remaining.ptr, small)
            block.prev = remaining.prev
            if block.prev:
                block.prev.next = block
            block.next = remaining
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            pool.append(remaining)
        block.allocated = True
        block.requested = orig_size
        self.allocated.increase(block.size)
        self.requested.increase(orig_size)
        return block, new_segment

    def free(self, block):
        block.allocated = False
        self.allocated.decrease(block.size)
        self.requested.decrease(block.requested)
        pool = self.pool(block.small)
        for src in (block.prev, block.next):
            if src is None or src.allocated:
                continue
            if block.prev is src:  # [src block]
                block.ptr = src.ptr
                block.prev = src.prev
                if block.prev:
                    block.prev.next = block
            else:  # [block src]
                block.next = src.next
                if block.next:
                    block.next.prev = block
            block.size += src.size
            pool.remove(src)
        pool.append(block)

    def reset_peaks(self):
        for s in (self.allocated, self.reserved, self.requested):
            s.peak = s.current


# ---- PyTorch's library workspaces (CublasHandlePool.cpp) ----


def cublas_workspace_config(text):
    """parseChosenWorkspaceSize: the sum of SIZE KiB x COUNT over `:SIZE:COUNT` pairs."""
    pairs = re.findall(r":([0-9]+):([0-9]+)", text)
    if not pairs:
        raise ValueError(f"{text!r} is not a CUBLAS_WORKSPACE_CONFIG value")
    return sum(int(size) * 1024 * int(count) for size, count in pairs)


def check_env(value):
    """c10::utils::check_env: "1" is true, "0" false; unset (or anything else, warned) no value."""
    if value == "1":
        return True
    if value == "0":
        return False
    return None


def workspaces(major, minor, cublas=None, cublaslt=None, unified_env=None):
    """The workspaces: (cuBLAS bytes, cuBLASLt bytes, cuBLASLt shares the cuBLAS one).
    `unified_env` is TORCH_CUBLASLT_UNIFIED_WORKSPACE's value (None: unset)."""
    sm90 = major == 9 and minor == 0
    cublas_bytes = cublas if cublas is not None else (4096 * 8 * 1024 if sm90 else 4096 * 1024 * 2 + 16 * 1024 * 8)
    lt_bytes = cublaslt if cublaslt is not None else 1024 * 1024
    unified = check_env(unified_env)
    # getCUDABlasLtWorkspaceSize: `if (!unified.has_value() || unified.value())`, the size is cut to
    # getChosenWorkspaceSize().
    if unified is None or unified:
        lt_bytes = min(lt_bytes, cublas_bytes)
    # getCUDABlasLtWorkspace: `check_env(TORCH_CUBLASLT_UNIFIED_WORKSPACE) == true`.
    shared = unified is True
    return cublas_bytes, lt_bytes, shared


# ---- The path of addmm (native/cuda/Blas.cpp) ----


class Strided:
    """A tensor's sizes and strides (elements), as c10 keeps them."""

    def __init__(self, sizes, strides=None):
        self.sizes = list(sizes)
        if strides is None:  # at::empty: contiguous strides (c10::contiguous_strides)
            strides, z = [0] * len(sizes), 1
            for d in reversed(range(len(sizes))):
                strides[d] = z
                z *= max(sizes[d], 1)
        self.strides = list(strides)

    def dim(self):
        return len(self.sizes)

    def t(self):
        return Strided(self.sizes[::-1], self.strides[::-1])

    def is_contiguous(self):
        """TensorImpl::compute_contiguous."""
        if 0 in self.sizes:
            return True
        z = 1
        for d in reversed(range(self.dim())):
            if self.sizes[d] != 1:
                if self.strides[d] != z:
                    return False
                z *= self.sizes[d]
        return True

    def squeeze_dim(self):
        return sum(1 for s in self.sizes if s != 1)


def is_expandable_to(shape, desired):
    """at::is_expandable_to."""
    if len(shape) > len(desired):
        return False
    for size, target in zip(reversed(shape), reversed(desired)):
        if size != target and size != 1:
            return False
    return True


def is_globally_disabled_addmm_cuda_lt(env):
    """isGloballyDisabledAddmmCudaLt on CUDA (not ROCm)."""
    return env.get("DISABLE_ADDMM_CUDA_LT") == "1"


def is_input_complies_addmm_cuda_lt(result, self_, mat1, mat2, beta, scalar_type, activation=None,
                                    result_is_self=False):
    """isInputCompliesAddmmCudaLt with CUDA_VERSION >= 12010 (so without the 65535 * 32 limits)."""
    if result_is_self:
        return False
    mat1_sizes, mat2_sizes = mat1.sizes, mat2.sizes
    return (beta == 1.0
            and result.dim() == 2 and result.is_contiguous()
            and ((self_.is_contiguous()
                  and (self_.dim() == 1 or self_.squeeze_dim() == 1)
                  and self_.sizes[-1] == mat2_sizes[1])
                 or (activation is not None
                     and self_.dim() == 2
                     and is_expandable_to(self_.sizes, [mat1_sizes[0], mat2_sizes[1]])))
            and scalar_type in ("float64", "float32", "float16", "bfloat16")
            and mat1_sizes[0] > 1 and mat1_sizes[1] > 1
            and mat2_sizes[0] > 1 and mat2_sizes[1] > 1)


def linear_takes_lt(rows, in_features, out_features, dtype, env):
    """F.linear(x, W, b) on a contiguous [batch, context, in] input: _flatten_nd_linear's
    addmm(b, x.reshape(rows, in), W.t()) into a new [rows, out] result, beta = alpha = 1."""
    if is_globally_disabled_addmm_cuda_lt(env):
        return False
    result = Strided([rows, out_features])
    bias = Strided([out_features])
    mat1 = Strided([rows, in_features])
    mat2 = Strided([out_features, in_features]).t()
    return is_input_complies_addmm_cuda_lt(result, bias, mat1, mat2, 1.0, dtype)


# ---- The protocol in PyTorch eager (the torch engine (crates/lab-torch/src/engine.py)) ----


def simulate(cfg, ws, env):
    """Runs the protocol through the allocator with the workspaces `ws` (see `workspaces`) and
    the environment `env` of the PyTorch process; returns (phase rows, allocation steps)."""
    cublas_bytes, lt_bytes, lt_shared = ws
    a = Allocator()
    steps = []
    where = [None, 0]
    e = DTYPE_BYTES[cfg["dtype"]]
    rows, width, hidden = cfg["batch"] * cfg["context"], cfg["width"], cfg["hidden"]
    live = {}
    done = {"handle": False, "lt": False}

    def alloc(what, nbytes):
        block, new_segment = a.malloc(nbytes)
        steps.append({"phase": where[0], "index": where[1], "action": "allocate", "what": what,
                      "requested_bytes": nbytes, "block_bytes": block.size,
                      "pool": "small" if block.small else "large", "new_segment_bytes": new_segment})
        return (what, block)

    def free(t):
        what, block = t
        steps.append({"phase": where[0], "index": where[1], "action": "free", "what": what,
                      "requested_bytes": block.requested, "block_bytes": block.size,
                      "pool": "small" if block.small else "large", "new_segment_bytes": 0})
        a.free(block)

    def linear(name, in_features, out_features):
        out = alloc(f"{name} output", rows * out_features * e)  # addmm's result
        lt = linear_takes_lt(rows, in_features, out_features, cfg["dtype"], env)
        # Either path: getCurrentCUDABlasHandle() -> setWorkspaceForHandle(), once per handle.
        # The allocator returns nothing for 0 bytes.
        if not done["handle"]:
            if cublas_bytes > 0:
                alloc("cuBLAS workspace", cublas_bytes)
            done["handle"] = True
        # The cuBLASLt path only: getCUDABlasLtWorkspace(), once, unless unified.
        if lt and not done["lt"]:
            if not lt_shared and lt_bytes > 0:
                alloc("cuBLASLt workspace", lt_bytes)
            done["lt"] = True
        return out

    def forward():
        h = linear("linear1", width, hidden)
        g = alloc("gelu output", rows * hidden * e)
        free(h)
        y = linear("linear2", hidden, width)
        free(g)
        return y

    rows_out = []

    def phase(name, index, body):
        where[0], where[1] = name, index
        base = (a.allocated.current, a.reserved.current, a.requested.current)
        a.reset_peaks()
        result = body()
        rows_out.append({"phase": name, "index": index, "memory": {
            "baseline_allocated_bytes": base[0], "baseline_reserved_bytes": base[1],
            "end_allocated_bytes": a.allocated.current, "end_reserved_bytes": a.reserved.current,
            "peak_allocated_bytes": a.allocated.peak, "peak_reserved_bytes": a.reserved.peak,
            "baseline_requested_bytes": base[2], "end_requested_bytes": a.requested.current,
            "peak_requested_bytes": a.requested.peak}})
        where[0], where[1] = None, 0
        return result

    def load():
        shapes = [("linear1.weight", hidden * width), ("linear1.bias", hidden),
                  ("linear2.weight", width * hidden), ("linear2.bias", width)]
        for what, n in shapes:
            live[what] = alloc(what, n * e)

    phase("model_load", 0, load)
    live["inputs"] = phase("inputs", 0, lambda: alloc("inputs", rows * width * e))
    free(phase("cold_forward", 0, forward))

    def warm_all():
        y = None
        for _ in range(cfg["warmup"]):
            new = forward()
            if y is not None:
                free(y)
            y = new
        return y

    y = phase("warmup", 0, warm_all)
    if y is not None:
        free(y)
    for i in range(cfg["repeats"]):
        y = phase("warm_forward", i, forward)
        free(y)  # after its row (the last one after the numerical check)
    for what in ("inputs", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"):
        free(live[what])
    return rows_out, steps


# ---- Comparison with `iteragpu measure --plan --json` ----


COUNTERS = ("baseline_allocated_bytes", "end_allocated_bytes", "peak_allocated_bytes",
            "baseline_reserved_bytes", "end_reserved_bytes", "peak_reserved_bytes",
            "baseline_requested_bytes", "end_requested_bytes", "peak_requested_bytes")
STEP_FIELDS = ("phase", "index", "action", "what", "requested_bytes", "block_bytes", "pool",
               "new_segment_bytes")


def compare(plan, args):
    c = plan["configuration"]
    cc = plan.get("compute_capability")
    if not cc:
        print("the plan has no compute_capability: compare plans made with --device cuda", file=sys.stderr)
        return 2
    major, minor = (int(x) for x in cc.split("."))
    env = environment(args)
    ws = workspaces(major, minor, args.cublas_workspace, args.cublaslt_workspace,
                    env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"))
    cublas_bytes, lt_bytes, lt_shared = ws
    rows, steps = simulate(c, ws, env)
    differences = 0
    pol = c.get("memory_policy") or {}
    unified_env = env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE") or "unset"
    for key, want in (("cublas_workspace_bytes", cublas_bytes), ("cublaslt_workspace_bytes", lt_bytes),
                      ("cublaslt_workspace_unified", lt_shared),
                      ("torch_cublaslt_unified_workspace", unified_env),
                      ("disable_addmm_cuda_lt", is_globally_disabled_addmm_cuda_lt(env))):
        if pol.get(key) != want:
            print(f"memory_policy.{key}: plan {pol.get(key)}, model {want}  DIFFERENT")
            differences += 1
    r = c["batch"] * c["context"]
    for name, i, o in (("linear1", c["width"], c["hidden"]), ("linear2", c["hidden"], c["width"])):
        want = "cublaslt_bias_epilogue" if linear_takes_lt(r, i, o, c["dtype"], env) else "bias_copy_then_cublas_gemm"
        got = next((p.get("path") for p in pol.get("linear_paths", []) if p.get("layer") == name), None)
        verdict = "same" if got == want else "DIFFERENT"
        differences += got != want
        print(f"  {name} path: plan {got}, model {want}  {verdict}")
    print(f"{c['batch']}x{c['context']}x{c['width']} {c['dtype']} on compute capability {cc}: "
          f"counters, plan (iteragpu) | model (PyTorch's allocator, from its source)")
    print(f"  {'phase':<16} {'counter':<26} {'plan':>14} {'model':>14} {'diff':>10}  verdict")
    theirs = plan.get("phases", [])
    if len(theirs) != len(rows):
        print(f"  phase rows: plan {len(theirs)}, model {len(rows)}  DIFFERENT")
        differences += 1
    for mine, other in zip(rows, theirs):
        label = f"{mine['phase']}[{mine['index']}]"
        if (other["phase"], other["index"]) != (mine["phase"], mine["index"]):
            print(f"  {label:<16} plan has {other['phase']}[{other['index']}] here  DIFFERENT")
            differences += 1
            continue
        for k in COUNTERS:
            p, m = other["memory"][k], mine["memory"][k]
            verdict = "same" if p == m else "DIFFERENT"
            differences += p != m
            print(f"  {label:<16} {k:<26} {p:>14} {m:>14} {p - m:>10}  {verdict}")
    # The steps inside phases decide every counter; the frees after the last phase only end the run.
    planned = [{k: s[k] for k in STEP_FIELDS} for s in plan.get("allocations", [])]
    modelled = [{k: s[k] for k in STEP_FIELDS} for s in steps]
    if planned != modelled:
        differences += 1
        for i, (p, m) in enumerate(zip(planned, modelled)):
            if p != m:
                print(f"  allocation step {i}: plan {p}\n  {'':<19} model {m}  DIFFERENT")
                break
        else:
            print(f"  allocation steps: plan {len(planned)}, model {len(modelled)}  DIFFERENT")
    else:
        print(f"  allocation sequence: {len(planned)} steps, the same")
    print(f"verdict: {'SAME' if differences == 0 else f'{differences} DIFFERENCE(S)'}")
    return 0 if differences == 0 else 1


def workspace_bytes(text):
    if text.strip().startswith(":"):
        return cublas_workspace_config(text.strip())
    m = re.fullmatch(r"\s*([0-9]+)\s*(B|KiB|MiB|GiB)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count")
    return int(m.group(1)) << {None: 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[m.group(2)]


def environment(args):
    """The variables of the PyTorch process the options stand for."""
    env = {}
    unified = "1" if args.unified else args.cublaslt_unified_workspace
    if unified is not None:
        env["TORCH_CUBLASLT_UNIFIED_WORKSPACE"] = unified
    if args.disable_addmm_cuda_lt:
        env["DISABLE_ADDMM_CUDA_LT"] = "1"
    return env


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compare", metavar="PLAN.json", help="`iteragpu measure --plan --json` output to check")
    p.add_argument("--batch", type=int)
    p.add_argument("--context", type=int)
    p.add_argument("--width", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="float32")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--compute-capability")
    p.add_argument("--cublas-workspace", type=workspace_bytes)
    p.add_argument("--cublaslt-workspace", type=workspace_bytes)
    p.add_argument("--cublaslt-unified-workspace", nargs="?", const="1", choices=["1", "0"],
                   help="TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 (the default when given without a value) or =0; "
                        "left out: unset")
    p.add_argument("--unified", action="store_true", help="the same as --cublaslt-unified-workspace=1")
    p.add_argument("--disable-addmm-cuda-lt", action="store_true", help="DISABLE_ADDMM_CUDA_LT=1")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.compare:
        with open(a.compare) as f:
            return compare(json.load(f), a)
    if not (a.batch and a.context and a.width and a.compute_capability):
        p.error("--batch, --context, --width and --compute-capability are required without --compare")
    major, minor = (int(x) for x in a.compute_capability.split("."))
    env = environment(a)
    ws = workspaces(major, minor, a.cublas_workspace, a.cublaslt_workspace,
                    env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"))
    cfg = {"batch": a.batch, "context": a.context, "width": a.width, "hidden": a.hidden or 4 * a.width,
           "dtype": a.dtype, "warmup": a.warmup, "repeats": a.repeats}
    rows, steps = simulate(cfg, ws, env)
    if a.json:
        json.dump({"phases": rows, "allocations": steps}, sys.stdout, indent=2)
        print()
    else:
        for r in rows:
            m = r["memory"]
            print(f"{r['phase']:<13} {r['index']:>3} allocated end {m['end_allocated_bytes']:>14} "
                  f"peak {m['peak_allocated_bytes']:>14}  reserved end {m['end_reserved_bytes']:>14} "
                  f"peak {m['peak_reserved_bytes']:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
