#!/usr/bin/env bash
# `fleet check` on synthetic fleets of 64, 512 and 4,096 nodes x 8 GPUs (issue 34 item 5):
# CPU seconds and peak memory of each, and how the time grows against G log G (G = GPUs); then
# `report` over the same folder: its time, memory and the size of the page.
#
# Usage: scripts/bench-fleet-check.sh [NODES...]   (default: 64 512 4096)
# Env:   ITERAGPU (the binary, default target/release/iteragpu), KEEP=1 keeps the fleets.
#
# Every node folder holds what a job leaves: a real `environment --device cpu` document and a
# real `probe --device cpu` document doctored into eight B200s (distinct UUIDs, one figure per
# GPU spread by a few percent, one planted outlier), each with its `.exit`; the folder holds the
# plan (`fleet.json`, 4096 nodes at most, as the plan allows). Figures are printed, never
# asserted: a benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${ITERAGPU:-target/release/iteragpu}
[ -x "$BIN" ] || { echo "bench-fleet-check: no binary at $BIN (cargo build --release --locked)" >&2; exit 2; }
BIN=$(realpath "$BIN")
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(64 512 4096)
WORK=$(mktemp -d)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT

SLURM_JOB_ID=1 SLURM_NODEID=0 SLURM_JOB_NUM_NODES=1 SLURMD_NODENAME=n0 \
    "$BIN" probe --device cpu --seconds 0.2 --copy-bytes 1MiB --output "$WORK/probe.json" >/dev/null
SLURM_JOB_ID=1 SLURM_NODEID=0 SLURM_JOB_NUM_NODES=1 SLURMD_NODENAME=n0 \
    "$BIN" environment --device cpu --json >"$WORK/environment.json"

printf '%-7s %-7s %-10s %-10s %-12s %s\n' nodes GPUs cpu_s peak_MiB verdict_lines "cpu_s / (G log2 G) x 1e6"
for nodes in "${SIZES[@]}"; do
    dir="$WORK/fleet-$nodes"
    python3 - "$WORK" "$dir" "$nodes" <<'PY'
import copy, json, os, random, sys
work, out, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
probe = json.load(open(os.path.join(work, "probe.json")))
env = json.load(open(os.path.join(work, "environment.json")))
os.makedirs(out)
lots = nodes * 8 // 2
plan = {"schema": "iteragpu.fleet-plan.v1", "package": f"b200:7:{lots}", "model": "NVIDIA B200",
        "gpu": "b200", "gpus": nodes * 8, "nodes": nodes, "checks": ["environment", "probe"],
        "device": "gpu", "probe_seconds": 10.0, "binary": "/opt/iteragpu", "gpus_per_node": 8}
json.dump(plan, open(os.path.join(out, "fleet.json"), "w"))
open(os.path.join(out, "fleet.job"), "w").write("1\n")
open(os.path.join(out, "nodes.txt"), "w").write("".join(f"n{r}\n" for r in range(nodes)))
cpu = probe["devices"][0]
rng = random.Random(nodes)
for r in range(nodes):
    node = os.path.join(out, f"n{r}")
    os.makedirs(node)
    ident = {"source": "slurm", "name": f"n{r}", "rank": r, "count": nodes, "job_id": "1"}
    e = copy.deepcopy(env); e["node"] = ident
    json.dump(e, open(os.path.join(node, "environment.json"), "w"))
    p = copy.deepcopy(probe); p["node"] = ident
    devs = []
    for i in range(8):
        d = copy.deepcopy(cpu)
        name = f"cuda:{i}"
        d["device"] = name
        d["environment"]["requested_device"] = name
        d["environment"]["backend"] = "cuda"
        d["environment"]["reference_device"] = False
        d["environment"]["details"] = {"nvml": {"driver_version": "580.65.06"}}
        d["facts"] = {"device": name, "name": "NVIDIA B200", "uuid": f"GPU-{r:08x}-{i:04x}-0000-0000-000000000000",
                      "compute_capability": "10.0", "total_memory_bytes": 191503138816, "nvml_matched": True}
        d["copies"] = d["copies"][:1]
        d["copies"][0].update({"kind": "d2d", "from": name, "to": name,
                               "gb_per_s": 1600.0 if (r, i) == (nodes // 2, 3) else 2000.0 * rng.uniform(0.97, 1.03)})
        devs.append(d)
    p["devices"] = devs; p["requested_device"] = "all"; p["reference_device"] = False; p["visible_devices"] = 8
    json.dump(p, open(os.path.join(node, "probe.json"), "w"))
    for c in ("environment", "probe"):
        open(os.path.join(node, f"{c}.exit"), "w").write("0\n")
PY
    /usr/bin/time -f '%U %S %M' -o "$WORK/time" "$BIN" fleet check "$dir" >"$WORK/out" || true
    read -r user sys kib < <(tail -n 1 "$WORK/time")
    python3 - "$nodes" "$user" "$sys" "$kib" "$(wc -l <"$WORK/out")" <<'PY'
import math, sys
nodes, user, sys_, kib, lines = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
g = nodes * 8
cpu = user + sys_
print(f"{nodes:<7} {g:<7} {cpu:<10.2f} {kib/1024:<10.1f} {lines:<12} {cpu / (g * math.log2(g)) * 1e6:.2f}")
PY
    head -n 1 "$WORK/out" | cut -c1-160
    # The report over the same folder: the page a renter opens (issue 34 item 5: a few MB).
    /usr/bin/time -f '%e %M' -o "$WORK/time" "$BIN" report "$dir" --output "$WORK/page.html" >/dev/null 2>"$WORK/report.err" \
        || { echo "report failed: $(tail -n 1 "$WORK/report.err")"; rm -rf "$dir"; continue; }
    read -r wall kib < <(tail -n 1 "$WORK/time")
    echo "report: $wall s, peak $((kib / 1024)) MiB, page $(stat -c %s "$WORK/page.html") bytes"
    [ "${KEEP:-0}" = 1 ] && echo "kept: $dir, $WORK/page.html" || rm -rf "$dir" "$WORK/page.html"
done
