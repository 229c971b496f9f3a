//! IteraGPU Lab on several machines. A package of several lots is often several nodes (4 lots of
//! 2 B200 are 8 GPUs, on 2 to 4 nodes), and a scheduler hands them out: this crate writes what
//! runs the checks (`environment`, `probe`, `measure`) exactly once on every node, the
//! `collective` check once over every GPU of every node (then over pairs of nodes), and where
//! each node puts its results.
//!
//! - [`slurm`]: the sbatch script (`--nodes=N --ntasks-per-node=1`, one `srun` step per check).
//! - [`check`]: `fleet check DIR`, every node's documents, exit codes and errors judged together
//!   (one table of node x GPU, failed or missing nodes, the package, outliers across nodes).
//! - [`skypilot`]: the SkyPilot task YAML (`num_nodes`, accelerators per node, `setup`, `run`).
//! - [`quote`]: the one way a value enters either file, one function per format (shell word,
//!   YAML scalar, `#SBATCH` value), refusing line breaks and other control characters.
//!
//! Both lay out their results the same way, one folder per node ([`Plan`] and the module
//! [`slurm`] say which files). This crate writes text and reads exit codes; it starts no
//! process (the binary submits) and holds no measurement (that is `lab`).

#![forbid(unsafe_code)]

pub mod check;
pub mod quote;
pub mod skypilot;
pub mod slurm;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The plan document beside the node folders, written by `fleet slurm` and `fleet skypilot`
/// before any node runs: what `fleet check` holds the nodes to.
pub const PLAN_FILE: &str = "fleet.json";
/// The job's id, written by the job itself (the batch script, or every SkyPilot node) before
/// its first check: the documents of another job in the folder are foreign.
pub const JOB_FILE: &str = "fleet.job";
/// The schema of [`PLAN_FILE`].
pub const PLAN_SCHEMA: &str = "iteragpu.fleet-plan.v1";

/// One check every node runs, in this order when several are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Check {
    /// `iteragpu environment --json`: the driver, the libraries and every GPU of the node.
    Environment,
    /// `iteragpu probe`: copy bandwidth and matrix throughput of every GPU of the node.
    Probe,
    /// `iteragpu measure`: the small synthetic model on the node's first GPU.
    Measure,
    /// `iteragpu collective`: one all-reduce and all-gather run over every GPU of every node
    /// (one rank per GPU; one per node on the CPU device), then one run per pair of
    /// neighbouring nodes, so that a slow node or link can be named.
    Collective,
}

impl Check {
    /// Every check, in the order they run.
    pub const ALL: [Check; 4] = [
        Check::Environment,
        Check::Probe,
        Check::Measure,
        Check::Collective,
    ];

    /// The check's name, which is also its files' stem (`probe.json`, `probe.exit`).
    pub fn name(self) -> &'static str {
        match self {
            Check::Environment => "environment",
            Check::Probe => "probe",
            Check::Measure => "measure",
            Check::Collective => "collective",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Check {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Check::ALL
            .into_iter()
            .find(|c| c.name() == s.trim())
            .ok_or_else(|| Error::UnknownCheck(s.to_string()))
    }
}

/// Parses `environment,probe,measure,collective` (any subset, any order, no repeats) into run order.
pub fn parse_checks(text: &str) -> Result<Vec<Check>, Error> {
    let mut checks = Vec::new();
    for part in text.split(',') {
        let check: Check = part.parse()?;
        if checks.contains(&check) {
            return Err(Error::RepeatedCheck(check.name()));
        }
        checks.push(check);
    }
    checks.sort();
    Ok(checks)
}

/// Which device the checks open on every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// Every GPU of the node (`environment --device all`, `probe --device all`, `measure
    /// --device cuda:0`).
    Gpu,
    /// The CPU reference device on every node (each document says so): for checking the
    /// scheduler's side without GPUs, never a figure of the rented GPUs.
    Cpu,
}

/// What one fleet run is: the package, its nodes and what each node runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The package as written, `GPU:DAYS:LOTS` (`b200:7:4`).
    pub package: String,
    /// The catalogue's model name (`NVIDIA B200`).
    pub model: String,
    /// The catalogue's GPU key (`b200`), upper-cased for SkyPilot's accelerator name.
    pub gpu: String,
    /// GPUs the package promises in all (gpus per lot x lots).
    pub gpus: u64,
    /// Nodes the GPUs are spread over; `gpus` is a multiple of it.
    pub nodes: u32,
    /// The checks, in run order.
    pub checks: Vec<Check>,
    /// The device the checks open.
    pub device: Device,
    /// Seconds `probe` may take per GPU.
    pub probe_seconds: f64,
    /// The iteragpu binary the nodes run (an absolute path every node sees).
    pub binary: String,
}

