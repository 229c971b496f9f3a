#!/usr/bin/env bash
# `fit --offers` on a generated SkyPilot-shaped catalogue of 10^6 rows (issue 32, item 4): wall
# time and peak RSS from /usr/bin/time -v, with --limit 10 (text), the JSON of every offer, and a
# file of one instance type per row (refused at 20,000 instance types). Not a test: the figures
# depend on the machine.
#
#   cargo build --release --locked && bench/offers-scale.sh [ROWS] [INSTANCE_TYPES]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${ITERAGPU_BIN:-target/release/iteragpu}
ROWS=${1:-1000000}
TYPES=${2:-2000}
[ -x "$BIN" ] || { echo "no binary at $BIN: cargo build --release --locked first" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time at /usr/bin/time" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

# Rows cycle through TYPES instance types (each over many regions and zones, as a real file's
# rows do), with CPU rows, unmapped accelerators and empty spot cells between them.
awk -v rows="$ROWS" -v types="$TYPES" 'BEGIN {
  print "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone"
  split("H100 A100-80GB L4 H200 L40S V100", gpu, " "); split("8 4 1 8 2 4", count, " ")
  srand(7)
  for (i = 0; i < rows; i++) {
    t = i % types; g = t % 6 + 1
    if (i % 25 == 0) { printf "c%d.large,,,2.0,8.0,0.0961,0.0320,r%d,z%d\n", t, i % 31, i % 3; continue }
    spot = (i % 7 == 0) ? "" : sprintf("%.4f", 1 + rand() * 40)
    printf "i%d.xl,%s,%s.0,96.0,768.0,%.4f,%s,r%d,z%d\n", t, gpu[g], count[g], 2 + rand() * 90, spot, i % 31, i % 3
  }
}' > "$DIR/vms.csv"

distinct() {
  awk -v rows="$ROWS" 'BEGIN {
    print "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone"
    for (i = 0; i < rows; i++) printf "i%d,H100,8.0,1.0,2.0,%.2f,,r,\n", i, 1 + (i % 997) / 10
  }' > "$DIR/distinct.csv"
}
distinct

run() {
  local name=$1; shift
  /usr/bin/time -v "$BIN" fit --parameters 70B --bits 16 "$@" > "$DIR/out" 2> "$DIR/time" || true
  local wall rss code bytes
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$DIR/time")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$DIR/time")
  code=$(sed -n 's/.*Exit status: //p' "$DIR/time")
  bytes=$(wc -c < "$DIR/out")
  printf '| %s | %s | %s | %d MB | %s |\n' "$name" "$code" "$wall" $((rss / 1024)) "$bytes"
}

echo "fit --offers: $ROWS rows ($(($(wc -c < "$DIR/vms.csv") / 1000000)) MB), $TYPES instance types; binary $BIN"
echo
echo "| run | exit | wall | peak RSS | stdout bytes |"
echo "| --- | --- | --- | --- | --- |"
run "text, --limit 10" --offers "$DIR/vms.csv" --limit 10
run "text, default (10 of each duration)" --offers "$DIR/vms.csv"
run "JSON, --limit 10" --offers "$DIR/vms.csv" --limit 10 --json
run "JSON, every offer" --offers "$DIR/vms.csv" --json
run "one instance type per row (refused)" --offers "$DIR/distinct.csv" --limit 10
run "no --offers (baseline)"
