#!/usr/bin/env python3
"""The judging part of scripts/gpu-check.sh: reads the documents one GPU check produced and says,
case by case, whether iteragpu counted what PyTorch counted.

For every case NAME the work folder holds NAME.json (iteragpu measure), NAME.plan.json
(iteragpu measure --plan --json for the same options and the GPU's compute capability),
NAME.torch.json (bench/pytorch_eager.py, or the peer case's when the case says `peer=OTHER`) and
NAME.free.json ({"ours": bytes, "torch": bytes}: the device's free memory, from nvidia-smi, just
before each tool started). It prints, per case:

- every phase row and every allocator counter, iteragpu | PyTorch | difference | the plan, and a
  verdict (same, or DIFFERENT when iteragpu differs from PyTorch or from its own plan);
- both numerical checks (iteragpu's and PyTorch's own, each against its float64 reference);
- the device-time ratio iteragpu / PyTorch of the median warm forward pass (and the cold one);
- the memory outside the allocator (CUDA context, modules, libraries): free memory before the
  tool started minus free memory after its set-up, and at the end minus what its allocator
  reserved;
- what each case expects of itself (the PTX-JIT case loaded ptx-jit, the TF32 case used TF32).

usage: gpu_check_report.py WORK_DIR [--require-peer] CASE[|peer=OTHER][|expect=KEY:VALUE] ...
Exit 0 when every counter is the same, every check passed and every expectation holds; 1 when
anything differs or failed (or, with --require-peer, a PyTorch document is missing); 2 on bad use.
"""
import json
import os
import statistics
import sys

MiB = 1024 * 1024
COUNTERS = (
    "baseline_allocated_bytes", "end_allocated_bytes", "peak_allocated_bytes",
    "baseline_reserved_bytes", "end_reserved_bytes", "peak_reserved_bytes",
    "baseline_requested_bytes", "end_requested_bytes", "peak_requested_bytes",
)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def median_seconds(doc, phase):
    rows = [r for r in (doc or {}).get("phases", []) if r.get("phase") == phase]
    dev = [r["device_seconds"] for r in rows if r.get("device_seconds")]
    if dev:
        return statistics.median(dev), "device"
    wall = [r["wall_seconds"] for r in rows if r.get("wall_seconds") is not None]
    return (statistics.median(wall), "wall") if wall else (None, "")


