#!/usr/bin/env bash
# The kit's main job in one go, on whatever machine this is: diagnose the GPU, run the original
# kit's two example measurements (on cuda:0 when a GPU is usable, otherwise on the CPU reference
# device, clearly labelled), draw them in an HTML report, and price the example package.
# Everything lands in a new folder runs/<UTC time>/ (runs/<UTC time>-2/ and so on when two runs
# start in the same second): it is created exclusively, so nothing earlier is ever overwritten.
# The folder keeps what was printed and its JSON: environment, estimate, measurements, price.
#
#   scripts/lab.sh [DEVICE]        DEVICE defaults to cuda:0 when usable, else cpu
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ITERAGPU:-target/release/iteragpu}
[ -x "$bin" ] || { echo "lab.sh: $bin not found: run cargo build --release --locked first" >&2; exit 2; }

mkdir -p runs
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out="runs/$stamp"
n=1
# mkdir without -p fails when the folder exists: whoever creates it owns it.
until mkdir "$out" 2>/dev/null; do
    n=$((n + 1))
    [ "$n" -le 1000 ] || { echo "lab.sh: cannot create a new folder under runs/" >&2; exit 1; }
    out="runs/$stamp-$n"
done
echo "== results go to $out/"

echo "== environment (cuda:0)"
"$bin" environment --device cuda:0 | tee "$out/environment.txt"
"$bin" environment --device cuda:0 --json >"$out/environment.json"

device=${1:-}
if [ -z "$device" ]; then
    if grep -q '"usable": true' "$out/environment.json"; then
        device=cuda:0
    else
        device=cpu
        echo "== no usable GPU: measuring on the CPU reference device (not a GPU measurement)"
    fi
fi

echo "== estimate: 7e9 parameters at 16 bits, 4 GiB reserve assumed"
estimate=(estimate --parameters 7000000000 --bits 16 --reserve-gib 4)
"$bin" "${estimate[@]}" | tee "$out/estimate.txt"
"$bin" "${estimate[@]}" --json >"$out/estimate.json"

echo "== measure on $device: the original's small example"
"$bin" measure --device "$device" --batch 1 --context 16 --width 64 --dtype float32 \
    --warmup 1 --repeats 2 --output "$out/mesures-petit-essai.json"
echo "== measure on $device: the original's larger example"
"$bin" measure --device "$device" --batch 2 --context 128 --width 1024 --dtype float32 \
    --warmup 3 --repeats 5 --output "$out/mesures.json"

echo "== report: $out/report.html"
"$bin" report "$out/mesures-petit-essai.json" "$out/mesures.json" --output "$out/report.html"

echo "== price: b200, 7 days, 2 lots"
price=(price --gpu b200 --days 7 --lots 2)
"$bin" "${price[@]}" | tee "$out/price.txt"
"$bin" "${price[@]}" --json >"$out/price.json"

echo "== done: $out/"
ls -l "$out"
