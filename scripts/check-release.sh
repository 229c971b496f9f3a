#!/usr/bin/env bash
# Checks what scripts/release.sh wrote, as a user would meet it:
#   1. both binaries: highest GLIBC symbol version <= 2.28, no builder path (check-binary.sh);
#   2. the aarch64 binary runs under qemu-aarch64 (Debian's qemu-user, with the arm64 glibc of
#      libc6-arm64-cross) and gives the same results as the x86_64 one: estimate, price, and a
#      small `measure --device cpu` (every allocator counter, shape and parameter count; the
#      timings and the host's name differ by nature and are left out);
#   3. the x86_64 wheel installs into a fresh venv, and the notebook's commands run through it.
#
#   scripts/check-release.sh [DIST]      DIST defaults to dist/
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=$(cd "${1:-dist}" && pwd)
x86=$dist/x86_64-unknown-linux-gnu/iteragpu
arm=$dist/aarch64-unknown-linux-gnu/iteragpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== binaries: glibc and builder paths"
scripts/check-binary.sh "$x86"
# CI sets ITERAGPU_RELEASE_SKIP_AARCH64=1 only when rustup could not download the aarch64 target
# on its machine: then this says so loudly instead of failing every other check with it.
if [ "${ITERAGPU_RELEASE_SKIP_AARCH64:-0}" = 1 ]; then
    echo "check-release: WARNING: the aarch64 binary was not built (ITERAGPU_RELEASE_SKIP_AARCH64=1): its glibc, builder-path and qemu checks are SKIPPED" >&2
else
scripts/check-binary.sh "$arm"

echo "== aarch64 under qemu-aarch64 against x86_64"
sysroot=/usr/aarch64-linux-gnu
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || {
    echo "check-release: $sysroot has no arm64 glibc: apt-get install qemu-user libc6-arm64-cross" >&2
    exit 1
}
arm_run() { qemu-aarch64 -L "$sysroot" "$arm" "$@"; }
arm_run --version
compare() {
    local name=$1
    shift
    "$x86" "$@" >"$work/$name.x86_64"
    arm_run "$@" >"$work/$name.aarch64"
    cmp "$work/$name.x86_64" "$work/$name.aarch64" || {
        echo "check-release: \`iteragpu $*\` differs between x86_64 and aarch64:" >&2
        diff "$work/$name.x86_64" "$work/$name.aarch64" >&2 || true
        exit 1
    }
    echo "same on both: iteragpu $*"
}
compare estimate estimate --parameters 7000000000 --bits 16 --reserve-gib 4 --json
compare estimate-text estimate --parameters 70B --bits 4
compare price price --gpu b200 --days 7 --lots 2 --json
compare price-unit price --gpu h100-sxm --days 30 --lots 1 --accepted-results 1200 --json
compare price-list price --list
small=(measure --device cpu --batch 2 --context 16 --width 64 --dtype float32 --warmup 1 --repeats 2)
"$x86" "${small[@]}" --output "$work/x86_64.json" >/dev/null
arm_run "${small[@]}" --output "$work/aarch64.json" >/dev/null
python3 - "$work/x86_64.json" "$work/aarch64.json" <<'PY'
import json, sys

def comparable(path):
    doc = json.load(open(path))
    assert doc["complete"] is True, (path, doc.get("error"))
    assert doc["check"]["passed"] is True, (path, doc["check"])
    phases = [
        (p["phase"], p["index"], {k: v for k, v in p["memory"].items() if k.endswith("_bytes")})
        for p in doc["phases"]
    ]
    return {
        "configuration": doc["configuration"],
        "synthetic_model": doc["synthetic_model"],
        "phases": phases,
        "check_bound": doc["check"]["bound"],
    }

a, b = comparable(sys.argv[1]), comparable(sys.argv[2])
if a != b:
    for key in a:
        if a[key] != b[key]:
            print(f"check-release: measure differs in {key}:\n  x86_64  {a[key]}\n  aarch64 {b[key]}", file=sys.stderr)
    sys.exit(1)
print(f"same on both: measure --device cpu ({len(a['phases'])} phase rows, every counter; check passed on both)")
PY
fi

echo "== the x86_64 wheel in a fresh venv, running the notebook"
wheel=$(ls "$dist"/iteragpu-*-manylinux_2_28_x86_64.whl)
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" "ipython>=8.12,<10"
[ -x "$work/venv/bin/iteragpu" ] || { echo "check-release: the wheel installed no bin/iteragpu" >&2; exit 1; }
cmp "$work/venv/bin/iteragpu" "$x86" || { echo "check-release: the wheel's binary is not dist's" >&2; exit 1; }
mkdir "$work/notebook"
(
    cd "$work/notebook"
    env -u ITERAGPU PATH="$work/venv/bin:/usr/bin:/bin" \
        "$work/venv/bin/python" "$root/scripts/run-notebook.py" "$root/notebooks/iteragpu-lab.ipynb"
) | tee "$work/notebook.log"
grep -qx -- "--- notebook ran with BINARY=$work/venv/bin/iteragpu" "$work/notebook.log" || {
    echo "check-release: the notebook did not run the wheel's iteragpu" >&2
    exit 1
}
echo "== the notebook without the binary (and without torch): every step says what it skipped"
mkdir "$work/notebook-alone"
(
    cd "$work/notebook-alone"
    env -u ITERAGPU PATH="/usr/bin:/bin" \
        "$work/venv/bin/python" "$root/scripts/run-notebook.py" "$root/notebooks/iteragpu-lab.ipynb"
) | tee "$work/notebook-alone.log"
for line in "--- notebook ran with BINARY=None" "torch engine program 1 loaded" \
    "  total               17.0385 GiB (weights + reserve)" \
    "torch engine, float32, batch 1 x context 16 x width 64: skipped: PyTorch cannot be imported by *; it never falls back to the CPU" \
    "torch engine, float32, batch 2 x context 128 x width 1024: skipped: PyTorch cannot be imported by *; it never falls back to the CPU"; do
    # The line exactly, where `*` stands for the Python's path and the import error.
    pattern=$(printf '%s' "$line" | sed 's/[][\\.^$]/\\&/g; s/\*/.*/g')
    grep -qx -- "$pattern" "$work/notebook-alone.log" || {
        echo "check-release: the notebook without the binary did not print: $line" >&2
        exit 1
    }
done
echo "== release checks passed"
