#!/usr/bin/env python3
"""iteragpu's torch engine, collective: `iteragpu collective` measures the network between the
GPUs of every node as nccl-tests' all_reduce_perf and all_gather_perf do, through the machine's
PyTorch (torch.distributed: NCCL on CUDA, RCCL on ROCm, gloo on CPUs).

This file is carried inside the binary beside engine.py and run with `python -c`, once per rank
(one process per GPU). Every rank prints its own JSON document on stdout:

- message sizes from --min-bytes to --max-bytes, doubling; per size --warmup untimed calls, then
  --iters timed calls; the time is the slowest rank's mean (as nccl-tests reports it);
- algbw = bytes / time; busbw = algbw x 2(n-1)/n for all-reduce, algbw x (n-1)/n for all-gather
  (n ranks), so that busbw is comparable with the fabric's own figure whatever n is;
- the result of each size is checked on every rank (rank r sends r+1: the sum is n(n+1)/2; the
  gathered slice k holds k+1);
- NCCL's choice (version, NET/IB or Socket, channels) read from its NCCL_DEBUG=INFO lines, kept
  as words only: no line, host name or address is copied into the document.

Rendezvous, first match wins: RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (as torchrun sets them);
Slurm (SLURM_PROCID, SLURM_NTASKS, MASTER_ADDR else the first node of SLURM_STEP_NODELIST or
SLURM_JOB_NODELIST, --port); SkyPilot
(SKYPILOT_NODE_RANK, SKYPILOT_NUM_NODES or SKYPILOT_NODE_IPS' count, the first of
SKYPILOT_NODE_IPS, --port; one rank per GPU with LOCAL_RANK and SKYPILOT_NUM_GPUS_PER_NODE).

Exit: 0 measured (the document says whether every result was correct), 2 refused: bad options,
no torch, the backend missing, ranks that disagree on the world size, a rendezvous that did not
complete within --rendezvous-timeout (one sentence on stderr, nothing on stdout).
"""
import argparse
import datetime
import glob
import json
import os
import re
import sys
import tempfile
import time

PROGRAM_VERSION = 1
SCHEMA = "iteragpu.collective/1"
PREFIX = "iteragpu: torch engine: "


class Refused(Exception):
    """A refusal before anything is printed: exit 2, one sentence."""


def progress(line):
    print("  " + line, file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="collective.py",
                                description="iteragpu's collective bandwidth check")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    p.add_argument("--ops", default="all_reduce,all_gather")
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--port", type=int, default=29500)
    p.add_argument("--rendezvous-timeout", type=float, default=120.0)
    p.add_argument("--output", default="-")
    a = p.parse_args(argv)
    a.ops = [o for o in a.ops.split(",") if o]
    for o in a.ops:
        if o not in ("all_reduce", "all_gather"):
            raise Refused(f"--ops {o!r}: expected all_reduce, all_gather or both")
    if not a.ops:
        raise Refused("--ops is empty: expected all_reduce, all_gather or both")
    if a.min_bytes < 8 or a.max_bytes < a.min_bytes:
        raise Refused(f"--min-bytes {a.min_bytes} / --max-bytes {a.max_bytes}: expected 8 <= "
                      "min <= max")
    if a.warmup < 0 or a.iters < 1:
        raise Refused(f"--warmup {a.warmup} / --iters {a.iters}: expected warmup >= 0, iters >= 1")
    if not 0 < a.rendezvous_timeout <= 3600:
        raise Refused(f"--rendezvous-timeout {a.rendezvous_timeout}: expected 0 < seconds <= 3600")
    if not 0 < a.port < 65536:
        raise Refused(f"--port {a.port}: expected 1..65535")
    return a


