#!/usr/bin/env python3
"""The judging part of scripts/gpu-check.sh: reads the documents one GPU check produced and says,
case by case, whether iteragpu counted what PyTorch counted.

For every case NAME the work folder holds NAME.json (iteragpu measure), NAME.plan.json
(iteragpu measure --plan --json for the same options and the GPU's compute capability),
NAME.torch.json (iteragpu measure --engine torch, or the peer case's when the case says `peer=OTHER`) and
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

- the workspaces: the blocks PyTorch's allocator was OBSERVED to hold after its cold pass that
  are not tensors of the model (the torch engine's `engine.observed_workspaces`: the cuBLAS workspace, then the cuBLASLt
  one on the Lt path) against the blocks iteragpu's `configuration.memory_policy` says it
  allocates; a torch other than the one iteragpu mirrors (2.11.0) is flagged and still compared;
- the cuBLAS and cuBLASLt files each tool ran with (iteragpu's `environment.details.libraries`,
  PyTorch's from /proc/self/maps), which must be the same files (resolved paths);
- the torch knobs PyTorch ran with (all must be unset; gpu-check.sh clears them and records what
  it found in torch-knobs.json).

When the folder holds probe.json (iteragpu probe --device all), it then prints every figure of
the probe per GPU (copy bandwidth, GEMM throughput, peer copies) with its datasheet figure and
the percentage, and the probe's warnings. The probe is reported, not judged: it does not change
the exit status.

usage: gpu_check_report.py WORK_DIR [--require-peer] CASE[|peer=OTHER][|expect=KEY:VALUE] ...
Exit 0 when every counter is the same, every check passed and every expectation holds; 1 when
anything differs or failed (or, with --require-peer, a PyTorch document is missing); 2 on bad use.

gpu-check.sh's other uses of it (one Python start-up each, no torch):
  gpu_check_report.py --record-knobs FILE NAME...   writes {NAME: value or null} as found
  gpu_check_report.py --environment FILE [CUBLAS_FILE...]
                      the facts of an `environment --json` document, as text; with the cuBLAS
                      files torch loaded, exit 1 unless iteragpu loaded the same ones
  gpu_check_report.py --lot FILE                    the lot checks of `environment --device all --json`
  gpu_check_report.py --plan [--rehearsal] --budget S --limit S --probe-seconds S SPEC...
                      the planned steps, each with an ESTIMATE of its seconds from the shapes
                      and its share of the budget (SPEC: NAME|OPTIONS|ITERAGPU_ONLY|NOTES)
"""
import json
import os
import re
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


LT_PATH = "cublaslt_bias_epilogue"


def takes_lt_path(policy):
    """Whether some Linear takes the cuBLASLt path: `memory_policy.linear_paths` when the policy
    lists them (torch leaves that path for a product with a dimension of 1, or with
    DISABLE_ADDMM_CUDA_LT=1), else every Linear does."""
    paths = policy.get("linear_paths")
    if not isinstance(paths, list) or not paths:
        return True
    return any((p or {}).get("path") == LT_PATH for p in paths)


def implied_workspaces(policy):
    """The workspace blocks a memory_policy says are allocated: the cuBLAS one, and the cuBLASLt
    one unless it is unified (shared), empty, or no Linear takes the cuBLASLt path."""
    blocks = []
    if (policy.get("cublas_workspace_bytes") or 0) > 0:
        blocks.append(("cuBLAS", policy["cublas_workspace_bytes"]))
    if ((policy.get("cublaslt_workspace_bytes") or 0) > 0 and not policy.get("cublaslt_workspace_unified")
            and takes_lt_path(policy)):
        blocks.append(("cuBLASLt", policy["cublaslt_workspace_bytes"]))
    return blocks


def blocks_text(blocks):
    return " + ".join(f"{role} {size}" for role, size in blocks) if blocks else "none"


