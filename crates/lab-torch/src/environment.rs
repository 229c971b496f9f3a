//! `environment --engine torch`: the GPUs as the machine's PyTorch sees them (CUDA or ROCm), for
//! machines whose GPUs the native engine cannot open (an AMD MI300X). The Python side is
//! [`ENVIRONMENT_PROGRAM`] (`environment.py` beside this file), carried like the measurement
//! program; it prints one [`Scan`], which the caller turns into the same environment and lot
//! documents as the native engine's, checked by the same lot rules.

use std::path::Path;

use lab::environment::{ENVIRONMENT_SCHEMA, Environment, EnvironmentEngine};
use lab::lot::{GpuFacts, LotDevice, PeerAccess};
use lab::tool::ToolInfo;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{TorchError, run_program};

/// The diagnosis program, the one copy.
pub const ENVIRONMENT_PROGRAM: &str = include_str!("environment.py");

/// The most the program may print: a few KB per GPU.
pub const SCAN_LIMIT: u64 = 4 << 20;

/// Which GPUs the program describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    /// Every GPU torch sees.
    All,
    /// These ordinals (`cuda:N`, as torch numbers them on ROCm too).
    Ordinals(Vec<usize>),
}

/// What the program printed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Scan {
    /// torch, its version and build, the interpreter.
    pub engine: EnvironmentEngine,
    /// `torch-cuda`, `torch-rocm`, or `torch-cpu-test-only` (the test switch, never a product
    /// path).
    pub backend: String,
    /// GPUs torch sees (0 when `torch.cuda.is_available()` is false).
    pub visible: Option<usize>,
    /// Why the GPUs asked for could not all be described, in a sentence.
    pub problem: Option<String>,
    /// The management library (the AMD SMI library on ROCm), or why there is none.
    pub management: Option<Value>,
    /// One entry per GPU asked for that exists.
    pub devices: Vec<ScanDevice>,
    /// `torch.cuda.can_device_access_peer` for every ordered pair.
    pub peers: Vec<PeerAccess>,
}

/// One GPU as the program described it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ScanDevice {
    /// `cuda:N`.
    pub device: String,
    /// Whether torch could open it.
    pub usable: bool,
    /// Why not.
    pub problem: Option<String>,
    /// What torch and the management library said (`unavailable (why)` where they could not).
    pub details: Value,
    /// The typed facts the lot checks read (absent when the GPU could not be described).
    pub facts: Option<GpuFacts>,
}

impl Scan {
    /// Whether the program ran on torch's CPU device through the test switch.
    pub fn test_only(&self) -> bool {
        self.backend == "torch-cpu-test-only"
    }

    /// The details every report of this scan starts with: the engine, named as a `measure
    /// --engine torch` document's environment names it.
    fn engine_details(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("engine".into(), json!("torch"));
        m.insert("torch".into(), json!(self.engine.version));
        m.insert("torch_build".into(), json!(self.engine.build));
        m.insert("python".into(), json!(self.engine.python));
        m.insert("visible_devices".into(), json!(self.visible));
        m.insert(
            "management".into(),
            self.management.clone().unwrap_or(Value::Null),
        );
        m
    }

    /// The environment report of one described GPU.
    pub fn environment(&self, d: &ScanDevice, tool: &ToolInfo) -> Environment {
        let mut details = self.engine_details();
        if let Value::Object(own) = &d.details {
            details.extend(own.clone());
        }
        Environment {
            schema: ENVIRONMENT_SCHEMA.to_string(),
            tool: tool.clone(),
            requested_device: d.device.clone(),
            backend: self.backend.clone(),
            reference_device: self.test_only(),
            usable: d.usable,
            problem: d.problem.clone(),
            details: Value::Object(details),
        }
    }

    /// The report of `requested` when the scan did not describe it (torch sees no GPU, or not
    /// that one): not usable, with the scan's problem.
    pub fn missing(&self, requested: &str, tool: &ToolInfo) -> Environment {
        Environment {
            schema: ENVIRONMENT_SCHEMA.to_string(),
            tool: tool.clone(),
            requested_device: requested.to_string(),
            backend: self.backend.clone(),
            reference_device: self.test_only(),
            usable: false,
            problem: Some(
                self.problem
                    .clone()
                    .unwrap_or_else(|| format!("torch did not describe {requested}")),
            ),
            details: Value::Object(self.engine_details()),
        }
    }

    /// The lot's devices, as the native scan gives them.
    pub fn lot_devices(&self, tool: &ToolInfo) -> Vec<LotDevice> {
        self.devices
            .iter()
            .map(|d| LotDevice {
                environment: self.environment(d, tool),
                facts: d.facts.clone(),
            })
            .collect()
    }
}

/// How long the scan may take: importing torch and initialising every GPU takes seconds; a
/// driver that hangs must not hold `environment` forever.
const SCAN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs the diagnosis program with `python` over `devices`; `test_only_cpu` runs it on torch's
/// CPU device (tests only: the scan says so in its backend, build and device name).
pub fn scan(python: &Path, devices: &Devices, test_only_cpu: bool) -> Result<Scan, TorchError> {
    let mut args = vec![
        "--devices".to_string(),
        match devices {
            Devices::All => "all".to_string(),
            Devices::Ordinals(o) => o.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        },
    ];
    if test_only_cpu {
        args.push("--test-only-cpu".to_string());
    }
    let bounds = lab_child::Bounds::within(SCAN_DEADLINE);
    let ended = run_program(
        python,
        ENVIRONMENT_PROGRAM,
        &args,
        &[],
        false,
        SCAN_LIMIT,
        bounds,
    )?;
    serde_json::from_slice(&ended.stdout).map_err(|e| TorchError::BadDocument {
        python: python.to_path_buf(),
        what: "GPU description",
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_the_environment_file() {
        assert!(
            ENVIRONMENT_PROGRAM
                .starts_with("#!/usr/bin/env python3\n\"\"\"iteragpu's torch engine, diagnosis")
        );
        assert!(ENVIRONMENT_PROGRAM.contains("def entry(argv):"));
    }

    #[test]
    fn a_missing_interpreter_is_named() {
        let e = scan(Path::new("/nonexistent/python3"), &Devices::All, false).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--python /nonexistent/python3: cannot be run"),
            "{e}"
        );
    }

    #[test]
    fn a_scan_without_gpus_reports_each_asked_for_as_missing() {
        let scan: Scan = serde_json::from_value(json!({
            "engine": {"name": "torch", "version": "2.11.0", "build": "CPU only", "python": "/p"},
            "backend": "torch-cuda", "visible": 0,
            "problem": "torch 2.11.0 (CPU only) in /p sees no GPU", "management": null,
            "devices": [], "peers": []
        }))
        .unwrap();
        let env = scan.missing("cuda:0", &ToolInfo::new(None));
        assert!(!env.usable);
        assert!(!env.reference_device);
        assert_eq!(
            env.problem.as_deref(),
            Some("torch 2.11.0 (CPU only) in /p sees no GPU")
        );
        assert_eq!(env.details["engine"], "torch");
        assert_eq!(env.details["torch_build"], "CPU only");
        assert!(scan.lot_devices(&ToolInfo::new(None)).is_empty());
    }
}
