//! `iteragpu fleet`: the checks on every node of a package that spans several machines: the
//! Slurm batch script (`slurm`, with `--submit` to run it and read every node's exit codes) and
//! the SkyPilot task (`skypilot`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use fleet::check::CheckOptions;
use fleet::skypilot::{Install, Task};
use fleet::slurm::{self, Allocation};
use fleet::{Check, Device, Plan};
use lab_io::files;
use ledger::Package;
use rent::datasheet::Datasheet;

use crate::exit::usage;
use crate::lot::{expectation, parse_package};
use crate::output;

/// Options of `fleet`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to write.
    #[command(subcommand)]
    pub verb: Verb,
}

/// The verbs of `fleet`.
#[derive(Debug, clap::Subcommand)]
pub enum Verb {
    /// Write the Slurm batch script that runs the checks once on every node
    /// (`--nodes=N --ntasks-per-node=1`, one `srun` step per check); `--submit` runs it.
    Slurm(SlurmArgs),
    /// Write the SkyPilot task YAML that runs the checks on every node (`num_nodes`, the
    /// package's GPUs per node, a setup that installs the wheel or the kit).
    Skypilot(SkypilotArgs),
    /// Judge every node's results together: failed or missing nodes, the package over all
    /// nodes, one table of node x GPU, outliers across nodes.
    Check(CheckArgs),
}

/// What both verbs share: the package, the nodes and the checks.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// The rented package, GPU:DAYS:LOTS: its GPUs (gpus per lot x lots) are shared out evenly
    /// over the nodes.
    #[arg(long, value_parser = parse_package, value_name = "GPU:DAYS:LOTS")]
    pub package: Package,
    /// How many nodes the package's GPUs are on (1 to 4096; it must divide the GPU count).
    #[arg(long, value_name = "N")]
    pub nodes: u32,
    /// The checks each node runs, comma-separated, run in this order: environment, probe,
    /// measure, collective (an all-reduce and all-gather over every GPU of every node through
    /// the nodes' PyTorch, then over each pair of neighbouring nodes; see `iteragpu collective
    /// --help`).
    #[arg(long, default_value = "environment,probe,measure", value_parser = parse_checks, value_name = "LIST")]
    pub checks: Checks,
    /// `gpu`: every GPU of each node; `cpu`: the CPU reference device on every node, which
    /// checks the scheduler's side without GPUs (every document is labelled; no GPU figure).
    #[arg(long, default_value = "gpu", value_parser = ["gpu", "cpu"])]
    pub device: String,
    /// Seconds `probe` may take per GPU on each node (0.1 to 3600).
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds, value_name = "S")]
    pub probe_seconds: f64,
    /// A tariff CSV to read the package from instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,
}

/// Options of `fleet slurm`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu fleet slurm --package b200:7:4 --nodes 4 --output /shared/fleet
  iteragpu fleet slurm --package b200:7:4 --nodes 2 --partition gpu --submit --output /shared/fleet
  iteragpu fleet slurm --package b200:7:4 --nodes 4 --device cpu --submit --output /shared/try
  iteragpu fleet slurm --package b200:7:4 --nodes 4 --checks environment,collective \\
      --output /shared/net