def compare_workspaces(pol_ours, torch):
    """iteragpu's memory_policy against the workspaces PyTorch was observed to allocate."""
    # The torch engine's document keeps the observation in its `engine` section (older documents
    # of the former bench/pytorch_eager.py kept it in memory_policy).
    pol_torch = torch.get("engine") or (torch.get("configuration") or {}).get("memory_policy") or {}
    ours = implied_workspaces(pol_ours)
    observed = pol_torch.get("observed_workspaces")
    if not isinstance(observed, list):
        why = pol_torch.get("observation_error") or "the document has no observed_workspaces"
        print(f"   workspaces: iteragpu's memory_policy {blocks_text(ours)}; PyTorch's NOT OBSERVED ({why})")
        return [f"PyTorch's workspaces were not observed ({why})"]
    theirs = [((b.get("role") or "unknown").replace(" workspace", ""), b.get("requested_size", b.get("size")))
              for b in observed]
    same = sorted(size for _, size in ours) == sorted(size for _, size in theirs)
    paths = [f"{p.get('layer', '?')} {p.get('path', '?')}" for p in pol_ours.get("linear_paths") or []
             if isinstance(p, dict)]
    print(f"   workspaces: iteragpu's memory_policy {blocks_text(ours)} B"
          f"{' (cuBLASLt unified)' if pol_ours.get('cublaslt_workspace_unified') else ''}"
          f"{'' if takes_lt_path(pol_ours) else ' (no cuBLASLt path: ' + ', '.join(paths) + ')'}; "
          f"PyTorch observed {blocks_text(theirs)} B after the cold pass  {'same' if same else 'DIFFERENT'}")
    if same:
        return []
    named = dict(theirs)
    for role, key in (("cuBLAS", "cublas_workspace_bytes"), ("cuBLASLt", "cublaslt_workspace_bytes")):
        mine = dict(ours).get(role, 0)
        got = named.get(role, 0)
        if mine != got:
            print(f"   memory_policy.{key}: iteragpu {mine}, pytorch observed {got}")
    return [f"workspaces differ: iteragpu's memory_policy {blocks_text(ours)}, "
            f"PyTorch observed {blocks_text(theirs)}"]


def library_file(doc, key):
    libs = (((doc or {}).get("environment") or {}).get("details") or {})
    libs = (libs.get("libraries") if isinstance(libs, dict) else None) or {}
    return (libs.get(key) or {}).get("library")


def resolved(path):
    return os.path.realpath(os.path.expanduser(path))


def compare_libraries(ours, torch):
    """The cuBLAS and cuBLASLt files each tool ran with must be the same files."""
    problems = []
    for key, label in (("cublas", "cuBLAS"), ("cublaslt", "cuBLASLt")):
        a, b = library_file(ours, key), library_file(torch, key)
        if a is None or b is None:
            who = " and ".join(w for w, f in (("iteragpu", a), ("PyTorch", b)) if f is None)
            print(f"   {label} file: iteragpu {a or '-'}, pytorch {b or '-'}  NOT RECORDED by {who}")
            problems.append(f"{label} file not recorded by {who}")
            continue
        ra, rb = resolved(a), resolved(b)
        show = lambda p, r: p if p == r else f"{p} ({r})"
        print(f"   {label} file: iteragpu {show(a, ra)}, pytorch {show(b, rb)}  {'same' if ra == rb else 'DIFFERENT'}")
        if ra != rb:
            problems.append(f"different {label} files: iteragpu {ra}, PyTorch {rb}")
    files = ((((torch.get("environment") or {}).get("details") or {}).get("libraries") or {}).get("files")) or []
    for prefix, label in (("libcublasLt", "cuBLASLt"), ("libcublas.", "cuBLAS")):
        mapped = sorted({resolved(f) for f in files if os.path.basename(f).startswith(prefix)})
        if len(mapped) > 1:
            print(f"   PyTorch has {len(mapped)} {label} files mapped: {', '.join(mapped)}  DIFFERENT")
            problems.append(f"PyTorch has {len(mapped)} {label} files mapped")
    return problems


def torch_knobs_as_run(torch):
    knobs = (torch.get("engine") or {}).get("allocator_knobs")
    if not isinstance(knobs, dict):
        print("   torch knobs: not recorded by the PyTorch document")
        return ["torch knobs not recorded"]
    set_ = [f"{k}={v}" for k, v in knobs.items() if v is not None]
    if set_:
        print(f"   torch knobs: PyTorch ran with {', '.join(set_)}  DIFFERENT (gpu-check clears them)")
        return [f"PyTorch ran with {', '.join(set_)}"]
    return []


def torch_version(torch):
    return (torch.get("engine") or {}).get("version")


def flag_torch_version(pol_ours, torch):
    """A torch other than the one iteragpu mirrors is flagged (a line), and still compared."""
    mirrors = pol_ours.get("mirrors") or "torch 2.11"
    want = mirrors.split()[-1]
    got = torch_version(torch) or "unknown"
    base = got.split("+")[0]
    if base != want and not (want.count(".") == 1 and base == want + ".0"):
        print(f"   PyTorch is torch {got}; iteragpu mirrors {mirrors}: compared all the same, "
              f"a difference may be this torch's")


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
    if torch is not None:
        problems += compare_workspaces(c.get("memory_policy") or {}, torch)
        problems += compare_libraries(ours, torch)
        problems += torch_knobs_as_run(torch)
        flag_torch_version(c.get("memory_policy") or {}, torch)

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


