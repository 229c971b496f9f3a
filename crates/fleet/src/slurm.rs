//! The Slurm batch script: one allocation of N nodes with one task per node, one `srun` step per
//! check, each node writing its results into its own folder of a directory every node sees.
//!
//! `sbatch --array=0-3` does not spread one task per node (Slurm 22.05 put two on each of two
//! nodes); `--nodes=N --ntasks-per-node=1` on the allocation and on every step does.
//!
//! The layout, which the fleet check reads (`DIR` is the `--output` folder, `<node>` is
//! `$SLURMD_NODENAME`, `<check>` one of environment, probe, measure):
//!
//! | file | what |
//! | --- | --- |
//! | `DIR/fleet.sbatch` | this script |
//! | `DIR/fleet.json` | the plan: package, nodes, GPUs per node, checks, device |
//! | `DIR/fleet.job` | the job's id, written first; the job refuses a folder of another job |
//! | `DIR/nodes.txt` | the allocation's node names, one a line, written before the first step |
//! | `DIR/slurm-<job>.out` | the batch script's own output |
//! | `DIR/<node>/<check>.json` | the check's document |
//! | `DIR/<node>/<check>.exit` | its exit code, a decimal number and a newline (124: its time limit) |
//! | `DIR/<node>/<check>.err` | only when that code is not 0: one line, the first of stderr with `error`, else its last |
//! | `DIR/<node>/<check>.stdout`, `.stderr` | what the check printed (environment's stdout is its `.json`) |
//! | `DIR/<node>/collective.<l>.*` | the same files of the node's other ranks (local rank `l` > 0; one rank per GPU) |
//! | `DIR/<node>/collective.pair-<a>-<b>[.<l>].*` | the same, for the run over the pair of nodes `a` and `b` |
//!
//! A node with no `<check>.exit` never ran the step (it was not allocated, or died). The
//! collective check runs once over every GPU of every node, then, from three nodes on, once
//! over each node and the next in `nodes.txt` (round the ring, one pair at a time), so that
//! `fleet check` can name a slow node (in two slow pairs) or link (in one). The pairs always
//! run: the job cannot judge the whole run's figure, and they cost seconds per pair on a
//! healthy fabric.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::quote;
use crate::{Check, Device, Error, Plan};

/// The file the batch script is written to, in the output folder.
pub const SCRIPT: &str = "fleet.sbatch";
/// The plan document, in the output folder.
pub const PLAN: &str = "fleet.json";
/// The allocation's node names, in the output folder.
pub const NODES: &str = "nodes.txt";

/// Options of the allocation itself.
#[derive(Debug, Clone, Default)]
pub struct Allocation {
    /// `--partition`, when given.
    pub partition: Option<String>,
    /// `--time` of the whole job in Slurm's format [default: the steps' limits added up, plus 5
    /// minutes].
    pub time: Option<String>,
}

/// The longest job time limit accepted, in minutes: 30 days, the longest package. A check of a
/// rental is bounded; a longer limit is a typo.
pub const MAX_TIME_MINUTES: u64 = 30 * 24 * 60;

/// Why a time limit is not one of Slurm's formats.
const TIME_FORMAT: &str = "is not a Slurm time limit: expected minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS in digits (minutes and seconds after a `:` below 60, hours after a `-` below 24), such as 30, 1:30:00 or 1-00:00:00";