impl Plan {
    /// Checks the plan: at least one node and one check, and GPUs that share out evenly.
    pub fn validate(&self) -> Result<(), Error> {
        if self.nodes == 0 || self.nodes > 4096 {
            return Err(Error::Nodes(self.nodes));
        }
        if self.checks.is_empty() {
            return Err(Error::NoCheck);
        }
        if !self.gpus.is_multiple_of(u64::from(self.nodes)) || self.gpus < u64::from(self.nodes) {
            return Err(Error::Uneven {
                package: self.package.clone(),
                gpus: self.gpus,
                nodes: self.nodes,
            });
        }
        Ok(())
    }

    /// The GPUs each node must hold.
    pub fn gpus_per_node(&self) -> u64 {
        self.gpus / u64::from(self.nodes.max(1))
    }

    /// The seconds one check may take on a node before `timeout` ends it (exit 124).
    pub fn step_seconds(&self, check: Check) -> u64 {
        match check {
            Check::Environment => 120,
            // The budget per GPU one after the other, plus the set-up the budget leaves out
            // (driver, writing the copy buffers): 5 minutes is generous for 256 MiB buffers.
            Check::Probe => {
                let gpus = match self.device {
                    Device::Gpu => self.gpus_per_node().max(1),
                    Device::Cpu => 1,
                };
                (self.probe_seconds * gpus as f64 * 1.2).ceil() as u64 + 300
            }
            Check::Measure => 600,
            // 28 sizes to 1 GiB, 25 calls each: well under a minute on a healthy fabric, a
            // few minutes over TCP sockets; the rendezvous waits at most 120 s of it.
            Check::Collective => match self.device {
                Device::Gpu => 900,
                Device::Cpu => 300,
            },
        }
    }

    /// The ranks the collective check starts on each node: one per GPU, one on the CPU device.
    pub fn ranks_per_node(&self) -> u64 {
        match self.device {
            Device::Gpu => self.gpus_per_node().max(1),
            Device::Cpu => 1,
        }
    }

    /// The command line of one check, run in the node's own folder, after the binary: its
    /// document goes to `<check>.json` there (`environment` prints it on stdout, which the
    /// step sends to that file).
    pub fn arguments(&self, check: Check) -> Vec<String> {
        let cpu = self.device == Device::Cpu;
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        match check {
            // On GPUs the lot checks hold each node to its share of the package (the node
            // count comes from the scheduler's variables); the CPU device has no lot.
            Check::Environment => {
                let mut a = s(&["environment", "--device", if cpu { "cpu" } else { "all" }]);
                if !cpu {
                    a.extend(["--package".to_string(), self.package.clone()]);
                }
                a.push("--json".to_string());
                a
            }
            Check::Probe => {
                let mut a = s(&["probe", "--device", if cpu { "cpu" } else { "all" }]);
                if !cpu {
                    a.extend(["--package".to_string(), self.package.clone()]);
                }
                a.extend(["--seconds".to_string(), format!("{}", self.probe_seconds)]);
                if cpu {
                    // Host memcpy only: small buffers keep the set-up short on a shared host.
                    a.extend(s(&["--copy-bytes", "64MiB"]));
                }
                a.extend(s(&["--output", "probe.json"]));
                a
            }
            // A small shape: it checks that the device runs the model and that its memory
            // counters add up, in seconds, not a benchmark.
            Check::Measure => s(&[
                "measure",
                "--device",
                if cpu { "cpu" } else { "cuda:0" },
                "--batch",
                "4",
                "--context",
                "256",
                "--width",
                "512",
                "--repeats",
                "3",
                "--output",
                "measure.json",
            ]),
            // The rendezvous port and the document's file are the step's: it adds `--port`
            // and `--output` per run (the whole fleet, then each pair).
            Check::Collective => {
                let mut a = s(&["collective"]);
                if cpu {
                    // gloo over loopback or TCP: the program and the scheduler's side are
                    // checked, never a fabric's bandwidth; small sizes keep it short.
                    a.extend(s(&[
                        "--backend",
                        "gloo",
                        "--max-bytes",
                        "64KiB",
                        "--warmup",
                        "2",
                        "--iters",
                        "5",
                    ]));
                } else {
                    a.extend(s(&["--backend", "nccl", "--max-bytes", "1GiB"]));
                }
                a.extend([
                    "--rendezvous-timeout".to_string(),
                    "120".to_string(),
                    "--timeout".to_string(),
                    format!("{}", self.step_seconds(check).saturating_sub(10)),
                ]);
                a
            }
        }
    }

