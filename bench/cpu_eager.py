#!/usr/bin/env python3
"""The forward-pass timing of `iteragpu measure --device cpu`, in PyTorch eager on the CPU.

Same model: nn.Sequential(Linear(width -> hidden), GELU() (exact erf), Linear(hidden -> width)),
with bias, hidden = 4 x width unless --hidden. Same inputs shape (batch, context, width), uniform
in [-1, 1). Same order of passes as our phase runner (crates/lab/src/measure/runner.rs): one cold
pass, `--warmup` passes, then `--repeats` warm passes, each timed on its own with
time.perf_counter() around exactly one `model(x)`; the previous output is released before the
next timed pass starts, as the runner frees it between phases. Everything runs under
torch.inference_mode(), as `iteragpu measure` has no autograd either.

Not the same on purpose: weights come from nn.Linear's own seeded initialisation (same bounds,
other values) and inputs from a seeded uniform_(-1, 1), so values differ from iteragpu's; timings
do not depend on the values. There are no memory counters: PyTorch's CPU allocator has none.

Prints one JSON document on stdout.

usage: cpu_eager.py --batch B --context C --width W [--hidden H] [--dtype float32|bfloat16|float16]
                    [--warmup N] [--repeats N] [--seed S] [--threads T]
"""
import argparse
import json
import platform
import statistics
import sys
import time

import torch
import torch.nn as nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a non-negative integer")
    return value


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> int:
    p = argparse.ArgumentParser(description="PyTorch eager CPU forward timing of the synthetic model")
    p.add_argument("--batch", type=positive, required=True)
    p.add_argument("--context", type=positive, required=True)
    p.add_argument("--width", type=positive, required=True)
    p.add_argument("--hidden", type=positive)
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--warmup", type=non_negative, default=3)
    p.add_argument("--repeats", type=positive, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive, help="torch.set_num_threads(T); default: PyTorch's own choice")
    a = p.parse_args()

    if a.threads is not None:
        torch.set_num_threads(a.threads)
    hidden = a.hidden or 4 * a.width
    dtype = DTYPES[a.dtype]
    torch.manual_seed(a.seed)

    with torch.inference_mode():
        model = nn.Sequential(
            nn.Linear(a.width, hidden, dtype=dtype),
            nn.GELU(),
            nn.Linear(hidden, a.width, dtype=dtype),
        ).eval()
        gen = torch.Generator().manual_seed(a.seed)
        x = torch.empty((a.batch, a.context, a.width), dtype=dtype).uniform_(-1, 1, generator=gen)

        cold, y = timed(lambda: model(x))
        del y
        warmup = []
        for _ in range(a.warmup):
            seconds, y = timed(lambda: model(x))
            del y
            warmup.append(seconds)
        warm = []
        for _ in range(a.repeats):
            seconds, y = timed(lambda: model(x))
            warm.append(seconds)
            del y

    rows = a.batch * a.context
    flops = 2 * rows * a.width * hidden * 2
    median = statistics.median(warm)
    doc = {
        "tool": "pytorch-eager-cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "threads": torch.get_num_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "mkl": torch.backends.mkl.is_available(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "configuration": {
            "batch": a.batch,
            "context": a.context,
            "width": a.width,
            "hidden": hidden,
            "dtype": a.dtype,
            "warmup": a.warmup,
            "repeats": a.repeats,
            "seed": a.seed,
        },
        "forward_flops": flops,
        "cold_forward_seconds": cold,
        "warmup_seconds": warmup,
        "warm_forward_seconds": warm,
        "warm_forward_median_seconds": median,
        "warm_forward_min_seconds": min(warm),
        "median_gflops": flops / median / 1e9,
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
