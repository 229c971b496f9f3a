//! The SkyPilot task: `num_nodes` nodes with the package's share of GPUs each
//! (`resources.accelerators: B200:2`), a `setup` that installs the portable binary from the
//! wheel or the kit, and a `run` that runs the checks on every node into
//! `<results>/<rank>/<check>.json` (rank = `SKYPILOT_NODE_RANK`), with the same `.exit`,
//! `.err`, `.stdout` and `.stderr` files as [`crate::slurm`]'s layout.

use std::fmt::Write as _;

use crate::quote;
use crate::{Device, Error, Plan};

/// Where the binary comes from on the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Install {
    /// A local wheel file (`iteragpu-<version>-py3-none-manylinux_2_28_<arch>.whl`), copied to
    /// every node and unpacked there with `python3 -m zipfile`: no pip, so images whose system
    /// Python refuses `pip install --user` (PEP 668) or has no pip install it all the same.
    Wheel(String),
    /// A local kit folder holding `bin/<target>/iteragpu`, copied to every node.
    Kit(String),
}

/// Options of the task itself.
#[derive(Debug, Clone)]
pub struct Task {
    /// How the nodes get the binary.
    pub install: Install,
    /// A bucket URL (`s3://bucket/path`, `gs://...`) mounted at the results folder on every
    /// node, so that every node's folder lands in one place; without it each node keeps its
    /// own under `~/iteragpu-fleet`.
    pub results: Option<String>,
    /// The SkyPilot task's name.
    pub name: String,
}

/// The results folder on a node when a bucket is mounted.
pub const MOUNTED_RESULTS: &str = "/iteragpu-fleet";
/// The results folder on a node without a bucket.
pub const LOCAL_RESULTS: &str = "~/iteragpu-fleet";
/// Where the setup puts the binary unpacked from the wheel.
pub const WHEEL_BIN: &str = "~/iteragpu-bin/iteragpu";

