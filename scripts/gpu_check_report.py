#!/usr/bin/env python3
"""The judging part of scripts/gpu-check.sh: reads the documents one GPU check produced and says,
case by case, whether iteragpu counted what PyTorch counted.

For every case NAME the work folder holds NAME.json (iteragpu measure), NAME.plan.json
(iteragpu measure --plan --json for the same options and the GPU's compute capability),
NAME.torch.json (iteragpu measure --engine torch, or the peer case's when the case says `peer=OTHER`) and
NAME.free.json ({"ours": bytes, "torch": bytes}: the device's free memory, from nvidia-smi, just
before each tool started). It prints, per case:

- every phase row and every allocator counter, iteragpu | PyTorch | difference | the plan, and a
  verdict (same, or DIFFERENT when iteragpu differs from PyTorch or from its own plan, or when a
  document that exists lacks the row or holds null or anything but a byte count there);
- both numerical checks (iteragpu's and PyTorch's own, each against its float64 reference);
- the device-time ratio iteragpu / PyTorch of the median warm forward pass (and the cold one);
- the memory outside the allocator (CUDA context, modules, libraries): free memory before the
  tool started minus free memory after its set-up, and at the end minus what its allocator
  reserved;
- what each case expects of itself (the PTX-JIT case loaded ptx-jit, the TF32 case used TF32).

- the workspaces: the blocks PyTorch's allocator was OBSERVED to hold after its cold pass that
  are not tensors of the model (the torch engine's `engine.observed_workspaces`, each named by
  what torch allocated it for, in allocation order: the cuBLAS workspace, then the cuBLASLt one
  on the Lt path) against the blocks iteragpu's `configuration.memory_policy` says it allocates,
  in its order: another name, size or order, or an order not observed, is DIFFERENT;
- torch itself: a torch other than the one iteragpu mirrors (2.11.0) fails the case (its
  counters are still compared and printed);
- TF32: the `allow_tf32` PyTorch's products ran with, as torch reported it after the run
  (`engine.matmul`), must be iteragpu's `configuration.allow_tf32` (the binary replaces the torch
  document's configuration with its own, so that configuration proves nothing);
- the cuBLAS and cuBLASLt files each tool ran with (iteragpu's `environment.details.libraries`,
  PyTorch's from /proc/self/maps), which must be the same files (resolved paths);
- the torch knobs PyTorch ran with (all must be unset, and each one gpu-check.sh cleared must be
  recorded; gpu-check.sh records what it found in torch-knobs.json).

Any malformed input (a document that is not JSON, a field of the wrong kind) is a DIFFERENT with
its reason, never a traceback.

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
    return read(path)[0]


def read(path):
    """(the document, why there is none): a missing file, or one that is no JSON object."""
    if not os.path.exists(path):
        return None, "missing"
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"unreadable ({type(e).__name__}: {e})"
    if not isinstance(doc, dict):
        return None, f"unreadable (a JSON {type(doc).__name__}, not an object)"
    return doc, None


def is_count(v):
    """A byte counter: a non-negative integer (not a bool, not null)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def median_seconds(doc, phase):
    rows = (doc or {}).get("phases")
    rows = [r for r in rows if isinstance(r, dict) and r.get("phase") == phase] if isinstance(rows, list) else []
    seconds = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    dev = [r["device_seconds"] for r in rows if seconds(r.get("device_seconds")) and r["device_seconds"] > 0]
    if dev:
        return statistics.median(dev), "device"
    wall = [r["wall_seconds"] for r in rows if seconds(r.get("wall_seconds"))]
    return (statistics.median(wall), "wall") if wall else (None, "")