    /// The plan as the JSON document `fleet.json` beside the node folders.
    pub fn to_json(&self) -> String {
        let mut value = serde_json::to_value(self).expect("a plan serialises");
        if let Some(map) = value.as_object_mut() {
            map.insert("schema".to_string(), serde_json::Value::from(PLAN_SCHEMA));
            map.insert(
                "gpus_per_node".to_string(),
                serde_json::Value::from(self.gpus_per_node()),
            );
            map.insert(
                "device_note".to_string(),
                serde_json::Value::from(match self.device {
                    Device::Gpu => "the GPUs of every node",
                    Device::Cpu => {
                        "CPU REFERENCE DEVICE on every node: no GPU figure, checks the scheduler's side only"
                    }
                }),
            );
        }
        serde_json::to_string_pretty(&value).expect("a value serialises") + "\n"
    }
}

/// What a fleet plan or its options got wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A check name that is not one of environment, probe, measure, collective.
    #[error(
        "`{0}` is not a check: expected environment, probe, measure or collective, comma-separated"
    )]
    UnknownCheck(String),
    /// A check named twice.
    #[error("the check {0} is named twice")]
    RepeatedCheck(&'static str),
    /// No check at all.
    #[error("no check to run: name at least one of environment, probe, measure, collective")]
    NoCheck,
    /// A node count out of range.
    #[error("{0} nodes: expected 1 to 4096")]
    Nodes(u32),
    /// GPUs that do not share out evenly over the nodes.
    #[error(
        "the package {package} is {gpus} GPU(s), which {nodes} nodes cannot hold evenly: choose a node count that divides {gpus}"
    )]
    Uneven {
        /// The package.
        package: String,
        /// Its GPUs.
        gpus: u64,
        /// The node count asked for.
        nodes: u32,
    },
    /// A value that would break the script it goes into; the value is shown with its control
    /// characters escaped, so the message stays one line.
    #[error("{what} `{}` {why}", lab_io::text::printable(.value))]
    Value {
        /// Which option.
        what: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn plan(device: Device) -> Plan {
        Plan {
            package: "b200:7:4".to_string(),
            model: "NVIDIA B200".to_string(),
            gpu: "b200".to_string(),
            gpus: 8,
            nodes: 4,
            checks: Check::ALL.to_vec(),
            device,
            probe_seconds: 10.0,
            binary: "/opt/iteragpu/bin/iteragpu".to_string(),
        }
    }

    #[test]
    fn checks_parse_into_run_order() {
        assert_eq!(
            parse_checks("measure,environment").unwrap(),
            vec![Check::Environment, Check::Measure]
        );
        assert!(matches!(
            parse_checks("probe,probe"),
            Err(Error::RepeatedCheck("probe"))
        ));
        assert!(matches!(parse_checks("nccl"), Err(Error::UnknownCheck(_))));
        assert_eq!(
            parse_checks("collective,environment").unwrap(),
            vec![Check::Environment, Check::Collective]
        );
    }

    #[test]
    fn the_collective_runs_nccl_on_gpus_and_gloo_on_the_cpu_device() {
        let g = plan(Device::Gpu).arguments(Check::Collective).join(" ");
        assert!(
            g.starts_with("collective --backend nccl --max-bytes 1GiB "),
            "{g}"
        );
        assert_eq!(plan(Device::Gpu).ranks_per_node(), 2);
        let c = plan(Device::Cpu).arguments(Check::Collective).join(" ");
        assert!(c.contains("--backend gloo --max-bytes 64KiB"), "{c}");
        assert_eq!(plan(Device::Cpu).ranks_per_node(), 1);
    }

    #[test]
    fn gpus_share_out_evenly_or_the_plan_is_refused() {
        let mut p = plan(Device::Gpu);
        p.validate().unwrap();
        assert_eq!(p.gpus_per_node(), 2);
        p.nodes = 3;
        let e = p.validate().unwrap_err().to_string();
        assert!(
            e.contains("8 GPU(s), which 3 nodes cannot hold evenly"),
            "{e}"
        );
        p.nodes = 16;
        assert!(p.validate().is_err());
    }

    #[test]
    fn the_cpu_plan_says_so_in_its_document() {
        let json = plan(Device::Cpu).to_json();
        assert!(json.contains("CPU REFERENCE DEVICE"), "{json}");
        assert!(json.contains("\"gpus_per_node\": 2"), "{json}");
    }
}
