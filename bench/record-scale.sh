#!/usr/bin/env bash
# `record` into a 100-row grid and into a 50,000-row grid (issue 32, scale): median wall time and
# peak RSS (/usr/bin/time -v) of RUNS records into each. Not a test: the figures depend on the
# machine and its disk (each record flushes the grid to disk).
#
#   cargo build --release --locked && bench/record-scale.sh [RUNS]
#   ITERAGPU_BIN=/path/to/other/iteragpu bench/record-scale.sh      # another build
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${ITERAGPU_BIN:-target/release/iteragpu}")
RUNS=${1:-9}
[ -x "$BIN" ] || { echo "no binary at $BIN: cargo build --release --locked first" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cd "$DIR"
"$BIN" protocol init protocol.txt > /dev/null
cat > protocol.txt <<'PROTOCOL'
useful_unit = one support ticket classified into one of 12 queues
acceptance_criterion = the queue matches the reference label
minimum_acceptance_rate = 0.9
corpus_id = tickets-v3
corpus_description = 500 anonymised support tickets, labelled by two agents
corpus_size = 500
judged_by = reference labels, file tickets-v3-labels.csv
distinctness_rule = one ticket id is one unit; a rerun on the same tickets adds none
aggregation = best
date = 2026-11-29
PROTOCOL
SHA=$("$BIN" protocol lock protocol.txt | sed -n 's/^SHA-256 //p')
for i in $(seq 1 $((2 * RUNS))); do
  "$BIN" measure --device cpu --batch 1 --context 16 --width 64 --warmup 1 --repeats 2 --output "m$i.json" > /dev/null
done
grid() { # ROWS FILE
  awk -v rows="$1" -v sha="$SHA" 'BEGIN {
    print "run_id,date_utc,protocol_sha256,corpus_id,rental,gpu,days,lots,device_model,device_uuid,driver_version,device_mismatch,measurement_sha256,units_submitted,units_accepted,acceptance_threshold,threshold_met,aggregation,notes"
    pad = ""; for (k = 0; k < 40; k++) pad = pad "padding "
    for (i = 0; i < rows; i++) {
      m = sprintf("%052x%012x", 0, 281474976710656 - 1 - i)
      printf "%s,2026-09-24T08:00:00Z,%s,tickets-v3,fill,h200,7,1,NVIDIA H200,GPU-1,570.86.15,false,%s,10,9,0.9,true,best,%s\n", substr(m, 1, 12), sha, m, pad
    }
  }' > "$2"
}
echo "record: $RUNS runs into each grid; binary $BIN"
echo
echo "| grid | size | median wall | max peak RSS |"
echo "| --- | --- | --- | --- |"
n=0
for rows in 100 50000; do
  grid "$rows" "g$rows.csv"
  size=$(($(wc -c < "g$rows.csv") / 1000))
  : > walls
  rss=0
  for _ in $(seq 1 "$RUNS"); do
    n=$((n + 1))
    /usr/bin/time -v "$BIN" record --results "g$rows.csv" --protocol protocol.txt --measurement "m$n.json" \
      --rental bench --package h200:7:1 --submitted 10 --accepted 9 --allow-device-mismatch > /dev/null 2> time.txt
    sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): 0://p' time.txt >> walls
    r=$(sed -n 's/.*Maximum resident set size (kbytes): //p' time.txt)
    [ "$r" -gt "$rss" ] && rss=$r
  done
  median=$(sort -n walls | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  printf '| %s rows | %s kB | %s s | %d MB |\n' "$rows" "$size" "$median" $((rss / 1024))
done
