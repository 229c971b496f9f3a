#!/usr/bin/env python3
"""Runs `iteragpu measure --device cpu` and bench/cpu_eager.py (PyTorch eager) in interleaved
pairs on every case and prints one table of per-pair ratios. Called by bench/cpu-vs-pytorch.sh,
which sets up PyTorch; see that script for the options.

A pair is one run of each side, one right after the other, the order flipping from pair to pair;
each run times `--repeats` warm passes after one cold pass and `--warmup` passes, and its median
warm pass is its figure. The ratio of a pair is ours / PyTorch: two runs seconds apart see the
same machine, so the ratio is steadier than either time when other work competes for the cores.
The table gives, per case, the median over pairs of each side's figure and of the ratio, and the
ratio's range (min-max over pairs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [
    # name, batch, context, width, dtype
    ("b2 c128 w1024 float32", 2, 128, 1024, "float32"),
    ("b2 c128 w1024 bfloat16", 2, 128, 1024, "bfloat16"),
    ("b2 c128 w1024 float16", 2, 128, 1024, "float16"),
    ("b4 c512 w2048 float32", 4, 512, 2048, "float32"),
] + [(f"b2 c128 w{w} float32", 2, 128, w, "float32") for w in (64, 128, 256, 512, 2048)]

# The targets (ours / PyTorch, 2 threads each), printed beside the ratios.
TARGETS = {
    "b2 c128 w1024 float32": 1.0,
    "b2 c128 w1024 bfloat16": 1.0,
    "b2 c128 w1024 float16": 1.0,
    "b4 c512 w2048 float32": 1.0,
    "b2 c128 w64 float32": 1.5,
    "b2 c128 w128 float32": 1.5,
}


def loadavg() -> str:
    with open("/proc/loadavg", encoding="utf-8") as f:
        return " ".join(f.read().split()[:3])


def run_ours(args, case, out_dir, n):
    _, b, c, w, dtype = case
    out = os.path.join(out_dir, f"ours-{n}.json")
    cmd = [args.bin, "measure", "--device", "cpu", "--batch", str(b), "--context", str(c),
           "--width", str(w), "--dtype", dtype, "--warmup", str(args.warmup), "--repeats",
           str(args.repeats), "--threads", str(args.threads), "--output", out, "--json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out, encoding="utf-8") as f:
        doc = json.load(f)
    if not doc.get("complete"):
        sys.exit(f"cpu-vs-pytorch: iteragpu run is not complete: {doc.get('error')}")
    warm = [p["wall_seconds"] for p in doc["phases"] if p["phase"] == "warm_forward"]
    return statistics.median(warm), doc


def run_torch(args, case):
    _, b, c, w, dtype = case
    cmd = [args.python, args.eager, "--batch", str(b), "--context", str(c), "--width", str(w),
           "--dtype", dtype, "--warmup", str(args.warmup), "--repeats", str(args.repeats),
           "--threads", str(args.threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
    return doc["warm_forward_median_seconds"], doc


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--python", required=True)
    p.add_argument("--eager", required=True)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--case", action="append", help="only the cases whose name contains this")
    args = p.parse_args()
    cases = [c for c in CASES if not args.case or any(s in c[0] for s in args.case)]
    if not cases:
        sys.exit(f"cpu-vs-pytorch: no case matches {args.case}; cases: {[c[0] for c in CASES]}")

    load_before, started = loadavg(), time.time()
    rows, ours_doc, torch_doc = [], None, None
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for case in cases:
            ours, torch_, ratios = [], [], []
            for pair in range(args.pairs):
                print(f"cpu-vs-pytorch: {case[0]}, pair {pair + 1} of {args.pairs}",
                      file=sys.stderr, flush=True)
                n += 1
                if pair % 2 == 0:
                    o, ours_doc = run_ours(args, case, tmp, n)
                    t, torch_doc = run_torch(args, case)
                else:
                    t, torch_doc = run_torch(args, case)
                    o, ours_doc = run_ours(args, case, tmp, n)
                ours.append(o)
                torch_.append(t)
                ratios.append(o / t)
            rows.append((case, ours, torch_, ratios, torch_doc["forward_flops"]))
            # Each case as it finishes, so an interrupted run still leaves its figures.
            print(f"cpu-vs-pytorch: {case[0]}: ours {statistics.median(ours) * 1e3:.3f} ms, "
                  f"torch {statistics.median(torch_) * 1e3:.3f} ms, ratio "
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
                  f"load {loadavg()}", file=sys.stderr, flush=True)
    load_after, minutes = loadavg(), (time.time() - started) / 60

    env = ours_doc["environment"]["details"]
    print(f"cpu:     {torch_doc['cpu_model']} ({os.cpu_count()} logical CPUs, "
          f"vector unit {env.get('vector_unit')})")
    print(f"ours:    iteragpu {ours_doc['tool']['version']} ({env.get('gemm')}), "
          f"{env.get('threads')} threads")
    print(f"pytorch: torch {torch_doc['torch']} (capability {torch_doc['cpu_capability']}, "
          f"mkldnn {torch_doc['mkldnn']}), {torch_doc['threads']} threads")
    print(f"passes:  1 cold, {args.warmup} warm-up, {args.repeats} timed per run; "
          f"{args.pairs} interleaved pairs per case; {minutes:.1f} min")
    print(f"load:    {load_before} before, {load_after} after (1/5/15-minute load averages)")
    print()
    head = (f"{'case':<24}{'ours ms':>10}{'torch ms':>10}{'ours GF/s':>11}{'torch GF/s':>11}"
            f"{'ratio':>8}{'min-max':>13}  {'target':<10}")
    print(head)
    print("-" * len(head))
    for case, ours, torch_, ratios, flops in rows:
        mo, mt, mr = statistics.median(ours), statistics.median(torch_), statistics.median(ratios)
        target = TARGETS.get(case[0])
        verdict = "" if target is None else f"<={target:g} {'ok' if mr <= target else 'MISS'}"
        print(f"{case[0]:<24}{mo * 1e3:>10.3f}{mt * 1e3:>10.3f}{flops / mo / 1e9:>11.1f}"
              f"{flops / mt / 1e9:>11.1f}{mr:>8.2f}{f'{min(ratios):.2f}-{max(ratios):.2f}':>13}"
              f"  {verdict:<10}".rstrip())
    print()
    print("ratio = ours / PyTorch per pair (each run's median warm pass), median over pairs; "
          "below 1 we are faster.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