Writes DIR/fleet.sbatch and DIR/fleet.json (the plan). The job asks for --nodes=N
--ntasks-per-node=1 (and the GPUs per node); each check is one srun step with one task on each
node and a time limit, and every node writes DIR/<node>/<check>.json, <check>.exit (its exit code),
<check>.err (the first error line, when the code is not 0), <check>.stdout and <check>.stderr;
<node> is $SLURMD_NODENAME, DIR/nodes.txt lists the allocation. The collective check is one
step of one task per GPU (nccl; one per node with --device cpu: gloo) writing
DIR/<node>/collective.json (local rank 0) and collective.<l>.json, then, from three nodes on, one
step per pair of neighbouring nodes writing collective.pair-<a>-<b>.json; its ranks find torch
in the first python3 on the PATH the job inherits. DIR and the binary must be on a
filesystem every node sees. --submit runs `sbatch --wait` on the script, then reads every node's
exit codes. Exit codes: 0 written (with --submit: every node ran every check with exit 0), 1 a
node's check failed or did not run, or sbatch failed, 2 bad options or a DIR that already holds
a fleet.sbatch. A value with a line break or another control character (in an option or in the
--catalogue's model name) is refused, never written into the script.")]
pub struct SlurmArgs {
    #[command(flatten)]
    pub common: Common,
    /// The partition to run in [default: the cluster's default].
    #[arg(long, value_name = "P")]
    pub partition: Option<String>,
    /// The job's time limit in one of Slurm's formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM
    /// or D-HH:MM:SS, from 1 minute to 30 days; 0 (Slurm's "no limit") and anything else, such
    /// as 1:2:3:4, are refused, since a check must end [default: the steps' limits added up,
    /// plus 5 minutes].
    #[arg(long, value_name = "T")]
    pub time: Option<String>,
    /// The iteragpu binary the nodes run [default: this one's absolute path].
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// The folder for the script and the nodes' results (created if missing, and only once
    /// every option is accepted); it must not hold a fleet.sbatch yet. Refused, not escaped,
    /// when its absolute path holds a space, a quote, `\`, `#`, `%` or the word hetjob or
    /// packjob: sbatch would split it, cut it, or read it as a file-name pattern (`%j`).
    #[arg(long, value_name = "DIR")]
    pub output: PathBuf,
    /// Submit with `sbatch --wait`, then read every node's exit codes and judge the folder.
    #[arg(long)]
    pub submit: bool,
    /// Refused: the script says `--no-requeue`, because a requeued job runs again into the
    /// same folder (the first run's files make healthy nodes fail and hide the dead one).
    #[arg(long)]
    pub requeue: bool,
    /// Print one JSON document (the files written; with --submit the job and the verdict).
    #[arg(long)]
    pub json: bool,
}

/// Options of `fleet skypilot`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu fleet skypilot --package b200:7:4 --nodes 4 \\
      --wheel dist/iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl --output fleet.yaml
  iteragpu fleet skypilot --package b200:7:4 --nodes 2 --kit kit/ \\
      --results s3://my-bucket/fleet --output fleet.yaml

Writes a SkyPilot task: num_nodes, resources.accelerators per node (B200:2 for 8 GPUs on 4
nodes), file_mounts that copy the wheel or the kit to every node, a setup that installs it, and
a run that writes <results>/<rank>/<check>.json, .exit, .err, .stdout, .stderr on every node
(rank is SKYPILOT_NODE_RANK). The wheel is unpacked with `python3 -m zipfile`, so no pip is
needed. It prints the commands that follow: launch (`sky launch -c fleet fleet.yaml`), fetch
(rsync from every node over SkyPilot's SSH names, or one copy of the bucket, into
fleet-results/) and check (`iteragpu fleet check fleet-results --plan FILE`, the plan written
beside the task as <name>.plan.json). The output file and its plan must not exist. A value with a line break or another control character (in an option or in the
--catalogue's model name) is refused, never written into the YAML.")]
pub struct SkypilotArgs {
    #[command(flatten)]
    pub common: Common,
    /// The wheel every node unpacks (with `python3 -m zipfile`: no pip needed).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "kit",
        conflicts_with = "kit"
    )]
    pub wheel: Option<PathBuf>,
    /// A kit folder (with `bin/<target>/iteragpu`) copied to every node.
    #[arg(long, value_name = "DIR")]
    pub kit: Option<PathBuf>,
    /// A bucket URL (s3://..., gs://...) mounted on every node as the results folder
    /// [default: each node keeps ~/iteragpu-fleet].
    #[arg(long, value_name = "URL")]
    pub results: Option<String>,
    /// The task's name.
    #[arg(long, default_value = "iteragpu-fleet")]
    pub name: String,
    /// The task YAML to create; it must not exist yet.
    #[arg(long, value_name = "FILE")]
    pub output: PathBuf,
    /// Print one JSON document (the task written, its nodes and accelerators, the launch line).
    #[arg(long)]
    pub json: bool,
}

/// The `--checks` list, in run order.
#[derive(Debug, Clone)]
pub struct Checks(pub Vec<Check>);

