#!/usr/bin/env bash
# A local Slurm cluster for the tests: one slurmctld and four emulated nodes (`slurmd -N n1..n4`)
# on this host, on loopback only, with a private munge daemon on its own socket. Nothing of the
# system's Slurm or munge configuration is read or changed, and every daemon is stopped by the
# PID it wrote.
#
#   scripts/slurm-local.sh start DIR     write DIR/slurm.conf, start munged, slurmctld, slurmd n1..n4,
#                                        wait until the four nodes are idle (exit 1 with the logs'
#                                        tails if they are not within 60 s)
#   scripts/slurm-local.sh stop DIR      stop every daemon started in DIR by its PID file
#   scripts/slurm-local.sh env DIR       print `export SLURM_CONF=...` for the clients
#
# Needs Debian's slurm-wlm and munge (22.05.8 in Debian 12): `apt-get install slurm-wlm munge`.
# Run as root (slurmd starts job steps as the submitting user). Ports 16817 (slurmctld) and
# 16901-16904 (slurmd) on 127.0.0.1; SLURM_LOCAL_PORT_BASE moves them.
set -euo pipefail

usage() { echo "usage: $0 start|stop|env DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
nodes=(n1 n2 n3 n4)
base=${SLURM_LOCAL_PORT_BASE:-16800}

stop() {
    local pidfile pid
    for pidfile in "$dir"/slurmd.*.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -f "$pidfile" ] || continue
        pid=$(cat "$pidfile" 2>/dev/null || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$pidfile"
    done
}

case "$cmd" in
stop)
    stop
    exit 0
    ;;
env)
    echo "export SLURM_CONF=$dir/slurm.conf"
    exit 0
    ;;
start) ;;
*) usage ;;
esac

for tool in munged mungekey slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "slurm-local: $tool is not installed (apt-get install slurm-wlm munge)" >&2
        exit 2
    }
done
[ "$(id -u)" -eq 0 ] || { echo "slurm-local: run as root (slurmd starts steps as their user)" >&2; exit 2; }

stop
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 700 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
chmod 600 "$dir/munge/munge.key"
munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"

cpus=1
{
    echo "# Written by scripts/slurm-local.sh: a test cluster on loopback, four emulated nodes."
    echo "ClusterName=iteragpu-test"
    echo "SlurmctldHost=localhost(127.0.0.1)"
    echo "SlurmctldPort=$((base + 17))"
    echo "AuthType=auth/munge"
    echo "AuthInfo=socket=$dir/munge/munge.sock"
    echo "CredType=cred/munge"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd.%n.pid"
    echo "SlurmctldLogFile=$dir/slurmctld.log"
    echo "SlurmdLogFile=$dir/slurmd.%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "MpiDefault=none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "ReturnToService=2"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SlurmctldTimeout=30"
    echo "SlurmdTimeout=30"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "MinJobAge=300"
    i=0
    for n in "${nodes[@]}"; do
        i=$((i + 1))
        echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 100 + i)) CPUs=$cpus RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${nodes[*]}") Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
} >"$dir/slurm.conf"
export SLURM_CONF="$dir/slurm.conf"

slurmctld -f "$SLURM_CONF" -i
for n in "${nodes[@]}"; do
    mkdir -p "$dir/spool/$n"
    slurmd -f "$SLURM_CONF" -N "$n"
done

for _ in $(seq 120); do
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle" {n++} END {print n + 0}')
    if [ "$idle" -eq "${#nodes[@]}" ]; then
        echo "slurm-local: ${#nodes[@]} nodes idle (SLURM_CONF=$SLURM_CONF)"
        exit 0
    fi
    sleep 0.5
done
echo "slurm-local: the nodes did not become idle within 60 s:" >&2
sinfo -N >&2 || true
tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.*.log "$dir"/munged.log >&2 || true
stop
exit 1