def num(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def check_line(who, doc):
    c = (doc or {}).get("check")
    if not c:
        return f"{who}: no check ({'no document' if doc is None else 'no forward pass finished'})", False
    if not isinstance(c, dict):
        return f"{who}: MALFORMED check ({type(c).__name__})", False
    ok = c.get("passed") is True
    rows = c.get("rows") if isinstance(c.get("rows"), list) else []
    return (f"{who}: {'passed' if ok else 'FAILED'} (relative error {num(c.get('relative_error'), '.2e')}, "
            f"bound {num(c.get('bound'), '.0e')}, {len(rows)} rows)"), ok


def outside(doc, free_before):
    """(set-up bytes, bytes outside the allocator at the end), from device-wide free memory."""
    rows = (doc or {}).get("phases") or []
    if not isinstance(rows, list) or not rows or not is_count(free_before):
        return None, None
    mem = lambda r: (r.get("memory") if isinstance(r, dict) else None) or {}
    free = lambda m, key: (m.get(key) if isinstance(m.get(key), dict) else {}).get("free_bytes")
    first = free(mem(rows[0]), "device_before")
    last = mem(rows[-1])
    after = free(last, "device_after")
    setup = free_before - first if is_count(first) else None
    reserved = last.get("end_reserved_bytes")
    end = free_before - after - reserved if is_count(after) and is_count(reserved) else None
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


def short_role(block):
    role = block.get("role") if isinstance(block, dict) else None
    return role.replace(" workspace", "") if isinstance(role, str) else "unnamed"


def compare_workspaces(pol_ours, torch):
    """iteragpu's memory_policy against the workspaces PyTorch was observed to allocate: the same
    workspaces (named by what torch allocated them for), the same sizes, in the same order."""
    # The torch engine's document keeps the observation in its `engine` section (older documents
    # of the former bench/pytorch_eager.py kept it in memory_policy).
    pol_torch = torch.get("engine") or (torch.get("configuration") or {}).get("memory_policy") or {}
    ours = implied_workspaces(pol_ours)
    observed = pol_torch.get("observed_workspaces")
    if not isinstance(observed, list) or not all(isinstance(b, dict) for b in observed):
        why = pol_torch.get("observation_error") or (
            "the document has no observed_workspaces" if observed is None
            else "its observed_workspaces is no list of blocks")
        print(f"   workspaces: iteragpu's memory_policy {blocks_text(ours)}; PyTorch's NOT OBSERVED ({why})  DIFFERENT")
        return [f"PyTorch's workspaces were not observed ({why})"]
    theirs = [(short_role(b), b.get("requested_size", b.get("size"))) for b in observed]
    problems = []
    if len(observed) > 1 and not all(is_count(b.get("order")) for b in observed):
        problems.append("PyTorch's allocation order of its workspaces was not observed")
    same = ours == theirs and not problems
    paths = [f"{p.get('layer', '?')} {p.get('path', '?')}" for p in pol_ours.get("linear_paths") or []
             if isinstance(p, dict)]
    print(f"   workspaces: iteragpu's memory_policy {blocks_text(ours)} B"
          f"{' (cuBLASLt unified)' if pol_ours.get('cublaslt_workspace_unified') else ''}"
          f"{'' if takes_lt_path(pol_ours) else ' (no cuBLASLt path: ' + ', '.join(paths) + ')'}; "
          f"PyTorch observed {blocks_text(theirs)} B after the cold pass  {'same' if same else 'DIFFERENT'}")
    if same:
        return []
    if not problems and sorted(ours, key=str) == sorted(theirs, key=str):
        return [f"workspaces allocated in another order: iteragpu's memory_policy "
                f"{' then '.join(r for r, _ in ours)}, PyTorch {' then '.join(r for r, _ in theirs)}"]
    if ours != theirs:
        named = {}
        for role, size in theirs:
            named[role] = named.get(role, 0) + (size if is_count(size) else 0)
        for role, key in (("cuBLAS", "cublas_workspace_bytes"), ("cuBLASLt", "cublaslt_workspace_bytes")):
            mine = dict(ours).get(role, 0)
            got = named.pop(role, 0)
            if mine != got:
                print(f"   memory_policy.{key}: iteragpu {mine}, pytorch observed {got}")
        for role, got in named.items():
            print(f"   a workspace iteragpu does not have: PyTorch observed {role} {got}")
        problems.insert(0, f"workspaces differ: iteragpu's memory_policy {blocks_text(ours)}, "
                           f"PyTorch observed {blocks_text(theirs)}")
    return problems


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


def torch_knobs_as_run(torch, cleared):
    """Every knob must be unset in the PyTorch run, and every knob gpu-check cleared recorded."""
    knobs = (torch.get("engine") or {}).get("allocator_knobs")
    if not isinstance(knobs, dict):
        print("   torch knobs: not recorded by the PyTorch document  DIFFERENT")
        return ["torch knobs not recorded"]
    problems = []
    set_ = [f"{k}={v}" for k, v in knobs.items() if v is not None]
    if set_:
        print(f"   torch knobs: PyTorch ran with {', '.join(set_)}  DIFFERENT (gpu-check clears them)")
        problems.append(f"PyTorch ran with {', '.join(set_)}")
    missing = [k for k in cleared if k not in knobs]
    if missing:
        print(f"   torch knobs: the PyTorch document does not record {', '.join(missing)}  DIFFERENT")
        problems.append(f"torch knobs not recorded: {', '.join(missing)}")
    return problems


def tf32_as_run(c, torch):
    """The TF32 setting PyTorch's products ran with (read back from torch: engine.matmul) must be
    iteragpu's (`configuration.allow_tf32`); a document that does not record it fails."""
    matmul = (torch.get("engine") or {}).get("matmul")
    want = c.get("allow_tf32")
    got = matmul.get("allow_tf32") if isinstance(matmul, dict) else None
    if not isinstance(got, bool):
        print(f"   TF32: iteragpu {want}, PyTorch NOT RECORDED (engine.matmul.allow_tf32)  DIFFERENT")
        return ["PyTorch did not record the TF32 setting it ran with (engine.matmul.allow_tf32)"]
    prec = matmul.get("float32_matmul_precision", "-")
    same = got == want
    print(f"   TF32: iteragpu allow_tf32 {want}, PyTorch ran with allow_tf32 {got} "
          f"(float32 matmul precision {prec})  {'same' if same else 'DIFFERENT'}")
    return [] if same else [f"PyTorch ran with allow_tf32 {got}, iteragpu with {want}"]


def torch_version(torch):
    return (torch.get("engine") or {}).get("version")


def torch_version_problems(pol_ours, torch):
    """A torch other than the one iteragpu mirrors (2.11.0) fails the case: its counters are
    still compared and printed, but SAME would say nothing about the torch iteragpu mirrors."""
    mirrors = pol_ours.get("mirrors") if isinstance(pol_ours.get("mirrors"), str) else "torch 2.11"
    want = (mirrors.split() or ["2.11"])[-1]
    want = want + ".0" if want.count(".") == 1 else want
    got = torch_version(torch)
    base = got.split("+")[0] if isinstance(got, str) else None
    if base == want:
        return []
    print(f"   PyTorch is torch {got or 'unknown'}; iteragpu mirrors {mirrors} ({want})  DIFFERENT "
          f"(compared all the same)")
    return [f"PyTorch is torch {got or 'unknown'}, not {want}, the torch iteragpu mirrors"]


def rows_by_key(doc, who, problems):
    """{(phase, index): memory} of a document's phase rows; a malformed row is a problem."""
    rows = (doc or {}).get("phases")
    if doc is None:
        return {}
    if not isinstance(rows, list):
        problems.append(f"{who}'s document has no list of phase rows")
        return {}
    out = {}
    for i, r in enumerate(rows):
        if not (isinstance(r, dict) and isinstance(r.get("phase"), str) and is_count(r.get("index"))
                and isinstance(r.get("memory"), dict)):
            problems.append(f"{who}'s phase row {i} is malformed")
            continue
        out[(r["phase"], r["index"])] = r["memory"]
    return out


def report_case(work, spec, require_peer, glance, cleared=()):
    parts = spec.split("|")
    name = parts[0]
    opts = [tuple(p.split("=", 1)) for p in parts[1:] if "=" in p]
    ours, ours_why = read(os.path.join(work, name + ".json"))
    peer = next((v for k, v in reversed(opts) if k == "peer"), name)
    torch, torch_why = read(os.path.join(work, peer + ".torch.json"))
    plan, plan_why = read(os.path.join(work, name + ".plan.json"))
    free = load(os.path.join(work, name + ".free.json")) or {}
    problems = []
    if ours is None:
        print(f"\n== {name}: iteragpu's document {ours_why}  DIFFERENT")
        return [f"iteragpu's document {ours_why}"]
    c = ours.get("configuration")
    if not isinstance(c, dict):
        print(f"\n== {name}: iteragpu's document has no configuration  DIFFERENT")
        return ["iteragpu's document has no configuration"]
    details = (ours.get("environment") or {}).get("details")
    details = details if isinstance(details, dict) else {}
    print(f"\n== {name}: {c.get('dtype')} [{c.get('batch')} x {c.get('context')} x {c.get('width')}] -> "
          f"{c.get('hidden')}, warmup {c.get('warmup')}, repeats {c.get('repeats')}"
          f"{', --allow-tf32' if c.get('allow_tf32') else ''}; kernels {details.get('kernel_form', '-')}"
          f"{'' if peer == name else f'; PyTorch side: {peer}'}")
    if not ours.get("complete"):
        problems.append("iteragpu run incomplete: " + str((ours.get("error") or {}).get("message")))
    if torch is None:
        if torch_why != "missing":
            print(f"   PyTorch: its document is {torch_why}  DIFFERENT")
            problems.append(f"PyTorch's document is {torch_why}")
        else:
            print("   PyTorch: no document" + (" (required)" if require_peer else " (not run here)"))
            if require_peer:
                problems.append("no PyTorch document")
    elif not torch.get("complete"):
        problems.append("PyTorch run incomplete: " + str((torch.get("error") or {}).get("message")))
    if plan is None:
        print(f"   plan: its document is {plan_why}  DIFFERENT")
        problems.append(f"the plan's document is {plan_why}")

    # Counters, phase by phase: each must be a count, the same in iteragpu, PyTorch and the plan.
    mine_rows = rows_by_key(ours, "iteragpu", problems)
    theirs = rows_by_key(torch, "PyTorch", problems)
    planned = rows_by_key(plan, "the plan", problems)
    print(f"   {'phase':<16} {'counter':<26} {'iteragpu':>14} {'pytorch':>14} {'difference':>12} {'plan':>14}  verdict")
    different = 0
    nulls = set()
    show = lambda v: num(v, "d") if is_count(v) else ("null" if v is None else "BAD")
    for key, memory in mine_rows.items():
        label = f"{key[0]}[{key[1]}]"
        t, p = theirs.get(key), planned.get(key)
        for k in COUNTERS:
            mine = memory.get(k)
            tv = t.get(k) if t is not None else None
            pv = p.get(k) if p is not None else None
            diff = mine - tv if is_count(mine) and is_count(tv) else None
            # A document that exists must hold the row and a count: null is never the same.
            same = (is_count(mine)
                    and (torch is None or (is_count(tv) and tv == mine))
                    and (plan is None or (is_count(pv) and pv == mine)))
            for who, doc, v in (("iteragpu", ours, mine), ("PyTorch", torch, tv), ("the plan", plan, pv)):
                if doc is not None and not is_count(v):
                    nulls.add(who)
            verdict = "same" if same else "DIFFERENT"
            different += not same
            print(f"   {label:<16} {k:<26} {show(mine):>14} {show(tv) if torch is not None else '-':>14} "
                  f"{num(diff, '+d'):>12} {show(pv) if plan is not None else '-':>14}  {verdict}")
    if not mine_rows:
        problems.append("iteragpu's document has no phase rows")
    for who, rows in (("pytorch", theirs), ("plan", planned)):
        doc = torch if who == "pytorch" else plan
        if doc is not None and set(rows) != set(mine_rows):
            print(f"   phase rows: iteragpu {len(mine_rows)}, {who} {len(rows)}  DIFFERENT")
            different += 1
    for who in sorted(nulls):
        problems.append(f"{who}'s counters are null or not byte counts")
    if different:
        problems.append(f"{different} counter(s) differ")
    if torch is not None:
        policy = c.get("memory_policy") if isinstance(c.get("memory_policy"), dict) else {}
        problems += compare_workspaces(policy, torch)
        problems += compare_libraries(ours, torch)
        problems += torch_knobs_as_run(torch, cleared)
        problems += tf32_as_run(c, torch)
        problems += torch_version_problems(policy, torch)

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
    # allow_tf32 is held on both sides: iteragpu's configuration, and the setting PyTorch's
    # products ran with as torch itself reported it (engine.matmul), never the options it was given.
    for expectation in (v for k, v in opts if k == "expect"):
        key, _, want = expectation.partition(":")
        seen = []
        if key == "kernel_form":
            seen = [("", details.get("kernel_form"))]
        elif key == "allow_tf32":
            seen = [("iteragpu ", str(c.get("allow_tf32")).lower())]
            if torch is not None:
                matmul = (torch.get("engine") or {}).get("matmul")
                got = matmul.get("allow_tf32") if isinstance(matmul, dict) else None
                seen.append(("PyTorch ran with ", str(got).lower() if isinstance(got, bool) else "not recorded"))
        for who, got in seen or [("", None)]:
            ok = got == want
            print(f"   expected {key} {want}: {who}{got}  {'ok' if ok else 'DIFFERENT'}")
            if not ok:
                problems.append(f"{who}{key} is {got}, expected {want}")
    print(f"   verdict: {'SAME' if not problems else 'FAILED: ' + '; '.join(problems)}")
    def short(doc):
        if doc is None:
            return "-"
        chk = doc.get("check") if isinstance(doc.get("check"), dict) else {}
        return ("ok " if chk.get("passed") is True else "BAD ") + num(chk.get("relative_error"), ".1e")

    glance.append(
        f"{name:<12} {str(c.get('dtype')):<9} {c.get('batch')}x{c.get('context')}x{str(c.get('width')):<8} "
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
    "smi_full": 1.5, "judge": 2.0, "pack": 0.5,
}
CPU_COSTS = {
    "ours_start": 0.03, "torch_start": 0.0, "plan": 0.02, "smi": 0.0, "per_param": 30e-9,
    "forward_overhead": 1e-4,
    "flops": {"float32": 20e9, "tf32": 20e9, "float16": 15e9, "bfloat16": 15e9},
    "environment": 0.03, "torch_probe": 0.0, "lot": 0.0, "probe_start": 0.5, "overwrite": 0.03,
    "smi_full": 0.0, "judge": 0.3, "pack": 0.2,
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
    # The packing and re-judging after each case counts with iteragpu's side.
    ours = costs["ours_start"] + body + costs["plan"] + costs["smi"] + costs["pack"]
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
    try:
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
    except (AttributeError, TypeError) as e:  # the header only describes; the cases judge
        print(f"environment.json is malformed ({type(e).__name__}: {e})")
    knobs = load(os.path.join(work, "torch-knobs.json"))
    if isinstance(knobs, dict):
        set_ = [f"{k}={v}" for k, v in knobs.items() if v is not None]
        print(f"torch knobs found before gpu-check cleared them: {', '.join(set_) if set_ else 'none set'}")
    cleared = list(knobs) if isinstance(knobs, dict) else []
    failed = {}
    glance = []
    for spec in cases:
        name = spec.split("|")[0]
        try:
            problems = report_case(work, spec, require_peer, glance, cleared)
        except Exception as e:  # a malformed document: a verdict with its reason, never a traceback
            why = f"malformed input ({type(e).__name__}: {e})"
            print(f"   {why}  DIFFERENT")
            glance.append(f"{name:<12} {'?':<9} {'?':<12} {'-':>8} {'-':>12} {'-':>12} {'-':>6} {'-':>7} {'-':>7}  FAILED")
            problems = [why]
        if problems:
            failed[name] = problems
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
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # never a traceback: one sentence, exit 1 (the judgement failed)
        print(f"gpu_check_report: malformed input ({type(e).__name__}: {e}): DIFFERENT, nothing judged as the same")
        sys.exit(1)