/// Options of `fleet check`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu fleet check /shared/fleet
  iteragpu fleet check /shared/fleet --package b200:7:4 --nodes 4 --json
  iteragpu fleet check /shared/net --expect-busbw 45

Reads DIR/fleet.json (the plan), DIR/fleet.job, DIR/nodes.txt and DIR/<node>/<check>.json,
<check>.exit and <check>.err of every node folder (as `fleet slurm` and `fleet skypilot` lay them
out). The plan is the contract: every node x check must have left a complete document with exit
0, from the plan's job. A missing, empty, partial, failed, killed or cancelled step, another
job's documents, a node name, rank or GPU UUID in two folders, a GPU warning in a node's own
documents (ECC, remapped rows, throttling, power cap, NVLink, below its datasheet share) and an
outlier across nodes are findings, each saying whether it fails the verdict or warns, and why.
Without a plan the verdict says what it could not check. The package is the plan's (GPU plans)
unless --package names one. The collective check is judged over every rank: all present, every
result correct, NCCL not fallen back to sockets, and the all-reduce bus bandwidth at 1 GiB at
least 70% of --expect-busbw (the provider's fabric, which the catalogue does not know: not
checked without it, nor on gloo); in the pair pass a pair under half of the other pairs' median
is named, and a node in every slow pair. Printed: the verdict first, then the findings, the
collective's curve (size, time, algbw, busbw, as nccl-tests prints it) and its pairs, then the
nodes and the table (--table for all of it).
Exit codes: 0 no finding fails the fleet; 1 one does; 2 a DIR that is not a fleet's folder, or
bad options.")]
pub struct CheckArgs {
    /// The fleet's folder: one sub-folder per node.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The rented package the nodes make up in all, GPU:DAYS:LOTS.
    #[arg(long, value_parser = parse_package, value_name = "GPU:DAYS:LOTS")]
    pub package: Option<Package>,
    /// The nodes expected [default: the largest node count the documents give].
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// A tariff CSV to read the package from instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,
    /// A datasheet table instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub datasheet: Option<PathBuf>,
    /// Print the verdict as one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// The plan to hold the nodes to [default: DIR/fleet.json]; `fleet skypilot` writes it
    /// beside the task (`fleet.plan.json` for `fleet.yaml`).
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// The all-reduce bus bandwidth the package's fabric should give at 1 GiB, GB/s, as the
    /// provider states it (a 400 Gb/s InfiniBand or RoCE port per GPU: about 40 to 48); the
    /// collective's bandwidth is not checked without it.
    #[arg(long, value_parser = parse_busbw, value_name = "GB/S")]
    pub expect_busbw: Option<f64>,
    /// Print every node and every row of the node x GPU table [default: at most 16 of each,
    /// the failing ones and the outliers first, the rest summarised per figure].
    #[arg(long)]
    pub table: bool,
}

fn parse_checks(text: &str) -> Result<Checks, String> {
    fleet::parse_checks(text)
        .map(Checks)
        .map_err(|e| e.to_string())
}