def num(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def check_line(who, doc):
    c = (doc or {}).get("check")
    if not c:
        return f"{who}: no check ({'no document' if doc is None else 'no forward pass finished'})", False
    ok = bool(c.get("passed"))
    return (f"{who}: {'passed' if ok else 'FAILED'} (relative error {num(c.get('relative_error'), '.2e')}, "
            f"bound {num(c.get('bound'), '.0e')}, {len(c.get('rows', []))} rows)"), ok


def outside(doc, free_before):
    """(set-up bytes, bytes outside the allocator at the end), from device-wide free memory."""
    rows = (doc or {}).get("phases") or []
    if not rows or free_before is None:
        return None, None
    first = (rows[0]["memory"].get("device_before") or {}).get("free_bytes")
    last = rows[-1]["memory"]
    after = (last.get("device_after") or {}).get("free_bytes")
    setup = free_before - first if first is not None else None
    end = free_before - after - last["end_reserved_bytes"] if after is not None else None
    return setup, end


def report_case(work, spec, require_peer, glance):
    parts = spec.split("|")
    name = parts[0]
    opts = [tuple(p.split("=", 1)) for p in parts[1:] if "=" in p]
    ours = load(os.path.join(work, name + ".json"))
    peer = next((v for k, v in reversed(opts) if k == "peer"), name)
    torch = load(os.path.join(work, peer + ".torch.json"))
    plan = load(os.path.join(work, name + ".plan.json"))
    free = load(os.path.join(work, name + ".free.json")) or {}
    problems = []
    if ours is None:
        print(f"\n== {name}: no iteragpu document")
        return ["no iteragpu document"]
    c = ours["configuration"]
    print(f"\n== {name}: {c['dtype']} [{c['batch']} x {c['context']} x {c['width']}] -> {c['hidden']}, "
          f"warmup {c['warmup']}, repeats {c['repeats']}{', --allow-tf32' if c['allow_tf32'] else ''}; "
          f"kernels {ours['environment']['details'].get('kernel_form', '-') if isinstance(ours['environment']['details'], dict) else '-'}"
          f"{'' if peer == name else f'; PyTorch side: {peer}'}")
    if not ours.get("complete"):
        problems.append("iteragpu run incomplete: " + str((ours.get("error") or {}).get("message")))
    if torch is None:
        print("   PyTorch: no document" + (" (required)" if require_peer else " (not run here)"))
        if require_peer:
            problems.append("no PyTorch document")
    elif not torch.get("complete"):
        problems.append("PyTorch run incomplete: " + str((torch.get("error") or {}).get("message")))

    # Counters, phase by phase.
    theirs = {(r["phase"], r["index"]): r for r in (torch or {}).get("phases", [])}
    planned = {(r["phase"], r["index"]): r for r in (plan or {}).get("phases", [])}
    print(f"   {'phase':<16} {'counter':<26} {'iteragpu':>14} {'pytorch':>14} {'difference':>12} {'plan':>14}  verdict")
    different = 0
    for row in ours.get("phases", []):
        key = (row["phase"], row["index"])
        label = f"{row['phase']}[{row['index']}]"
        t, p = theirs.get(key), planned.get(key)
        for k in COUNTERS:
            mine = row["memory"][k]
            tv = t["memory"].get(k) if t else None
            pv = p["memory"].get(k) if p else None
            diff = mine - tv if tv is not None else None
            same = (tv is None or tv == mine) and (pv is None or pv == mine)
            if t is None and p is None:
                verdict = "-"
            else:
                verdict = "same" if same else "DIFFERENT"
            different += not same
            print(f"   {label:<16} {k:<26} {mine:>14} {num(tv, 'd'):>14} {num(diff, '+d'):>12} {num(pv, 'd'):>14}  {verdict}")
    if torch is not None and len(theirs) != len(ours.get("phases", [])):
        print(f"   phase rows: iteragpu {len(ours.get('phases', []))}, pytorch {len(theirs)}  DIFFERENT")
        different += 1
    if different:
        problems.append(f"{different} counter(s) differ")
    pol_ours = c.get("memory_policy") or {}
    pol_torch = ((torch or {}).get("configuration") or {}).get("memory_policy") or {}
    for k in ("cublas_workspace_bytes", "cublaslt_workspace_bytes", "cublaslt_workspace_unified"):
        if torch is not None and pol_torch.get(k) != pol_ours.get(k):
            print(f"   memory_policy.{k}: iteragpu {pol_ours.get(k)}, pytorch {pol_torch.get(k)}  DIFFERENT")
            problems.append(f"memory_policy.{k} differs")

    # Numerical checks, each tool's own.
    for who, doc in (("iteragpu check", ours), ("PyTorch check", torch)):
        if doc is None:
            continue
        line, ok = check_line(who, doc)
        print("   " + line)
        if not ok:
            problems.append(who + " failed")

    # Time.
    ratios = {}
    for phase in ("warm_forward", "cold_forward"):
        a, clock_a = median_seconds(ours, phase)
        b, clock_b = median_seconds(torch, phase) if torch else (None, "")
        ratio = a / b if (a and b and clock_a == clock_b) else None
        ratios[phase] = ratio
        print(f"   {phase} median ({clock_a or '-'} clock): iteragpu {num(a and a * 1e3, '.3f')} ms, "
              f"pytorch {num(b and b * 1e3, '.3f')} ms, ratio iteragpu/pytorch {num(ratio, '.2f')}")

    # Memory outside the allocator.
    ends = {}
    for who, doc, key in (("iteragpu", ours, "ours"), ("pytorch", torch, "torch")):
        if doc is None:
            continue
        setup, end = outside(doc, free.get(key))
        ends[key] = end
        print(f"   {who} outside the allocator: set-up {num(setup and setup / MiB, '.1f')} MiB "
              f"(context, modules), at the end {num(end and end / MiB, '.1f')} MiB (with the libraries)")

    # What the case expects of itself.
    for expectation in (v for k, v in opts if k == "expect"):
        key, _, want = expectation.partition(":")
        got = None
        if key == "kernel_form":
            got = ours["environment"]["details"].get("kernel_form")
        elif key == "allow_tf32":
            got = str(c.get("allow_tf32")).lower()
        ok = got == want
        print(f"   expected {key} {want}: {got}  {'ok' if ok else 'DIFFERENT'}")
        if not ok:
            problems.append(f"{key} is {got}, expected {want}")
    print(f"   verdict: {'SAME' if not problems else 'FAILED: ' + '; '.join(problems)}")
    short = lambda doc: ("-" if doc is None else
                         ("ok " if (doc.get("check") or {}).get("passed") else "BAD ")
                         + num((doc.get("check") or {}).get("relative_error"), ".1e"))
    glance.append(
        f"{name:<12} {c['dtype']:<9} {c['batch']}x{c['context']}x{c['width']:<8} "
        f"{'same' if not different else f'{different} DIFF':>8} {short(ours):>12} {short(torch):>12} "
        f"{num(ratios.get('warm_forward'), '.2f'):>6} "
        f"{num(ends.get('ours') and ends['ours'] / MiB, '.0f'):>7} {num(ends.get('torch') and ends['torch'] / MiB, '.0f'):>7}  "
        f"{'SAME' if not problems else 'FAILED'}")
    return problems


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    work, rest = argv[0], argv[1:]
    require_peer = "--require-peer" in rest
    cases = [a for a in rest if a != "--require-peer"]
    if not os.path.isdir(work) or not cases:
        print("usage: gpu_check_report.py WORK_DIR [--require-peer] CASE ...", file=sys.stderr)
        return 2
    env = load(os.path.join(work, "environment.json")) or {}
    det = env.get("details") or {}
    gpu = det.get("gpu") or {}
    libs = det.get("libraries") or {}
    print(f"device {env.get('requested_device', '-')}: {gpu.get('name') or env.get('backend', '-')}, "
          f"compute capability {gpu.get('compute_capability', '-')}, driver "
          f"{(det.get('nvml') or {}).get('driver_version', '-')} (CUDA {(det.get('driver') or {}).get('cuda_version', '-')}), "
          f"cuBLAS {(libs.get('cublas') or {}).get('version', '-')}, kernels {det.get('kernel_form', '-')}")
    failed = {}
    glance = []
    for spec in cases:
        problems = report_case(work, spec, require_peer, glance)
        if problems:
            failed[spec.split("|")[0]] = problems
    print(f"\nat a glance: counters iteragpu vs PyTorch (and its plan), each tool's own check, warm "
          f"device-time ratio iteragpu/PyTorch, MiB outside the allocator at the end")
    print(f"{'case':<12} {'dtype':<9} {'shape':<12} {'counters':>8} {'iteragpu':>12} {'pytorch':>12} "
          f"{'ratio':>6} {'out us':>7} {'out pt':>7}  verdict")
    for line in glance:
        print(line)
    print()
    if failed:
        for name, problems in failed.items():
            print(f"FAILED {name}: {'; '.join(problems)}")
        print(f"verdict: {len(failed)} of {len(cases)} case(s) FAILED")
        return 1
    print(f"verdict: all {len(cases)} case(s) SAME")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