/// The one shell line that brings every node's folder into `dir` on the machine that ran
/// `sky launch -c CLUSTER`, for `fleet check dir --plan`: the bucket's folder when the results
/// went to one, else an rsync from each node over the SSH names SkyPilot writes (`CLUSTER` for
/// rank 0, `CLUSTER-worker1` onwards for the others). Every rank writes its own `<rank>/`
/// folder, so the copies never overwrite one another.
pub fn fetch_command(plan: &Plan, task: &Task, cluster: &str, dir: &str) -> Result<String, Error> {
    let to = quote::shell("the results folder", &format!("{dir}/"))?;
    if let Some(url) = &task.results {
        let from = quote::shell("--results", &format!("{}/", url.trim_end_matches('/')))?;
        return Ok(if url.starts_with("gs://") {
            format!("mkdir -p {to} && gcloud storage rsync -r {from} {to}")
        } else if url.starts_with("s3://") {
            format!("mkdir -p {to} && aws s3 sync {from} {to}")
        } else {
            format!("mkdir -p {to} && copy the bucket {from} into {to} with its own tool")
        });
    }
    let cluster = quote::shell("the cluster name", cluster)?;
    let mut line = format!("mkdir -p {to} && rsync -a {cluster}:iteragpu-fleet/ {to}");
    if plan.nodes > 1 {
        let _ = write!(
            line,
            " && for i in $(seq 1 {}); do rsync -a {cluster}-worker$i:iteragpu-fleet/ {to} || break; done",
            plan.nodes - 1
        );
    }
    Ok(line)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The task YAML for `plan`.
pub fn task(plan: &Plan, task: &Task) -> Result<String, Error> {
    plan.validate()?;
    if task.name.is_empty()
        || !task
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(Error::Value {
            what: "--name",
            value: task.name.clone(),
            why: "is not a task name: letters, digits and `-` only",
        });
    }
    if let Install::Wheel(w) = &task.install
        && !file_name(w).ends_with(".whl")
    {
        return Err(Error::Value {
            what: "--wheel",
            value: w.clone(),
            why: "is not a wheel file (its name must end in .whl)",
        });
    }
    // Every value from outside, quoted (or refused) before a line is written.
    let package = quote::yaml("--package", &plan.package)?;
    let model = quote::yaml("the catalogue's model name", &plan.model)?;
    let name = quote::yaml("--name", &task.name)?;
    let accelerators = quote::yaml(
        "the catalogue's GPU key",
        &format!("{}:{}", plan.gpu.to_ascii_uppercase(), plan.gpus_per_node()),
    )?;
    let mounts = match &task.install {
        Install::Wheel(w) => (
            quote::yaml("--wheel", &format!("~/iteragpu-dist/{}", file_name(w)))?,
            quote::yaml("--wheel", w)?,
        ),
        Install::Kit(k) => (
            quote::yaml("--kit", "~/iteragpu-kit")?,
            quote::yaml("--kit", k)?,
        ),
    };
    let results_source = match &task.results {
        Some(url) => Some(quote::yaml("--results", url)?),
        None => None,
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
    let mut y = String::new();
    let checks: Vec<&str> = plan.checks.iter().map(|c| c.name()).collect();
    let _ = writeln!(
        y,
        "# Written by `iteragpu fleet skypilot`: {} on each of {} node(s) for the package {} \
         ({} x {}, {} per node).",
        checks.join(", "),
        plan.nodes,
        package,
        plan.gpus,
        model,
        plan.gpus_per_node()
    );
    if plan.device == Device::Cpu {
        let _ = writeln!(
            y,
            "# CPU REFERENCE DEVICE: every check opens the CPU reference device, not the GPUs."
        );
    }
    let results = match &task.results {
        Some(_) => MOUNTED_RESULTS,
        None => LOCAL_RESULTS,
    };
    let _ = writeln!(
        y,
        "# Launch: sky launch -c fleet THIS.yaml. Each node writes {results}/<rank>/<check>.json, \
         .exit, .err (when the exit code is not 0), .stdout, .stderr; rank is SKYPILOT_NODE_RANK."
    );
    if task.results.is_none() {
        let _ = writeln!(
            y,
            "# Without --results each node keeps its own folder: bring them into one with {}",
            fetch_command(plan, task, "fleet", "DIR")?
        );
    }
    let _ = writeln!(y, "name: {name}");
    let _ = writeln!(y, "num_nodes: {}", plan.nodes);
    if plan.device == Device::Gpu {
        let _ = writeln!(y, "resources:");
        let _ = writeln!(y, "  accelerators: {accelerators}");
    }
    let _ = writeln!(y, "file_mounts:");
    let _ = writeln!(y, "  {}: {}", mounts.0, mounts.1);
    let (setup_install, bin) = match &task.install {
        Install::Wheel(w) => (
            // A wheel is a zip holding `<name>.data/scripts/iteragpu`: unpacked by Python's own
            // zipfile module, nothing else is needed on the image.
            format!(
                "rm -rf ~/iteragpu-wheel && python3 -m zipfile -e ~/iteragpu-dist/{} ~/iteragpu-wheel \
                 && mkdir -p ~/iteragpu-bin && install -m 755 ~/iteragpu-wheel/*.data/scripts/iteragpu {WHEEL_BIN}",
                quote::shell("--wheel", file_name(w))?
            ),
            WHEEL_BIN.to_string(),
        ),
        Install::Kit(_) => (
            "chmod +x ~/iteragpu-kit/bin/*/iteragpu".to_string(),
            "~/iteragpu-kit/bin/\"$(uname -m)\"-unknown-linux-gnu/iteragpu".to_string(),
        ),
    };
    if let Some(source) = &results_source {
        let _ = writeln!(y, "  {MOUNTED_RESULTS}:");
        let _ = writeln!(y, "    source: {source}");
        let _ = writeln!(y, "    mode: MOUNT");
    }
    let _ = writeln!(y, "setup: |");
    let _ = writeln!(y, "  set -euo pipefail");
    let _ = writeln!(y, "  {setup_install}");
    let _ = writeln!(y, "  {bin} --version");
    let _ = writeln!(y, "run: |");
    let _ = writeln!(y, "  set -u");
    let _ = writeln!(y, "  BIN={bin}");
    let _ = writeln!(y, "  out={results}/$SKYPILOT_NODE_RANK");
    let _ = writeln!(y, "  mkdir -p \"$out\" && cd \"$out\" || exit 1");
    let _ = writeln!(y, "  failed=0");
    for (check, args) in steps {
        let limit = plan.step_seconds(check);
        if check == crate::Check::Collective {
            // One rank per GPU of the node (one on the CPU device), all at once; the node's
            // first rank keeps the check's name. No pair pass: SkyPilot runs one `run` per
            // node, with no step over two of them.
            let k = plan.ranks_per_node();
            let _ = writeln!(
                y,
                "  rm -f collective*.exit collective*.err collective*.json"
            );
            let _ = writeln!(y, "  for l in $(seq 0 {}); do", k - 1);
            let _ = writeln!(y, "    s=collective; [ \"$l\" = 0 ] || s=collective.$l");
            let _ = writeln!(
                y,
                "    (LOCAL_RANK=$l SKYPILOT_NUM_GPUS_PER_NODE={k} timeout --kill-after=10 {limit} \"$BIN\" {} --output \"$s.json\" >\"$s.stdout\" 2>\"$s.stderr\"; rc=$?; echo \"$rc\" >\"$s.exit\"; if [ \"$rc\" -ne 0 ]; then (grep -m1 -i error \"$s.stderr\" || tail -n 1 \"$s.stderr\" || echo \"exit $rc\") | head -n 1 >\"$s.err\"; fi; exit \"$rc\") &",
                args.join(" ")
            );
            let _ = writeln!(y, "  done");
            let _ = writeln!(y, "  for p in $(jobs -p); do wait \"$p\" || failed=1; done");
            continue;
        }
        let (stdout, name) = match check {
            crate::Check::Environment => (format!("{check}.json"), check.name()),
            _ => (format!("{check}.stdout"), check.name()),
        };
        let _ = writeln!(y, "  rm -f {name}.exit {name}.err");
        let _ = writeln!(
            y,
            "  timeout --kill-after=10 {limit} \"$BIN\" {} >{stdout} 2>{name}.stderr",
            args.join(" ")
        );
        let _ = writeln!(y, "  rc=$?; echo \"$rc\" >{name}.exit");
        let _ = writeln!(
            y,
            "  if [ \"$rc\" -ne 0 ]; then failed=1; (grep -m1 -i error {name}.stderr || tail -n 1 {name}.stderr || echo \"exit $rc\") | head -n 1 >{name}.err; fi"
        );
    }
    let _ = writeln!(y, "  exit \"$failed\"");
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::plan;

    fn wheel() -> Task {
        Task {
            install: Install::Wheel(
                "dist/iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl".to_string(),
            ),
            results: None,
            name: "iteragpu-fleet".to_string(),
        }
    }

    #[test]
    fn the_collective_starts_one_rank_per_gpu_and_the_run_is_valid_bash() {
        let y = task(&plan(Device::Gpu), &wheel()).unwrap();
        assert!(y.contains("  for l in $(seq 0 1); do\n"), "{y}");
        assert!(
            y.contains("LOCAL_RANK=$l SKYPILOT_NUM_GPUS_PER_NODE=2 timeout --kill-after=10 900 \"$BIN\" collective --backend nccl"),
            "{y}"
        );
        let run: String = y
            .split("\nrun: |\n")
            .nth(1)
            .unwrap()
            .lines()
            .map(|l| l.strip_prefix("  ").unwrap_or(l).to_string() + "\n")
            .collect();
        if let Ok(status) = std::process::Command::new("bash")
            .args(["-n", "-c", &run])
            .status()
        {
            assert!(status.success(), "bash -n refused the run:\n{run}");
        }
    }

    #[test]
    fn nodes_and_accelerators_per_node() {
        let y = task(&plan(Device::Gpu), &wheel()).unwrap();
        assert!(y.contains("num_nodes: 4\n"), "{y}");
        assert!(
            y.contains("resources:\n  accelerators: \"B200:2\"\n"),
            "{y}"
        );
        assert!(
            y.contains("out=~/iteragpu-fleet/$SKYPILOT_NODE_RANK\n"),
            "{y}"
        );
        assert!(!y.contains("pip install"), "{y}");
        assert!(
            y.contains(
                "python3 -m zipfile -e ~/iteragpu-dist/iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl ~/iteragpu-wheel"
            ),
            "{y}"
        );
        assert!(y.contains("  BIN=~/iteragpu-bin/iteragpu\n"), "{y}");
        assert!(y.contains(" >environment.json 2>environment.stderr"), "{y}");
        assert!(
            y.contains("probe --device all --package b200:7:4 --seconds 10 --output probe.json"),
            "{y}"
        );
    }

    #[test]
    fn a_kit_and_a_bucket() {
        let t = Task {
            install: Install::Kit("/home/me/kit".to_string()),
            results: Some("s3://my-bucket/fleet".to_string()),
            name: "check".to_string(),
        };
        let y = task(&plan(Device::Cpu), &t).unwrap();
        assert!(y.contains("\"~/iteragpu-kit\": \"/home/me/kit\""), "{y}");
        assert!(
            y.contains(
                "  /iteragpu-fleet:\n    source: \"s3://my-bucket/fleet\"\n    mode: MOUNT\n"
            ),
            "{y}"
        );
        assert!(y.contains("CPU REFERENCE DEVICE"), "{y}");
        assert!(!y.contains("accelerators"), "{y}");
    }

    #[test]
    fn every_node_folder_is_fetched_into_one() {
        let p = plan(Device::Gpu);
        assert_eq!(
            fetch_command(&p, &wheel(), "fleet", "results").unwrap(),
            "mkdir -p results/ && rsync -a fleet:iteragpu-fleet/ results/ && for i in $(seq 1 3); \
             do rsync -a fleet-worker$i:iteragpu-fleet/ results/ || break; done"
        );
        let mut one = plan(Device::Gpu);
        one.nodes = 1;
        one.gpus = 2;
        assert_eq!(
            fetch_command(&one, &wheel(), "c", "a b").unwrap(),
            "mkdir -p 'a b/' && rsync -a c:iteragpu-fleet/ 'a b/'"
        );
        let mut t = wheel();
        t.results = Some("s3://bucket/fleet/".to_string());
        assert_eq!(
            fetch_command(&p, &t, "fleet", "r").unwrap(),
            "mkdir -p r/ && aws s3 sync s3://bucket/fleet/ r/"
        );
        t.results = Some("gs://bucket/fleet".to_string());
        assert_eq!(
            fetch_command(&p, &t, "fleet", "r").unwrap(),
            "mkdir -p r/ && gcloud storage rsync -r gs://bucket/fleet/ r/"
        );
    }

    #[test]
    fn a_file_that_is_not_a_wheel_is_refused() {
        let mut t = wheel();
        t.install = Install::Wheel("iteragpu.tar.gz".to_string());
        assert!(task(&plan(Device::Gpu), &t).is_err());
        let mut t = wheel();
        t.name = "a b".to_string();
        assert!(task(&plan(Device::Gpu), &t).is_err());
    }
}