fn parse_busbw(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(b) if b.is_finite() && b > 0.0 && b <= 10_000.0 => Ok(b),
        _ => Err(format!(
            "`{text}` is not a bus bandwidth: expected GB/s above 0 and at most 10000, such as 45"
        )),
    }
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && (0.1..=3600.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{text}` is not a time budget: expected seconds from 0.1 to 3600, such as 10"
        )),
    }
}

/// Runs `fleet`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.verb {
        Verb::Slurm(a) => run_slurm(a),
        Verb::Skypilot(a) => run_skypilot(a),
        Verb::Check(a) => run_check(a),
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    })
}

/// The absolute path `path` names once created, without creating anything: its deepest existing
/// folder with links resolved, then the missing names (`.` dropped, `..` taking back the
/// missing name before it, which cannot be a link), so that the script names the folder the nodes will see and a
/// refused run creates no folder.
fn planned_folder(path: &Path) -> anyhow::Result<PathBuf> {
    use std::path::Component;
    let path = absolute(path)?;
    let mut existing = path.as_path();
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        let Some(parent) = existing.parent() else {
            break;
        };
        missing.push(existing.components().next_back());
        existing = parent;
    }
    let mut folder = existing.canonicalize().map_err(|e| {
        usage(format!(
            "cannot use the folder {}: {}",
            existing.display(),
            files::os_message(&e)
        ))
    })?;
    for component in missing.into_iter().rev().flatten() {
        match component {
            Component::Normal(name) => {
                folder.push(name);
            }
            Component::ParentDir => {
                folder.pop();
            }
            _ => {}
        }
    }
    Ok(folder)
}

fn text(path: &Path, what: &str) -> anyhow::Result<String> {
    path.to_str().map(String::from).ok_or_else(|| {
        usage(format!(
            "{what} {} is not valid UTF-8, which a script cannot name",
            path.display()
        ))
    })
}

fn plan(common: &Common, binary: String) -> anyhow::Result<Plan> {
    let e = expectation(Some(&common.package), common.catalogue.as_deref())?
        .ok_or_else(|| usage("--package names no package"))?;
    let checks = common.checks.0.clone();
    let plan = Plan {
        package: e.package,
        model: e.model,
        gpu: e.gpu,
        gpus: e.gpus,
        nodes: common.nodes,
        checks,
        device: if common.device == "cpu" {
            Device::Cpu
        } else {
            Device::Gpu
        },
        probe_seconds: common.probe_seconds,
        binary,
    };
    plan.validate().map_err(|e| usage(e.to_string()))?;
    Ok(plan)
}

/// Whether Slurm knows the partition: `Ok(None)` yes or cannot tell (no `sinfo`), `Ok(Some)`
/// the sentence that refuses it.
fn missing_partition(partition: &str) -> Option<String> {
    let out = std::process::Command::new("sinfo")
        .args(["-h", "-o", "%R"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let known: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    (!known.iter().any(|k| k == partition)).then(|| {
        format!(
            "--partition {partition}: Slurm has no such partition (sinfo lists: {}); nothing was written",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )
    })
}

/// What Slurm says of a finished job: `scontrol show job` (kept a while after the end), `sacct`
/// where accounting runs, and the job's nodes that are down or drained (`sinfo`).
fn slurm_account(job: &str) -> serde_json::Value {
    let run = |tool: &str, args: &[&str]| {
        std::process::Command::new(tool)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|t| !t.is_empty())
    };
    let show = run("scontrol", &["show", "job", "-o", job]).unwrap_or_default();
    let field = |name: &str| {
        show.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
    };
    let nodes: Vec<String> = field("NodeList")
        .filter(|n| n != "(null)")
        .and_then(|n| run("scontrol", &["show", "hostnames", &n]))
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let mut down = Vec::new();
    if !nodes.is_empty() {
        let list = nodes.join(",");
        for line in run("sinfo", &["-h", "-N", "-n", &list, "-o", "%N|%t|%E"])
            .unwrap_or_default()
            .lines()
        {
            let parts: Vec<&str> = line.split('|').collect();
            if let [node, state, reason] = parts[..] {
                let state = state.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
                if ["down", "drain", "drng", "drained", "fail", "failg", "unk"].contains(&state) {
                    down.push(serde_json::json!({"node": node, "state": state, "reason": reason}));
                }
            }
        }
    }
    let sacct = run(
        "sacct",
        &["-j", job, "-n", "-P", "-o", "JobID,State,ExitCode,NodeList"],
    );
    serde_json::json!({
        "job": job,
        "state": field("JobState"),
        "reason": field("Reason"),
        "exit_code": field("ExitCode"),
        "nodes": nodes,
        "down": down,
        "sacct": sacct.map(|t| t.lines().map(str::to_string).collect::<Vec<_>>()),
    })
}

fn run_slurm(args: SlurmArgs) -> anyhow::Result<ExitCode> {
    if args.requeue {
        return Err(usage(
            "--requeue is refused: a requeued job runs again into the same folder, where the first run's files make healthy nodes fail and hide the node that died; the script says --no-requeue, submit again into a new --output instead",
        ));
    }
    let binary = match &args.binary {
        Some(b) => absolute(b)?,
        None => std::env::current_exe()?,
    };
    if !binary.is_file() {
        return Err(usage(format!(
            "--binary {}: no such file (the nodes run the binary at this path, which they must see too)",
            binary.display()
        )));
    }
    let plan = plan(&args.common, text(&binary, "the binary")?)?;
    let allocation = Allocation {
        partition: args.partition.clone(),
        time: args.time.clone(),
    };
    // Every check first, the folder last: a refused run leaves nothing behind.
    let dir = planned_folder(&args.output)?;
    let dir_text = text(&dir, "the folder")?;
    let script = slurm::script(&plan, &allocation, &dir_text).map_err(|e| usage(e.to_string()))?;
    let script_path = dir.join(slurm::SCRIPT);
    // A partition Slurm does not know is refused here too, before the folder (`sinfo`).
    if let Some(p) = &allocation.partition
        && let Some(why) = missing_partition(p)
    {
        return Err(usage(why));
    }
    if dir.exists() {
        files::check_new(&script_path).map_err(|e| {
            usage(format!(
                "{e}: a fleet run writes into a folder of its own; choose a new --output"
            ))
        })?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        usage(format!(
            "cannot create the folder {}: {}",
            args.output.display(),
            files::os_message(&e)
        ))
    })?;
    let _ = files::write_new(&dir.join(slurm::PLAN), plan.to_json().as_bytes())
        .map_err(|e| usage(e.to_string()))?;
    let _ = files::write_new(&script_path, script.as_bytes()).map_err(|e| usage(e.to_string()))?;
    let mut out = String::new();
    if plan.device == Device::Cpu {
        let _ = writeln!(
            out,
            "CPU REFERENCE DEVICE: every node runs the checks on its CPU reference device, not on GPUs"
        );
    }
    let _ = writeln!(
        out,
        "wrote {}: {} on {} node(s), one task per node ({} x {}, {} per node)",
        args.output.join(slurm::SCRIPT).display(),
        plan.checks
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", "),
        plan.nodes,
        plan.gpus,
        plan.model,
        plan.gpus_per_node()
    );
    if !args.submit {
        if args.json {
            output::print_json(&serde_json::json!({
                "schema": "iteragpu.fleet-slurm/1",
                "script": script_path,
                "plan": dir.join(slurm::PLAN),
                "submit": format!("sbatch --wait {}", script_path.display()),
                "submitted": false,
            }))?;
            return Ok(ExitCode::SUCCESS);
        }
        let _ = writeln!(
            out,
            "submit: sbatch --wait {}\nresults: {}/<node>/<check>.json, .exit, .err",
            args.output.join(slurm::SCRIPT).display(),
            args.output.display()
        );
        output::print_text(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.json {
        output::print_text(&out)?;
    }
    let mut child = std::process::Command::new("sbatch")
        .args(["--wait", "--parsable"])
        .arg(&script_path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "could not start sbatch ({}): is Slurm's client installed here?",
                files::os_message(&e)
            )
        })?;
    // `--parsable` prints `JOBID` or `JOBID;CLUSTER` once the job is queued.
    let mut first = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut first);
    }
    let job: Option<String> = first
        .split(';')
        .next()
        .map(|j| j.trim().to_string())
        .filter(|j| !j.is_empty() && j.chars().all(|c| c.is_ascii_digit()));
    let say = |line: &str| {
        // With --json, stdout holds one document: the progress goes to stderr.
        if args.json {
            eprintln!("{line}");
        } else {
            let _ = output::print_text(&format!("{line}\n"));
        }
    };
    if let Some(j) = &job {
        say(&format!("Submitted batch job {j}"));
    }
    // While the job waits, say why, each time Slurm's reason changes (`squeue -h -o %T %r`).
    let mut last = String::new();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Some(j) = &job
            && let Ok(q) = std::process::Command::new("squeue")
                .args(["-h", "-j", j, "-o", "%T %r"])
                .output()
        {
            let now = String::from_utf8_lossy(&q.stdout).trim().to_string();
            if now.starts_with("PENDING") && now != last {
                say(&format!(
                    "job {j} is pending: {}",
                    now.trim_start_matches("PENDING").trim()
                ));
            }
            last = now;
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    };
    let mut out = String::new();
    if let Some(j) = &job {
        let account = slurm_account(j);
        let _ = files::write_new(
            &dir.join(fleet::check::SLURM_ACCOUNT_FILE),
            (serde_json::to_string_pretty(&account)? + "\n").as_bytes(),
        );
    }
    let exits = slurm::read_exits(&dir, &plan.checks);
    let _ = writeln!(
        out,
        "sbatch --wait: {} ({})",
        match status.code() {
            Some(0) => "the job ended with exit 0".to_string(),
            Some(c) => format!("the job ended with exit {c}"),
            None => "sbatch was killed by a signal".to_string(),
        },
        dir.join("slurm-<job>.out").display()
    );
    let _ = writeln!(
        out,
        "{:<16} {}",
        "node",
        plan.checks
            .iter()
            .map(|c| format!("{:<12}", c.name()))
            .collect::<String>()
            .trim_end()
    );
    let mut ok = exits.len() == plan.nodes as usize;
    for node in &exits {
        let mut line = format!("{:<16} ", node.node);
        let mut errors = Vec::new();
        for (check, code, err) in &node.checks {
            let cell = match code {
                Some(c) => format!("exit {c}"),
                None => "not run".to_string(),
            };
            ok &= *code == Some(0);
            if let Some(e) = err.as_ref().filter(|_| *code != Some(0)) {
                errors.push(format!("  {}/{check}: {e}", node.node));
            }
            let _ = write!(line, "{cell:<12}");
        }
        let _ = writeln!(out, "{}", line.trim_end());
        for e in errors {
            let _ = writeln!(out, "{e}");
        }
    }
    if exits.len() != plan.nodes as usize {
        let _ = writeln!(
            out,
            "nodes: {} of the {} asked for wrote results",
            exits.len(),
            plan.nodes
        );
    }
    let _ = writeln!(
        out,
        "exit codes: {}\n",
        if ok {
            "every node ran every check with exit 0"
        } else {
            "FAILED: a node's check failed or did not run"
        }
    );
    let options = CheckOptions {
        // The CPU reference device has no GPU to hold to the package.
        package: match plan.device {
            Device::Gpu => {
                expectation(Some(&args.common.package), args.common.catalogue.as_deref())?
            }
            Device::Cpu => None,
        },
        nodes: Some(plan.nodes),
        ..CheckOptions::default()
    };
    let verdict = fleet::check::check(&dir, &options).map_err(|e| anyhow::anyhow!("{e}"))?;
    let success = ok && status.success() && verdict.exit_code() == 0;
    if args.json {
        output::print_json(&serde_json::json!({
            "schema": "iteragpu.fleet-slurm/1",
            "script": script_path,
            "plan": dir.join(slurm::PLAN),
            "submitted": true,
            "job": job,
            "sbatch_exit_code": status.code(),
            "verdict": verdict,
            "ok": success,
        }))?;
    } else {
        output::print_text(&out)?;
        output::print_text(&fleet::check::render(&verdict, false))?;
    }
    Ok(if success {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The package a fleet check holds the nodes to: `--package`, else the plan's when it runs on
/// GPUs; the sentence says why none when the plan's cannot be read from the catalogue.
fn check_package(
    given: Option<&Package>,
    catalogue: Option<&Path>,
    plan: Option<&Plan>,
) -> anyhow::Result<(Option<lab::lot::Expectation>, Option<String>)> {
    if given.is_some() {
        return Ok((expectation(given, catalogue)?, None));
    }
    let Some(plan) = plan.filter(|p| p.device == Device::Gpu) else {
        return Ok((None, None));
    };
    let resolved = parse_package(&plan.package)
        .map_err(|e| anyhow::anyhow!(e))
        .and_then(|p| expectation(Some(&p), catalogue));
    Ok(match resolved {
        Ok(e) => (e, None),
        Err(e) => (
            None,
            Some(format!(
                "the plan's package {}: {e} (give --package or --catalogue)",
                plan.package
            )),
        ),
    })
}

fn run_check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let plan = match &args.plan {
        Some(f) => fleet::check::read_plan_file(f).ok().flatten(),
        None => fleet::check::read_plan(&args.dir).ok().flatten(),
    };
    let (package, why_not) = check_package(
        args.package.as_ref(),
        args.catalogue.as_deref(),
        plan.as_ref(),
    )?;
    let options = CheckOptions {
        package,
        datasheet: Datasheet::load(args.datasheet.as_deref())?,
        nodes: args.nodes,
        plan: args.plan.clone(),
        expected_busbw_gb_s: args.expect_busbw,
        ..CheckOptions::default()
    };
    let mut verdict = fleet::check::check(&args.dir, &options).map_err(|e| usage(e.to_string()))?;
    if let Some(why) = why_not {
        verdict
            .not_checked
            .retain(|n| !n.starts_with("the package"));
        verdict.not_checked.push(why);
    }
    if args.json {
        output::print_json(&verdict)?;
    } else {
        output::print_text(&fleet::check::render(&verdict, args.table))?;
    }
    Ok(ExitCode::from(verdict.exit_code()))
}

fn run_skypilot(args: SkypilotArgs) -> anyhow::Result<ExitCode> {
    let plan = plan(&args.common, "iteragpu".to_string())?;
    files::check_new(&args.output).map_err(|e| usage(e.to_string()))?;
    let install = match (&args.wheel, &args.kit) {
        (Some(w), _) => {
            if !w.is_file() {
                return Err(usage(format!("--wheel {}: no such file", w.display())));
            }
            Install::Wheel(text(&absolute(w)?, "--wheel")?)
        }
        (None, Some(k)) => {
            if !k.join("bin").is_dir() {
                return Err(usage(format!(
                    "--kit {}: not a kit folder (it has no bin/)",
                    k.display()
                )));
            }
            Install::Kit(text(&absolute(k)?, "--kit")?)
        }
        (None, None) => unreachable!("clap requires --wheel or --kit"),
    };
    let task = Task {
        install,
        results: args.results.clone(),
        name: args.name.clone(),
    };
    let yaml = fleet::skypilot::task(&plan, &task).map_err(|e| usage(e.to_string()))?;
    let fetch = fleet::skypilot::fetch_command(&plan, &task, "fleet", "fleet-results")
        .map_err(|e| usage(e.to_string()))?;
    // The plan beside the task: `fleet check DIR --plan` holds the rsynced results to it.
    let plan_path = args.output.with_extension("plan.json");
    files::check_new(&plan_path).map_err(|e| usage(e.to_string()))?;
    let _ = files::write_new(&args.output, yaml.as_bytes()).map_err(|e| usage(e.to_string()))?;
    let _ = files::write_new(&plan_path, plan.to_json().as_bytes())
        .map_err(|e| usage(e.to_string()))?;
    if args.json {
        output::print_json(&serde_json::json!({
            "schema": "iteragpu.fleet-skypilot/1",
            "task": args.output,
            "nodes": plan.nodes,
            "accelerators": (plan.device == Device::Gpu)
                .then(|| format!("{}:{}", plan.gpu.to_ascii_uppercase(), plan.gpus_per_node())),
            "device": plan.device,
            "checks": plan.checks,
            "plan": plan_path,
            "launch": format!("sky launch -c fleet {}", args.output.display()),
            "fetch": fetch,
            "check": format!("iteragpu fleet check fleet-results --plan {}", plan_path.display()),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    if plan.device == Device::Cpu {
        let _ = writeln!(
            out,
            "CPU REFERENCE DEVICE: every node runs the checks on its CPU reference device, not on GPUs"
        );
    }
    let _ = writeln!(
        out,
        "wrote {}: {} node(s){}, {}\nlaunch: sky launch -c fleet {}\nfetch: {fetch}\ncheck: iteragpu fleet check fleet-results --plan {}",
        args.output.display(),
        plan.nodes,
        if plan.device == Device::Gpu {
            format!(
                " of {}:{}",
                plan.gpu.to_ascii_uppercase(),
                plan.gpus_per_node()
            )
        } else {
            String::new()
        },
        plan.checks
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", "),
        args.output.display(),
        plan_path.display()
    );
    output::print_text(&out)?;
    Ok(ExitCode::SUCCESS)
}
