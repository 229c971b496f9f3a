#!/usr/bin/env python3
"""The measurement protocol of `iteragpu measure`, in PyTorch eager, for side-by-side comparison.

Same model (Linear(width -> hidden) -> exact GELU -> Linear(hidden -> width), with bias), same
phases (model_load, inputs, cold_forward, warmup, warm_forward x repeats), same per-phase protocol
(synchronize, read baseline counters, reset peaks, start clocks, run, synchronize, stop clocks,
read end counters and peaks; the last output is alive when the end counters are read and freed
before the next phase) and the same JSON shape as `iteragpu measure --output`.

Differences, on purpose and stated: weights use nn.Linear's own initialisation (same bounds,
different values) and inputs come from an in-place seeded `uniform_(-1, 1)` (one allocation, like
our input kernel), so values differ from iteragpu's; the check compares with a float64 CPU
recomputation of this run's own values.

usage: pytorch_eager.py --batch B --context C --width W [--hidden H] --dtype float32|float16|bfloat16
                        [--warmup N] [--repeats N] [--seed S] [--allow-tf32] --output FILE
"""
import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.nn as nn

SCHEMA = "iteragpu.measurement/1"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
BOUNDS = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2}


def counters():
    s = torch.cuda.memory_stats()
    return {
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "requested": s.get("requested_bytes.all.current", 0),
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "peak_requested": s.get("requested_bytes.all.peak", 0),
    }


def device_memory():
    free, total = torch.cuda.mem_get_info()
    return {"free_bytes": free, "total_bytes": total, "process_used_bytes": None}


def run_phase(phase, index, body):
    """Runs `body` under the protocol; returns (row, whatever body returned)."""
    torch.cuda.synchronize()
    base = counters()
    before = device_memory()
    torch.cuda.reset_peak_memory_stats()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    result = body()
    stop.record()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
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


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--width", type=int, required=True)
    p.add_argument("--hidden", type=int)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allow-tf32", action="store_true")
    p.add_argument("--output", required=True)
    a = p.parse_args()
    if os.path.exists(a.output):
        sys.exit(f"pytorch_eager: {a.output} exists; refusing to overwrite it")

    hidden = a.hidden or 4 * a.width
    dtype = DTYPES[a.dtype]
    torch.backends.cuda.matmul.allow_tf32 = a.allow_tf32
    torch.backends.cudnn.allow_tf32 = a.allow_tf32
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    t0 = time.perf_counter()
    device = torch.device(a.device)
    torch.cuda.set_device(device)
    torch.cuda.init()
    torch.cuda.synchronize()
    device_init = time.perf_counter() - t0

    torch.manual_seed(a.seed)
    rows = a.batch * a.context
    phases = []
    error = None
    check = None
    model = None
    x = None
    gelu = nn.GELU()

    def forward():
        h = model[0](x)
        g = gelu(h)
        del h
        out = model[1](g)
        del g
        return out

    def load():
        l1 = nn.Linear(a.width, hidden, dtype=dtype)
        l2 = nn.Linear(hidden, a.width, dtype=dtype)
        return nn.ModuleList([l1, l2]).to(device)

    def inputs():
        gen = torch.Generator(device=device)
        gen.manual_seed(a.seed)
        return torch.empty((a.batch, a.context, a.width), dtype=dtype, device=device).uniform_(-1, 1, generator=gen)

    current = "model_load"
    out = None
    try:
        with torch.inference_mode():
            row, model = run_phase("model_load", 0, load)
            phases.append(row)
            current = "inputs"
            row, x = run_phase("inputs", 0, inputs)
            phases.append(row)
            current = "cold_forward"
            row, out = run_phase("cold_forward", 0, forward)
            phases.append(row)
            out = None

            def warm_all():
                y = None
                for _ in range(a.warmup):
                    y = None
                    y = forward()
                return y

            current = "warmup"
            row, out = run_phase("warmup", 0, warm_all)
            phases.append(row)
            out = None
            current = "warm_forward"
            for i in range(a.repeats):
                row, y = run_phase("warm_forward", i, forward)
                phases.append(row)
                if i + 1 < a.repeats:
                    del y
                else:
                    out = y
            if out is not None:
                sample = sorted({0, rows // 2, rows - 1})
                xs = x.reshape(rows, a.width)[sample].double().cpu()
                w1, b1 = model[0].weight.double().cpu(), model[0].bias.double().cpu()
                w2, b2 = model[1].weight.double().cpu(), model[1].bias.double().cpu()
                ref = torch.nn.functional.gelu(xs @ w1.T + b1) @ w2.T + b2
                got = out.reshape(rows, a.width)[sample].double().cpu()
                diff = (got - ref).abs().max().item()
                rel = diff / max(ref.abs().max().item(), 1e-30)
                bound = BOUNDS[a.dtype] if not (a.allow_tf32 and a.dtype == "float32") else 1e-2
                check = {
                    "method": "float64 CPU recomputation of sampled rows (PyTorch's own weights and inputs)",
                    "rows": sample,
                    "max_abs_error": diff,
                    "relative_error": rel,
                    "bound": bound,
                    "passed": bool(torch.isfinite(got).all().item()) and rel <= bound,
                }
    except torch.cuda.OutOfMemoryError as e:
        error = {
            "phase": current,
            "kind": "out_of_memory",
            "message": str(e).splitlines()[0],
            "allocated_bytes": torch.cuda.memory_allocated(),
            "reserved_bytes": torch.cuda.memory_reserved(),
        }

    props = torch.cuda.get_device_properties(device)
    flops = 2 * rows * a.width * hidden * 2
    doc = {
        "schema": SCHEMA,
        "tool": {"name": "pytorch-eager", "version": torch.__version__, "commit": None},
        "started_utc": started,
        "device_init_seconds": device_init,
        "environment": {
            "schema": "iteragpu.environment/1",
            "tool": {"name": "pytorch-eager", "version": torch.__version__, "commit": None},
            "requested_device": a.device,
            "backend": "pytorch",
            "reference_device": False,
            "usable": True,
            "problem": None,
            "details": {
                "torch": torch.__version__,
                "torch_cuda": torch.version.cuda,
                "cublas_workspace_config": "default",
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
            "math_mode": "float32 accumulate, " + ("TF32 allowed" if a.allow_tf32 else "strict float32"),
        },
        "synthetic_model": {
            "description": "Linear(width -> hidden) -> GELU(exact) -> Linear(hidden -> width), with bias",
            "parameter_count": a.width * hidden + hidden + hidden * a.width + a.width,
            "input_shape": [a.batch, a.context, a.width],
            "hidden_shape": [a.batch, a.context, hidden],
            "output_shape": [a.batch, a.context, a.width],
            "dtype": a.dtype,
            "forward_flops": flops,
        },
        "preflight": None,
        "phases": phases,
        "check": check,
        "complete": error is None and check is not None and check["passed"],
        "error": error,
    }
    tmp = a.output + ".tmp"
    with open(tmp, "x") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, a.output)
    return 0 if doc["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