def report_probe(work):
    """Prints the probe's figures against the datasheet; returns whether a probe was found."""
    doc = load(os.path.join(work, "probe.json"))
    if doc is None:
        print("\nprobe: no probe.json (the probe did not run or wrote nothing)")
        return False
    cfg = doc.get("configuration") or {}
    print(f"\n== probe {doc.get('requested_device', '-')}: {cfg.get('seconds_per_gpu', '-')} s per GPU, "
          f"datasheet table {doc.get('datasheet', '-')}, {doc.get('warnings', 0)} warning(s)"
          f"{', CPU REFERENCE DEVICE: host copies only, not a GPU figure' if doc.get('reference_device') else ''}")
    print(f"   {'device':<8} {'figure':<30} {'measured':>14} {'datasheet':>14} {'percent':>8}")

    def line(device, figure, value, unit, ref):
        if value is None:
            return
        if ref:
            low = "  LOW" if ref.get("below_threshold") else ""
            tail = f"{num(ref.get('value'), '.1f'):>9} {unit:<4} {num(ref.get('percent'), '.1f'):>7}%{low}"
        else:
            tail = f"{'-':>14} {'-':>8}"
        print(f"   {device:<8} {figure:<30} {num(value, '.1f'):>9} {unit:<4} {tail}")

    for d in doc.get("devices") or []:
        name = ((d.get("facts") or {}).get("name")) or ""
        row = d.get("datasheet") or {}
        if name or row:
            print(f"   {d.get('device', '-')} {name}: datasheet row {row.get('model', '-')}")
        for c in d.get("copies") or []:
            line(d.get("device", "-"), c.get("kind", "-"), c.get("gb_per_s"), "GB/s", c.get("reference"))
            if c.get("status") != "measured":
                print(f"   {d.get('device', '-'):<8} {c.get('kind', '-'):<30} {c.get('status')}: {c.get('note') or ''}")
        for g in d.get("gemms") or []:
            fig = f"{g.get('kind', '-')} {g.get('m')}x{g.get('n')}x{g.get('k')}"
            line(d.get("device", "-"), fig, g.get("tflops"), "TF/s", g.get("reference"))
            if g.get("status") != "measured":
                print(f"   {d.get('device', '-'):<8} {fig:<30} {g.get('status')}: {g.get('note') or ''}")
    for p in doc.get("peers") or []:
        line(p.get("from", "-"), f"peer {p.get('from')} -> {p.get('to')}", p.get("gb_per_s"), "GB/s", p.get("reference"))
    for f in doc.get("findings") or []:
        if f.get("severity") == "warning":
            print(f"   WARNING {f.get('code')}: {f.get('message')}")
    print(f"   probe {'complete' if doc.get('complete') else 'INCOMPLETE: ' + str(doc.get('error') or 'some figures failed')}")
    return True


def record_knobs(path, names):
    """Writes {name: value or null} for the knobs as this process found them; prints them."""
    found = {k: os.environ.get(k) for k in names}
    with open(path, "w") as f:
        json.dump(found, f, indent=2)
        f.write("\n")
    set_ = [f"{k}={v}" for k, v in found.items() if v is not None]
    print(f"torch knobs found: {', '.join(set_) if set_ else 'none set'}; "
          f"cleared for every tool ({', '.join(names)})")
    return 0