/// The minutes a Slurm time limit stands for, as sbatch reads it (seconds round up to a whole
/// minute), in exactly Slurm's formats: `M`, `M:SS`, `H:MM:SS`, `D-H`, `D-H:MM`, `D-H:MM:SS`.
/// Slurm's `0`, `-1`, `INFINITE` and `UNLIMITED` mean no limit: refused, as is any limit of
/// zero (`0:00`) or over [`MAX_TIME_MINUTES`], since a check must end.
pub fn time_minutes(text: &str) -> Result<u64, Error> {
    let refuse = |why: &'static str| Error::Value {
        what: "--time",
        value: text.to_string(),
        why,
    };
    let number = |field: &str, below: Option<u64>| -> Option<u64> {
        if field.is_empty() || field.len() > 9 || !field.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = field.parse().ok()?;
        below.is_none_or(|b| n < b).then_some(n)
    };
    let (days, rest) = match text.split_once('-') {
        Some((d, rest)) => (
            Some(number(d, None).ok_or_else(|| refuse(TIME_FORMAT))?),
            rest,
        ),
        None => (None, text),
    };
    let fields: Vec<&str> = rest.split(':').collect();
    let parsed = match (days, fields.as_slice()) {
        (None, [m]) => number(m, None).map(|m| m * 60),
        (None, [m, s]) => number(m, None)
            .zip(number(s, Some(60)))
            .map(|(m, s)| m * 60 + s),
        (None, [h, m, s]) => number(h, None)
            .zip(number(m, Some(60)))
            .zip(number(s, Some(60)))
            .map(|((h, m), s)| h * 3600 + m * 60 + s),
        (Some(d), [h]) => number(h, Some(24)).map(|h| d * 86_400 + h * 3600),
        (Some(d), [h, m]) => number(h, Some(24))
            .zip(number(m, Some(60)))
            .map(|(h, m)| d * 86_400 + h * 3600 + m * 60),
        (Some(d), [h, m, s]) => number(h, Some(24))
            .zip(number(m, Some(60)))
            .zip(number(s, Some(60)))
            .map(|((h, m), s)| d * 86_400 + h * 3600 + m * 60 + s),
        _ => None,
    };
    // Nine digits per field keep every sum far below u64::MAX.
    let seconds = parsed.ok_or_else(|| refuse(TIME_FORMAT))?;
    let minutes = seconds.div_ceil(60);
    if minutes == 0 {
        return Err(refuse(
            "is no time limit at all to Slurm (0 means unlimited), and a check of a rental must end: give a positive limit such as 30",
        ));
    }
    if minutes > MAX_TIME_MINUTES {
        return Err(refuse(
            "is longer than 30 days (the longest package), which no check of a rental needs: give a shorter limit",
        ));
    }
    Ok(minutes)
}

