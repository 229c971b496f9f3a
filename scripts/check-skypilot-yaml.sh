#!/usr/bin/env bash
# SkyPilot's own parser accepts what `iteragpu fleet skypilot` writes: the task YAML for a wheel,
# for a kit with a results bucket, for the CPU reference device and for the collective check, each read by
# `sky.Task.from_yaml` of a pinned skypilot in a cached venv, and its num_nodes and accelerators
# compared with what was asked for. Nothing is launched and no cloud is reached.
#
#   scripts/check-skypilot-yaml.sh [BINARY]     BINARY defaults to target/release/iteragpu
#
# The venv is .cache/skypilot/venv (made on first use: `pip install skypilot==0.14.1` took 37 s
# here); SKYPILOT_VENV moves it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-target/release/iteragpu}")
venv=${SKYPILOT_VENV:-.cache/skypilot/venv}
version=0.14.1

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import sky, sys; sys.exit(sky.__version__ != '$version')" 2>/dev/null; then
    echo "== installing skypilot==$version into $venv"
    start=$(date +%s)
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "skypilot==$version"
    echo "== installed in $(($(date +%s) - start)) s"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wheel="$tmp/iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl"
: >"$wheel"
mkdir -p "$tmp/kit/bin/x86_64-unknown-linux-gnu"

"$bin" fleet skypilot --package b200:7:4 --nodes 4 --wheel "$wheel" --output "$tmp/wheel.yaml" >/dev/null
"$bin" fleet skypilot --package b200:7:4 --nodes 2 --kit "$tmp/kit" --results s3://iteragpu-check/fleet \
    --output "$tmp/kit.yaml" >/dev/null
"$bin" fleet skypilot --package h200:3:2 --nodes 2 --device cpu --wheel "$wheel" --output "$tmp/cpu.yaml" >/dev/null
"$bin" fleet skypilot --package b200:7:4 --nodes 4 --checks environment,collective --wheel "$wheel" \
    --output "$tmp/net.yaml" >/dev/null

# HOME in the temporary folder: the parser may write its own state (~/.sky) there, not here.
HOME="$tmp" "$venv/bin/python" - "$tmp" <<'EOF'
import os
import sys

import sky

folder = sys.argv[1]
cases = [
    ("wheel.yaml", 4, {"B200": 2}, False),
    ("kit.yaml", 2, {"B200": 4}, True),
    ("cpu.yaml", 2, None, False),
    ("net.yaml", 4, {"B200": 2}, False),
]
failed = 0
for name, nodes, accelerators, bucket in cases:
    task = sky.Task.from_yaml(os.path.join(folder, name))
    got = [r.accelerators for r in task.resources]
    ok = task.num_nodes == nodes and got == [accelerators]
    ok = ok and bool(task.storage_mounts) == bucket and "SKYPILOT_NODE_RANK" in task.run
    # The collective: one rank per GPU of the node, each with its local rank.
    ok = ok and (name != "net.yaml" or "LOCAL_RANK=$l SKYPILOT_NUM_GPUS_PER_NODE=2" in task.run)
    print(f"{'ok' if ok else 'FAILED'}: {name}: num_nodes {task.num_nodes}, accelerators {got}, "
          f"file_mounts {sorted(task.file_mounts or {})}, storage {sorted(task.storage_mounts)}")
    failed += not ok
print(f"parsed by skypilot {sky.__version__}")
print(f"skypilot: {len(cases) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
EOF