def describe_environment(path, torch_files):
    """The facts of `environment --json` as text (gpu-check runs `environment` once, in JSON),
    with `compute capability:`, `uuid:` and `visible devices:` lines for the script to read.
    With the cuBLAS files torch loaded: exit 1 unless iteragpu loaded the same ones."""
    env = load(path)
    if not isinstance(env, dict):
        print(f"environment: no document ({path})")
        return 1
    det = env.get("details") if isinstance(env.get("details"), dict) else {}
    gpu = det.get("gpu") or {}
    drv = det.get("driver") or {}
    nvml = det.get("nvml") or {}
    libs = det.get("libraries") or {}
    tool = env.get("tool") or {}
    print(f"{tool.get('name', '-')} {tool.get('version', '-')} ({tool.get('commit') or 'unknown commit'})")
    print(f"device {env.get('requested_device', '-')}: backend {env.get('backend', '-')}, "
          f"usable: {'yes' if env.get('usable') else 'NO'}"
          f"{', CPU reference device' if env.get('reference_device') else ''}")
    if env.get("problem"):
        print(f"  problem: {env['problem']}")
    if gpu:
        print(f"  gpu: {gpu.get('name', '-')}, {num(gpu.get('total_memory_bytes') and gpu['total_memory_bytes'] / MiB, '.0f')} MiB")
        print(f"  compute capability: {gpu.get('compute_capability', '')}")
        print(f"  uuid: {gpu.get('uuid', '')}")
    if drv:
        print(f"  driver: {drv.get('library', '-')} (CUDA {drv.get('cuda_version', '-')})")
    if nvml:
        print(f"  nvml: {nvml.get('library', '-')}, driver {nvml.get('driver_version', '-')}")
    for key, label in (("cublas", "cuBLAS"), ("cublaslt", "cuBLASLt")):
        lib = libs.get(key) or {}
        if lib:
            print(f"  {label}: {lib.get('library', '-')} ({lib.get('version', '-')})")
    if libs:
        print(f"  cuBLAS found via: {libs.get('found_via', '-')}")
    for k in ("kernel_form", "cpu_model", "gemm"):
        if det.get(k):
            print(f"  {k.replace('_', ' ')}: {det[k]}")
    if det.get("visible_devices") is not None:
        print(f"  visible devices: {det['visible_devices']}")
    ok = bool(env.get("usable"))
    if torch_files:
        for key, label, prefix in (("cublas", "cuBLAS", "libcublas."), ("cublaslt", "cuBLASLt", "libcublasLt")):
            theirs = sorted({resolved(f) for f in torch_files if os.path.basename(f).startswith(prefix)})
            mine = (libs.get(key) or {}).get("library")
            if mine is not None and [resolved(mine)] == theirs:
                print(f"  {label}: the same file as torch's")
            else:
                print(f"  {label}: DIFFERENT files: iteragpu {resolved(mine) if mine else 'loaded none'}, "
                      f"torch {', '.join(theirs) or 'mapped none'}")
                ok = False
    return 0 if ok else 1


def describe_lot(path):
    """The lot checks of `environment --device all --json`, as `environment --device all` prints them."""
    doc = load(path)
    if not isinstance(doc, dict):
        print(f"lot: no document ({path})")
        return 1
    findings = doc.get("findings") or []
    warnings = sum(1 for f in findings if f.get("severity") == "warning")
    print(f"visible devices: {doc.get('visible_devices') or 1}")
    if doc.get("problem"):
        print(f"problem: {doc['problem']}")
    print(f"lot checks: {warnings} warning(s), {len(findings) - warnings} note(s) "
          f"(datasheet table: {doc.get('datasheet', '-')})")
    for f in sorted(findings, key=lambda f: f.get("severity") != "warning"):
        print(f"  {'WARNING' if f.get('severity') == 'warning' else 'note'} {f.get('code')}: {f.get('message')}")
    return 0


# The estimate's figures (seconds, FLOP/s), stated as assumptions, not measurements: a fresh
# H200 VM for the GPU run, two CPU cores for the rehearsal.
GPU_COSTS = {
    "ours_start": 3.0,     # process, cuInit and context, loading cuBLAS/cuBLASLt
    "torch_start": 8.0,    # import torch, CUDA context, cuBLAS
    "plan": 0.2,           # measure --plan (no device)
    "smi": 0.5,            # one nvidia-smi query
    "per_param": 12e-9,    # model load (host init, copy) plus the float64 check, per parameter
    "forward_overhead": 2e-4,
    "flops": {"float32": 50e12, "tf32": 400e12, "float16": 600e12, "bfloat16": 600e12},
    "environment": 3.0, "torch_probe": 10.0, "lot": 4.0, "probe_start": 10.0, "overwrite": 1.0,
    "smi_full": 1.5, "judge": 2.0,
}
CPU_COSTS = {
    "ours_start": 0.03, "torch_start": 0.0, "plan": 0.02, "smi": 0.0, "per_param": 30e-9,
    "forward_overhead": 1e-4,
    "flops": {"float32": 20e9, "tf32": 20e9, "float16": 15e9, "bfloat16": 15e9},
    "environment": 0.03, "torch_probe": 0.0, "lot": 0.0, "probe_start": 0.5, "overwrite": 0.03,
    "smi_full": 0.0, "judge": 0.3,
}