/// Checks a partition name (letters, digits, `-_.,`) and a Slurm time limit
/// ([`time_minutes`]).
pub fn validate(allocation: &Allocation) -> Result<(), Error> {
    if let Some(p) = &allocation.partition
        && (p.is_empty()
            || !p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.,".contains(c)))
    {
        return Err(Error::Value {
            what: "--partition",
            value: p.clone(),
            why: "is not a partition name: letters, digits, `-`, `_`, `.` and `,` only",
        });
    }
    if let Some(t) = &allocation.time {
        time_minutes(t)?;
    }
    Ok(())
}

/// The per-node step every `srun` runs: `bash -c "$STEP" fleet-step CHECK LIMIT BINARY ARGS...`.
const STEP: &str = r#"check=$1; limit=$2; shift 2
# Slurm ends a step (its time limit, scancel) with SIGTERM, then SIGKILL: the trap waits for the
# check to end and still writes its exit code and the cause.
ended=; trap 'ended=1' TERM INT
node=${SLURMD_NODENAME:?slurmd sets SLURMD_NODENAME}
case $node in ''|.|..|*/*) echo "fleet-step: unusable node name '$node'" >&2; exit 1 ;; esac
out=$FLEET_DIR/$node
mkdir -p "$out" && cd "$out" || exit 1
stem=$check
case $check in collective*)
    # One rank per GPU: the node's first rank keeps the check's name, the others add their
    # local rank. Rank 0 is on the first node of the step, whose address Slurm itself uses.
    [ "${SLURM_LOCALID:-0}" = 0 ] || stem=$check.$SLURM_LOCALID
    first=$(scontrol show hostnames "${SLURM_STEP_NODELIST:-$SLURM_JOB_NODELIST}" | head -n 1)
    addr=$(scontrol show node "$first" 2>/dev/null | grep -o 'NodeAddr=[^ ]*' | head -n 1 | cut -d= -f2)
    export MASTER_ADDR=${addr:-$first}
    rm -f "$stem.json"
    set -- "$@" --port "$FLEET_PORT" --output "$stem.json" ;;
esac
rm -f "$stem.exit" "$stem.err"
if [ "$check" = environment ]; then
    timeout --kill-after=10 "$limit" "$@" >"$check.json" 2>"$check.stderr"
else
    timeout --kill-after=10 "$limit" "$@" >"$stem.stdout" 2>"$stem.stderr"
fi
rc=$?
if [ -n "$ended" ]; then
    [ "$rc" -ne 0 ] || rc=143
    printf '%s\n' "ended by Slurm with SIGTERM (the step's time limit, scancel, or the node going down)" >"$stem.err"
elif [ "$rc" -ne 0 ]; then
    line=$(grep -m1 -i 'error' "$stem.stderr" 2>/dev/null)
    [ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' "$stem.stderr" 2>/dev/null | tail -n 1)
    [ "$rc" -eq 124 ] && [ -z "$line" ] && line="timed out after $limit s"
    [ -n "$line" ] || line="exit $rc with nothing on stderr"
    printf '%s\n' "$line" >"$stem.err"
fi
printf '%s\n' "$rc" >"$stem.exit.tmp" && mv -f "$stem.exit.tmp" "$stem.exit"
exit "$rc""#;

/// The batch script's first lines after the set-up: `fleet.job` is written once, by this job.
const JOB_GUARD: &str = r#"if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then
    echo "iteragpu fleet: job $SLURM_JOB_ID was restarted (requeued $SLURM_RESTART_COUNT time(s)); its first run's files are in $FLEET_DIR: not running again into them" >&2
    exit 1
fi
if [ -e "$FLEET_DIR/fleet.job" ] && [ "$(cat "$FLEET_DIR/fleet.job")" != "$SLURM_JOB_ID" ]; then
    echo "iteragpu fleet: $FLEET_DIR belongs to job $(head -c 64 "$FLEET_DIR/fleet.job"), not $SLURM_JOB_ID: a fleet run writes into a folder of its own" >&2
    exit 1
fi
printf '%s\n' "$SLURM_JOB_ID" >"$FLEET_DIR/fleet.job"
"#;

/// The batch script for `plan`, its results under `dir` (an absolute path every node sees).
pub fn script(plan: &Plan, allocation: &Allocation, dir: &str) -> Result<String, Error> {
    plan.validate()?;
    validate(allocation)?;
    // Every value from outside, quoted (or refused) before a line is written.
    let package = quote::shell("--package", &plan.package)?;
    let model = quote::shell("the catalogue's model name", &plan.model)?;
    let dir_directive = quote::sbatch("--output", dir)?;
    let script_path = quote::shell("--output", &format!("{dir}/{SCRIPT}"))?;
    let dir_word = quote::shell("--output", dir)?;
    let binary = quote::shell("--binary", &plan.binary)?;
    let partition = match &allocation.partition {
        Some(p) => Some(quote::sbatch("--partition", p)?),
        None => None,
    };
    let time = match &allocation.time {
        Some(t) => quote::sbatch("--time", t)?,
        None => {
            let mut seconds: u64 = plan.checks.iter().map(|&c| step_limit(plan, c)).sum();
            if plan.checks.contains(&Check::Collective) && plan.nodes >= 3 {
                seconds += u64::from(plan.nodes) * step_limit(plan, Check::Collective);
            }
            format!("{}", seconds.div_ceil(60) + 5)
        }
    };
    let mut steps = Vec::new();
    for &check in &plan.checks {
        let args = plan
            .arguments(check)
            .iter()
            .map(|a| quote::shell("a check's argument", a))
            .collect::<Result<Vec<_>, _>>()?;
        steps.push((check, args));
    }
    let n = plan.nodes;
    let checks: Vec<&str> = plan.checks.iter().map(|c| c.name()).collect();
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Written by `iteragpu fleet slurm`: {} on each of {n} node(s), one task per node, for \
         the package {} ({} x {}, {} per node).",
        checks.join(", "),
        package,
        plan.gpus,
        model,
        plan.gpus_per_node()
    );
    if plan.device == Device::Cpu {
        let _ = writeln!(
            s,
            "# CPU REFERENCE DEVICE: every check opens the CPU reference device, not the GPUs; \
             its documents say so and hold no GPU figure."
        );
    }
    let _ = writeln!(
        s,
        "#\n# Submit: sbatch --wait {}   (then: iteragpu fleet check {})",
        script_path, dir_word
    );
    let _ = writeln!(
        s,
        "# The folder must be one that every node sees (a shared filesystem), and the binary too."
    );
    s.push_str(
        "#
# What the job writes (DIR is the folder above, <node> is $SLURMD_NODENAME):
#   DIR/fleet.json               the plan: package, nodes, GPUs per node, checks, device
#   DIR/fleet.job                the job's id, written first (a folder of another job is refused)
#   DIR/nodes.txt                the allocation's node names, one a line, before the first step
#   DIR/slurm-<job>.out          this script's own output
#   DIR/<node>/<check>.json      the check's document
#   DIR/<node>/<check>.exit      its exit code, a number and a newline (124: its time limit)
#   DIR/<node>/<check>.err       only when that code is not 0: one line, the first of stderr
#                                with `error`, else its last
#   DIR/<node>/<check>.stdout, .stderr   what it printed (environment's stdout is its .json)
#   DIR/<node>/collective.<l>.*  the same, of the node's other ranks (one rank per GPU)
#   DIR/<node>/collective.pair-<a>-<b>[.<l>].*   the same, of the run over the pair a, b
# A node without <check>.exit did not run that step. The job exits 1 when any step failed.
",
    );
    let _ = writeln!(s, "#SBATCH --job-name=iteragpu-fleet");
    let _ = writeln!(s, "#SBATCH --nodes={n}");
    let _ = writeln!(s, "#SBATCH --ntasks-per-node=1");
    let _ = writeln!(s, "#SBATCH --exclusive");
    // A requeued job runs again into the same folder: the first run's files make healthy nodes
    // fail and hide the node that died. One run, one folder.
    let _ = writeln!(s, "#SBATCH --no-requeue");
    if plan.device == Device::Gpu {
        let _ = writeln!(s, "#SBATCH --gpus-per-node={}", plan.gpus_per_node());
    }
    if let Some(p) = &partition {
        let _ = writeln!(s, "#SBATCH --partition={p}");
    }
    let _ = writeln!(s, "#SBATCH --time={time}");
    let _ = writeln!(s, "#SBATCH --output={dir_directive}/slurm-%j.out");
    s.push_str("\nset -u\n");
    let _ = writeln!(s, "export FLEET_DIR={dir_word}");
    let _ = writeln!(s, "BIN={binary}");
    s.push_str("STEP=$(cat <<'FLEET_STEP'\n");
    s.push_str(STEP);
    s.push_str("\nFLEET_STEP\n)\n");
    // The folder belongs to one job: its id is written first, and a folder of another job, or
    // a restart of this one, is refused before any node writes.
    s.push_str(JOB_GUARD);
    s.push_str("scontrol show hostnames \"$SLURM_JOB_NODELIST\" >\"$FLEET_DIR/nodes.txt\"\n");
    let _ = writeln!(
        s,
        "echo \"iteragpu fleet: job $SLURM_JOB_ID on $SLURM_JOB_NUM_NODES node(s): $(paste -sd ' ' \"$FLEET_DIR/nodes.txt\")\""
    );
    s.push_str("failed=0\n");
    for (check, args) in steps {
        let limit = plan.step_seconds(check);
        if check == Check::Collective {
            collective_steps(&mut s, plan, limit, &args.join(" "));
            continue;
        }
        let _ = writeln!(
            s,
            "\n# {check}: at most {limit} s on each node (then `timeout` ends it: exit 124)"
        );
        let _ = writeln!(s, "echo \"== {check}\"");
        let _ = writeln!(
            s,
            "srun --nodes={n} --ntasks={n} --ntasks-per-node=1 --time={} --kill-on-bad-exit=0 \\\n    bash -c \"$STEP\" fleet-step {check} {limit} \"$BIN\" {} \\\n    || {{ failed=1; echo \"{check}: a node's step failed (its {check}.exit and {check}.err say which)\"; }}",
            step_minutes(limit),
            args.join(" ")
        );
    }
    s.push_str("\nexit \"$failed\"\n");
    Ok(s)
}

/// The collective check's steps: one over every rank of every node, then one per pair of
/// neighbouring nodes (from three nodes on), one pair at a time so that pairs do not share a
/// link while they are measured. The rendezvous port comes from the job id, so that two fleet
/// jobs on one node (a shared test host) do not meet.
fn collective_steps(s: &mut String, plan: &Plan, limit: u64, args: &str) {
    let n = plan.nodes;
    let k = plan.ranks_per_node();
    let minutes = step_minutes(limit);
    let _ = writeln!(
        s,
        "\n# collective: {k} rank(s) per node, at most {limit} s (then `timeout` ends it: exit 124)"
    );
    s.push_str("echo \"== collective\"\n");
    s.push_str("FLEET_PORT_BASE=$((20000 + SLURM_JOB_ID % 2000 * 16))\n");
    let _ = writeln!(
        s,
        "FLEET_PORT=$FLEET_PORT_BASE srun --nodes={n} --ntasks={} --ntasks-per-node={k} --time={minutes} --kill-on-bad-exit=0 \\\n    bash -c \"$STEP\" fleet-step collective {limit} \"$BIN\" {args} \\\n    || {{ failed=1; echo \"collective: a rank failed (its node's collective*.exit and .err say which)\"; }}",
        u64::from(n) * k
    );
    if n < 3 {
        return;
    }
    s.push_str("# The pair pass: each node with the next in nodes.txt, round the ring.\n");
    s.push_str("mapfile -t fleet_nodes <\"$FLEET_DIR/nodes.txt\"\n");
    s.push_str("for ((i = 0; i < ${#fleet_nodes[@]}; i++)); do\n");
    s.push_str("    a=${fleet_nodes[i]}; b=${fleet_nodes[(i + 1) % ${#fleet_nodes[@]}]}\n");
    s.push_str("    echo \"== collective over the pair $a $b\"\n");
    let _ = writeln!(
        s,
        "    FLEET_PORT=$((FLEET_PORT_BASE + 1 + i % 15)) srun --nodes=2 --nodelist=\"$a,$b\" --ntasks={} --ntasks-per-node={k} --time={minutes} --kill-on-bad-exit=0 \\\n        bash -c \"$STEP\" fleet-step \"collective.pair-$a-$b\" {limit} \"$BIN\" {args} \\\n        || {{ failed=1; echo \"collective over $a $b: a rank failed\"; }}",
        2 * k
    );
    s.push_str("done\n");
}

/// The step's own Slurm time limit: the check's `timeout` plus a minute for `timeout
/// --kill-after` and writing the exit code, in whole minutes.
fn step_minutes(limit: u64) -> u64 {
    (limit + 10 + 60).div_ceil(60)
}

fn step_limit(plan: &Plan, check: Check) -> u64 {
    step_minutes(plan.step_seconds(check)) * 60
}

/// One node's exit codes, as its files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeExits {
    /// The node's name (its folder).
    pub node: String,
    /// Per check in run order: the exit code, or `None` when the node has no `<check>.exit`,
    /// with the `.err` line when there is one.
    pub checks: Vec<(Check, Option<i32>, Option<String>)>,
}

/// Reads every node's exit codes from `dir`: the nodes of `nodes.txt` when the job wrote it,
/// and every other folder that holds an `.exit` file, sorted by name.
pub fn read_exits(dir: &Path, checks: &[Check]) -> Vec<NodeExits> {
    let mut nodes: Vec<String> = fs::read_to_string(dir.join(NODES))
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir()
                && checks
                    .iter()
                    .any(|c| entry.path().join(format!("{c}.exit")).is_file())
                && !nodes.contains(&name)
            {
                nodes.push(name);
            }
        }
    }
    nodes.sort();
    nodes.dedup();
    nodes
        .into_iter()
        .map(|node| {
            let folder = dir.join(&node);
            let checks = checks
                .iter()
                .map(|&c| {
                    let code = fs::read_to_string(folder.join(format!("{c}.exit")))
                        .ok()
                        .and_then(|t| t.trim().parse::<i32>().ok());
                    let err = fs::read_to_string(folder.join(format!("{c}.err")))
                        .ok()
                        .map(|t| t.lines().next().unwrap_or("").trim().to_string());
                    (c, code, err)
                })
                .collect();
            NodeExits { node, checks }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::plan;

    #[test]
    fn one_task_per_node_on_the_allocation_and_every_step() {
        let s = script(&plan(Device::Gpu), &Allocation::default(), "/shared/fleet").unwrap();
        assert!(
            s.contains("#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n"),
            "{s}"
        );
        assert!(s.contains("#SBATCH --gpus-per-node=2\n"), "{s}");
        assert_eq!(
            s.matches("srun --nodes=4 --ntasks=4 --ntasks-per-node=1 ")
                .count(),
            3,
            "{s}"
        );
        assert!(!s.contains("--array"), "{s}");
        assert!(
            s.contains(
                "fleet-step probe 324 \"$BIN\" probe --device all --package b200:7:4 --seconds 10 --output probe.json"
            ),
            "{s}"
        );
        assert!(
            s.contains("environment --device all --package b200:7:4 --json"),
            "{s}"
        );
        assert!(s.contains("measure --device cuda:0 "), "{s}");
        assert!(
            s.contains("#SBATCH --output=/shared/fleet/slurm-%j.out"),
            "{s}"
        );
        // environment 120 s -> 4 min, probe 324 s -> 7 min, measure 600 s -> 12 min,
        // collective 900 s -> 17 min, once over the four nodes and once per pair, + 5.
        assert!(s.contains("#SBATCH --time=113\n"), "{s}");
        // The collective: one rank per GPU, then the pairs round the ring.
        assert!(
            s.contains(
                "srun --nodes=4 --ntasks=8 --ntasks-per-node=2 --time=17 --kill-on-bad-exit=0 \\\n    bash -c \"$STEP\" fleet-step collective 900 \"$BIN\" collective --backend nccl --max-bytes 1GiB"
            ),
            "{s}"
        );
        assert!(
            s.contains("srun --nodes=2 --nodelist=\"$a,$b\" --ntasks=4 --ntasks-per-node=2 "),
            "{s}"
        );
        assert!(
            s.contains("fleet-step \"collective.pair-$a-$b\" 900"),
            "{s}"
        );
        assert!(!s.contains("CPU REFERENCE DEVICE"), "{s}");
    }

    #[test]
    fn the_cpu_device_is_labelled_and_asks_for_no_gpu() {
        let a = Allocation {
            partition: Some("debug".to_string()),
            time: Some("0:30:00".to_string()),
        };
        let s = script(&plan(Device::Cpu), &a, "/d").unwrap();
        assert!(s.contains("# CPU REFERENCE DEVICE"), "{s}");
        assert!(!s.contains("--gpus-per-node"), "{s}");
        assert!(
            s.contains("#SBATCH --partition=debug\n#SBATCH --time=0:30:00\n"),
            "{s}"
        );
        assert!(
            s.contains("probe --device cpu --seconds 10 --copy-bytes 64MiB"),
            "{s}"
        );
    }

    #[test]
    fn bad_values_are_refused_before_they_reach_the_script() {
        let a = Allocation {
            partition: Some("gpu;rm".to_string()),
            ..Allocation::default()
        };
        assert!(script(&plan(Device::Gpu), &a, "/d").is_err());
        let a = Allocation {
            time: Some("1h".to_string()),
            ..Allocation::default()
        };
        assert!(script(&plan(Device::Gpu), &a, "/d").is_err());
        let e = script(&plan(Device::Gpu), &Allocation::default(), "/my dir").unwrap_err();
        assert!(e.to_string().contains("#SBATCH"), "{e}");
    }

    #[test]
    fn time_limits_are_read_in_exactly_slurms_formats() {
        // What Slurm means by no limit, and what it does not read, before what it does.
        for zero in ["0", "00", "0:00", "0:0:0", "0-0", "0-0:0", "0-00:00:00"] {
            let e = time_minutes(zero).unwrap_err().to_string();
            assert!(e.contains("0 means unlimited"), "{zero}: {e}");
        }
        for bad in [
            "1:2:3:4",
            "1-2:3:4:5",
            "",
            "-1",
            "INFINITE",
            "UNLIMITED",
            "1h",
            "1:60",
            "1:00:60",
            "1-24",
            "1-1:60",
            "1--1",
            "-5",
            "1-",
            ":30",
            "30:",
            "+30",
            " 30",
            "30 ",
            "1.5",
            "1-2-3",
            "１",
        ] {
            let e = time_minutes(bad).unwrap_err().to_string();
            assert!(e.contains("is not a Slurm time limit"), "{bad:?}: {e}");
        }
        let e = time_minutes("30-00:00:01").unwrap_err().to_string();
        assert!(e.contains("longer than 30 days"), "{e}");
        assert!(time_minutes("43201").is_err());
        assert!(time_minutes("9999999999").is_err());
        for (text, minutes) in [
            ("30", 30),
            ("0:30", 1),
            ("1:30", 2),
            ("90:00", 90),
            ("1:30:00", 90),
            ("1:2:3", 63),
            ("1-0", 1440),
            ("1-2", 1560),
            ("1-2:03", 1563),
            ("1-02:03:04", 1564),
            ("30-0", MAX_TIME_MINUTES),
            ("43200", MAX_TIME_MINUTES),
        ] {
            assert_eq!(time_minutes(text).unwrap(), minutes, "{text}");
        }
    }

    #[test]
    fn the_step_script_is_valid_bash() {
        let s = script(&plan(Device::Cpu), &Allocation::default(), "/d").unwrap();
        let status = std::process::Command::new("bash")
            .args(["-n", "-c", &s])
            .status();
        if let Ok(status) = status {
            assert!(status.success(), "bash -n refused the script:\n{s}");
        }
    }

    #[test]
    fn exit_codes_are_read_per_node() {
        let dir = std::env::temp_dir().join(format!("fleet-exits-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("n1")).unwrap();
        fs::create_dir_all(dir.join("n2")).unwrap();
        fs::write(dir.join(NODES), "n1\nn2\nn3\n").unwrap();
        fs::write(dir.join("n1/environment.exit"), "0\n").unwrap();
        fs::write(dir.join("n2/environment.exit"), "2\n").unwrap();
        fs::write(dir.join("n2/environment.err"), "iteragpu: error: no\n").unwrap();
        let exits = read_exits(&dir, &[Check::Environment]);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(exits.len(), 3);
        assert_eq!(exits[0].checks[0].1, Some(0));
        assert_eq!(exits[1].checks[0].1, Some(2));
        assert_eq!(exits[1].checks[0].2.as_deref(), Some("iteragpu: error: no"));
        assert_eq!(exits[2].node, "n3");
        assert_eq!(exits[2].checks[0].1, None);
    }
}