def first_node(nodelist):
    """The first host of a Slurm node list: `n[1-4,7],m2` -> `n1`."""
    m = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise Refused(f"SLURM_JOB_NODELIST {nodelist!r} names no node")
    prefix, ranges = m.group(1), m.group(3)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def integer(name, value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Refused(f"{name}={value!r} is not a whole number")


def rendezvous(env, port):
    """(source, rank, world size, local rank, master address, port) from the environment."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return ("env", integer("RANK", env["RANK"]), integer("WORLD_SIZE", env["WORLD_SIZE"]),
                integer("LOCAL_RANK", env.get("LOCAL_RANK", "0")),
                env.get("MASTER_ADDR", "127.0.0.1"),
                integer("MASTER_PORT", env.get("MASTER_PORT", str(port))))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        # A step over some of the job's nodes (the fleet's pairs) has rank 0 on the first node
        # of the step, not of the job; MASTER_ADDR, when set, is that node's address.
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise Refused("SLURM_PROCID is set but SLURM_JOB_NODELIST is not: run under srun")
        host = env.get("MASTER_ADDR") or first_node(nodelist)
        return ("slurm", integer("SLURM_PROCID", env["SLURM_PROCID"]),
                integer("SLURM_NTASKS", env["SLURM_NTASKS"]),
                integer("SLURM_LOCALID", env.get("SLURM_LOCALID", "0")),
                host, port)
    if "SKYPILOT_NODE_RANK" in env and "SKYPILOT_NODE_IPS" in env:
        ips = [ip for ip in env["SKYPILOT_NODE_IPS"].split() if ip]
        if not ips:
            raise Refused("SKYPILOT_NODE_IPS is empty")
        nodes = integer("SKYPILOT_NUM_NODES", env.get("SKYPILOT_NUM_NODES", str(len(ips))))
        per_node = integer("SKYPILOT_NUM_GPUS_PER_NODE",
                           env.get("SKYPILOT_NUM_GPUS_PER_NODE", "1") or "1")
        local = integer("LOCAL_RANK", env.get("LOCAL_RANK", "0"))
        node = integer("SKYPILOT_NODE_RANK", env["SKYPILOT_NODE_RANK"])
        return ("skypilot", node * per_node + local, nodes * per_node, local, ips[0], port)
    raise Refused("no rendezvous: set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or run "
                  "under srun (Slurm) or SkyPilot")


def import_torch():
    try:
        import torch
        import torch.distributed as dist
        return torch, dist
    except Exception as e:
        raise Refused(f"PyTorch cannot be imported by {sys.executable} ({type(e).__name__}: {e}); "
                      "install PyTorch there, or give --python another Python")


def choose_backend(torch, dist, asked):
    if not dist.is_available():
        raise Refused(f"torch {torch.__version__} in {sys.executable} was built without "
                      "torch.distributed, so no collective can run")
    gpu = torch.cuda.is_available()
    backend = asked if asked != "auto" else ("nccl" if gpu else "gloo")
    if backend == "nccl":
        if not dist.is_nccl_available():
            raise Refused(f"--backend nccl: torch {torch.__version__} in {sys.executable} has no "
                          "NCCL (a CPU-only build?); install a CUDA or ROCm build, or use "
                          "--backend gloo on CPUs")
        if not gpu:
            raise Refused(f"--backend nccl: torch {torch.__version__} sees no GPU "
                          "(torch.cuda.is_available() is False)")
    if backend == "gloo" and not dist.is_gloo_available():
        raise Refused(f"--backend gloo: torch {torch.__version__} in {sys.executable} has no gloo")
    return backend


def agree(dist, rank, world, host, port, timeout):
    """A TCP store at rank 0, where every rank writes the world size it was given: a rank that
    disagrees with rank 0 is refused, and so is a rendezvous that does not complete in time."""
    delta = datetime.timedelta(seconds=timeout)
    if not 0 <= rank < world:
        raise Refused(f"rank {rank} is outside the world size {world}")
    try:
        store = dist.TCPStore(host, port, None, rank == 0, timeout=delta,
                              wait_for_workers=False)
    except Exception as e:
        raise Refused(f"the rendezvous at rank 0 (port {port}) did not answer within "
                      f"{timeout:g} s ({type(e).__name__}), so rank {rank} could not join")
    store.set(f"world/{rank}", str(world))
    try:
        if rank == 0:
            missing = list(range(1, world))
            deadline = time.monotonic() + timeout
            while missing and time.monotonic() < deadline:
                for r in list(missing):
                    if store.check([f"world/{r}"]):
                        theirs = int(store.get(f"world/{r}"))
                        if theirs != world:
                            store.set("refused", f"{r}:{theirs}")
                            raise Refused(f"the ranks disagree on the world size: rank 0 has "
                                          f"{world}, rank {r} has {theirs}")
                        missing.remove(r)
                time.sleep(0.05)
            if missing:
                raise Refused(f"the rendezvous timed out after {timeout:g} s: rank(s) "
                              f"{', '.join(map(str, missing))} of {world} never joined")
            store.set("agreed", "1")
        else:
            store.wait(["world/0"], delta)
            theirs = int(store.get("world/0"))
            if theirs != world:
                raise Refused(f"the ranks disagree on the world size: rank {rank} has {world}, "
                              f"rank 0 has {theirs}")
            deadline = time.monotonic() + timeout
            while not store.check(["agreed"]):
                if store.check(["refused"]):
                    r, w = store.get("refused").decode().split(":")
                    raise Refused(f"the ranks disagree on the world size: rank {r} has {w}, "
                                  f"rank 0 has {world}")
                if time.monotonic() > deadline:
                    raise Refused(f"the rendezvous timed out after {timeout:g} s: rank 0 did "
                                  f"not see all {world} ranks join")
                time.sleep(0.05)
    except Refused:
        raise
    except Exception as e:
        raise Refused(f"the rendezvous timed out after {timeout:g} s ({type(e).__name__}) "
                      f"waiting for rank 0 of {world}")
    return store


def nccl_facts(torch, pattern):
    """NCCL's version and choices, as words: the debug file's lines are read and dropped."""
    facts = {"version": None, "transport": "unknown", "channels": None}
    try:
        v = torch.cuda.nccl.version()
        facts["version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    text = ""
    for path in glob.glob(pattern):
        try:
            with open(path, errors="replace") as f:
                text += f.read()
            os.unlink(path)
        except OSError:
            pass
    if re.search(r"NET/IB", text):
        facts["transport"] = "IB"
    elif re.search(r"NET/Socket", text):
        facts["transport"] = "Socket"
    elif re.search(r"via P2P|via SHM|P2P/|SHM/", text):
        facts["transport"] = "P2P/SHM (one node)"
    channels = re.findall(r"(\d+) coll channels", text)
    if channels:
        facts["channels"] = max(int(c) for c in channels)
    return facts


def sizes(lo, hi):
    s = lo
    while s <= hi:
        yield s
        s *= 2


def measure(torch, dist, device, op, nbytes, world, rank, warmup, iters, sync):
    """One size: (correct, mean seconds of the slowest rank) or None when the size is too small
    for every rank to hold one element."""
    elem = 4
    count = nbytes // elem
    if op == "all_reduce":
        if count < 1:
            return None
        buf = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(buf)
        sync()
        correct = bool(torch.all(buf == world * (world + 1) / 2).item())

        def call():
            dist.all_reduce(buf)
    else:
        per = count // world
        if per < 1:
            return None
        send = torch.full((per,), float(rank + 1), dtype=torch.float32, device=device)
        out = torch.empty((per * world,), dtype=torch.float32, device=device)
        dist.all_gather_into_tensor(out, send)
        sync()
        expect = torch.arange(1, world + 1, dtype=torch.float32,
                              device=device).repeat_interleave(per)
        correct = bool(torch.equal(out, expect))

        def call():
            dist.all_gather_into_tensor(out, send)
    for _ in range(warmup):
        call()
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    sync()
    mean = (time.perf_counter() - start) / iters
    slowest = torch.tensor([mean], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    ok = torch.tensor([0 if correct else 1], dtype=torch.int32, device=device)
    dist.all_reduce(ok)
    return correct, int(ok.item()), float(slowest.item()), (per * world if op == "all_gather"
                                                             else count) * elem


def main(argv):
    a = parse_args(argv)
    source, rank, world, local, host, port = rendezvous(os.environ, a.port)
    torch, dist = import_torch()
    backend = choose_backend(torch, dist, a.backend)
    debug_dir = None
    if backend == "nccl":
        debug_dir = tempfile.mkdtemp(prefix="iteragpu-nccl-")
        os.environ.setdefault("NCCL_DEBUG", "INFO")
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET,GRAPH")
        # NCCL writes to stdout unless told otherwise: the document owns stdout.
        os.environ["NCCL_DEBUG_FILE"] = os.path.join(debug_dir, "nccl.%p")
    progress(f"rank {rank} of {world}: rendezvous through {source}, port {port}")
    store = agree(dist, rank, world, host, port, a.rendezvous_timeout)
    timeout = datetime.timedelta(seconds=max(a.rendezvous_timeout, 60.0))
    if backend == "nccl":
        device = torch.device("cuda", local % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(device)

        def sync():
            torch.cuda.synchronize(device)
    else:
        device = torch.device("cpu")

        def sync():
            pass
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    results = []
    for op in a.ops:
        for nbytes in sizes(a.min_bytes, a.max_bytes):
            got = measure(torch, dist, device, op, nbytes, world, rank, a.warmup, a.iters, sync)
            if got is None:
                continue
            correct, wrong_ranks, seconds, moved = got
            algbw = moved / seconds / 1e9 if seconds > 0 else 0.0
            factor = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
            results.append({"op": op, "bytes": moved, "time_us": seconds * 1e6,
                            "algbw_gb_s": algbw, "busbw_gb_s": algbw * factor,
                            "correct": correct, "wrong_ranks": wrong_ranks})
            if rank == 0:
                progress(f"{op} {moved} B: {seconds * 1e6:.1f} us, busbw {algbw * factor:.3f} GB/s")
    if backend == "nccl":
        fabric = nccl_facts(torch, os.path.join(debug_dir, "nccl.*"))
        try:
            os.rmdir(debug_dir)
        except OSError:
            pass
    else:
        fabric = {"version": None, "transport": "gloo TCP", "channels": None}
    dist.destroy_process_group()
    hip = getattr(torch.version, "hip", None)
    doc = {
        "schema": SCHEMA,
        "program_version": PROGRAM_VERSION,
        "torch": torch.__version__,
        "torch_build": f"ROCm, HIP {hip}" if hip else (f"CUDA {torch.version.cuda}"
                                                        if torch.version.cuda else "CPU only"),
        "backend": backend,
        "device": str(device),
        "rendezvous": source,
        "rank": rank,
        "local_rank": local,
        "world_size": world,
        "warmup": a.warmup,
        "iters": a.iters,
        "min_bytes": a.min_bytes,
        "max_bytes": a.max_bytes,
        "fabric": fabric,
        "results": results,
    }
    text = json.dumps(doc, indent=2) + "\n"
    if a.output == "-":
        sys.stdout.write(text)
    else:
        with open(a.output, "w") as f:
            f.write(text)
    return 0


def entry(argv):
    try:
        return main(argv)
    except Refused as e:
        print(PREFIX + str(e), file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