def case_estimate(spec, costs, torch):
    """(seconds for iteragpu, seconds for PyTorch or None) for one case, from its shape."""
    parts = spec.split("|")
    words = " ".join(parts[1:3]).split()
    opt = lambda name, default: int(words[words.index(name) + 1]) if name in words else default
    width = opt("--width", 64)
    hidden = opt("--hidden", 4 * width)
    rows = opt("--batch", 1) * opt("--context", 16)
    dtype = words[words.index("--dtype") + 1] if "--dtype" in words else "float32"
    kind = "tf32" if dtype == "float32" and "--allow-tf32" in words else dtype
    passes = 1 + opt("--warmup", 1) + opt("--repeats", 2)
    params = 2 * width * hidden + width + hidden
    body = (passes * (4 * rows * width * hidden / costs["flops"][kind] + costs["forward_overhead"])
            + params * costs["per_param"])
    ours = costs["ours_start"] + body + costs["plan"] + costs["smi"]
    peer = any(p.startswith("peer=") for p in parts[3:])
    theirs = costs["torch_start"] + body + costs["smi"] if torch and not peer else None
    return ours, theirs


def plan(argv):
    """Prints the planned steps, each with an estimate of its seconds and its share of the budget."""
    rehearsal = "--rehearsal" in argv
    args = [a for a in argv if a != "--rehearsal"]
    values = {}
    while args and args[0].startswith("--"):
        values[args[0]] = float(args[1])
        args = args[2:]
    budget = values.get("--budget", 360)
    limit = values.get("--limit", 420)
    probe_s = values.get("--probe-seconds", 30)
    costs = CPU_COSTS if rehearsal else GPU_COSTS
    torch = not rehearsal
    steps = [
        ("the binary runs here", 0.05),
        ("nvidia-smi before", costs["smi_full"] if torch else None),
        ("pytorch and its cuBLAS (one import torch)", costs["torch_probe"] if torch else None),
        ("environment (--json, once)", costs["environment"]),
    ]
    for spec in args:
        ours, theirs = case_estimate(spec, costs, torch)
        name = spec.split("|")[0]
        steps.append((f"{name}: iteragpu measure + plan", ours))
        if theirs is not None:
            steps.append((f"{name}: pytorch eager", theirs))
    steps += [
        ("the lot (environment --device all --json, once)", costs["lot"] if torch else None),
        (f"probe ({probe_s:g} s of probing)", probe_s + costs["probe_start"]),
        ("refused overwrite", costs["overwrite"]),
        ("nvidia-smi after", costs["smi_full"] if torch else None),
        ("judgement and packing", costs["judge"]),
    ]
    total = sum(sec for _, sec in steps if sec is not None)
    print(f"plan: an ESTIMATE per step from the shapes ({'two CPU cores' if rehearsal else 'a fresh H200 VM'}"
          f", {'no PyTorch' if rehearsal else 'start-ups included'}), not a measurement; "
          f"budget {budget:g} s within the call's {limit:g} s")
    print(f"   {'step':<48} {'estimate':>9} {'share':>7}")
    for label, sec in steps:
        if sec is None:
            print(f"   {label:<48} {'skipped (rehearsal)':>17}")
        else:
            print(f"   {label:<48} {sec:>8.1f}s {100 * sec / budget:>6.1f}%")
    print(f"   {'total (estimate)':<48} {total:>8.1f}s {100 * total / budget:>6.1f}%  "
          f"({'fits' if total <= budget else 'OVER the budget'}, {budget - total:+.0f} s)")
    return 0


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--record-knobs" and len(argv) >= 2:
        return record_knobs(argv[1], argv[2:])
    if argv[0] == "--environment" and len(argv) >= 2:
        return describe_environment(argv[1], argv[2:])
    if argv[0] == "--lot" and len(argv) == 2:
        return describe_lot(argv[1])
    if argv[0] == "--plan":
        return plan(argv[1:])
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
    if libs:
        print(f"iteragpu's cuBLAS: {(libs.get('cublas') or {}).get('library', '-')}, cuBLASLt "
              f"{(libs.get('cublaslt') or {}).get('library', '-')} (found via {libs.get('found_via', '-')})")
    knobs = load(os.path.join(work, "torch-knobs.json"))
    if isinstance(knobs, dict):
        set_ = [f"{k}={v}" for k, v in knobs.items() if v is not None]
        print(f"torch knobs found before gpu-check cleared them: {', '.join(set_) if set_ else 'none set'}")
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
    report_probe(work)
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
