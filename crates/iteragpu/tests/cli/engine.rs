//! `measure --engine torch` on this machine, which has no GPU: every way it cannot run ends with
//! exit 2, one sentence, nothing written and never a CPU run. (The program's protocol itself is
//! tested on a CPU-only torch in crates/lab-torch/tests/program.rs.) `environment --engine torch`:
//! a torch without a GPU reported as the native engine reports one, the lot document on the
//! test switch, and the refusals.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

fn torch_python() -> Option<PathBuf> {
    let explicit = std::env::var_os("ITERAGPU_TEST_TORCH_PYTHON").map(PathBuf::from);
    let cached = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/torch/venv/bin/python");
    let found = explicit.or_else(|| cached.is_file().then_some(cached));
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the torch engine: .ci/run installs torch into .cache/torch/venv"
        );
        eprintln!("no torch here (set ITERAGPU_TEST_TORCH_PYTHON): not run");
    }
    found
}

fn torch_measure(dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    iteragpu()
        .current_dir(dir)
        .args(["measure", "--engine", "torch", "--device", "cuda:0"])
        .args(["--batch", "1", "--context", "16", "--width", "64"])
        .args(extra)
        .args(["--output", "run.json"])
        .assert()
}

#[test]
fn a_torch_that_sees_no_gpu_is_refused_and_nothing_is_written() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    torch_measure(dir.path(), &["--python", python.to_str().unwrap()])
        .code(2)
        .stderr(
            predicate::str::contains("sees no GPU (torch.cuda.is_available() is False)")
                .and(predicate::str::contains("never falls back to the CPU"))
                .and(predicate::str::contains("nothing was written")),
        );
    assert!(!dir.path().join("run.json").exists());
    // Found on the PATH too (the venv's python3 first), and said as JSON under --json.
    let bin = python.parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = iteragpu()
        .current_dir(dir.path())
        .env("PATH", path)
        .args([
            "measure", "--engine", "torch", "--device", "cuda:0", "--json",
        ])
        .args(["--output", "run.json"])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["exit_code"], 2);
    assert!(v["error"].as_str().unwrap().contains("sees no GPU"), "{v}");
    assert!(!dir.path().join("run.json").exists());
}

#[test]
fn a_python_without_torch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // python3 here has no torch (CI installs torch only into a venv).
    torch_measure(dir.path(), &["--python", "python3"])
        .code(2)
        .stderr(
            predicate::str::contains("PyTorch cannot be imported by")
                .and(predicate::str::contains("No module named 'torch'")),
        );
    // No Python at all on the PATH.
    let empty = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .env("PATH", empty.path())
        .args([
            "measure", "--engine", "torch", "--device", "cuda:0", "--output", "run.json",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "no python3 on the PATH has PyTorch (none found)",
        ));
    torch_measure(dir.path(), &["--python", "/nonexistent/python3"])
        .code(2)
        .stderr(predicate::str::contains(
            "--python /nonexistent/python3: cannot be run",
        ));
    assert!(!dir.path().join("run.json").exists());
}

#[test]
fn the_native_engines_options_are_refused_with_torch() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, says) in [
        (&["--kernel-form", "ptx"][..], "apply to the native engine"),
        (&["--threads", "2"][..], "apply to the native engine"),
        (
            &["--cublas-workspace", "1000"][..],
            "multiple of 1024 bytes",
        ),
    ] {
        torch_measure(dir.path(), extra)
            .code(2)
            .stderr(predicate::str::contains(says));
    }
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure", "--engine", "torch", "--device", "cpu", "--output", "run.json",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "the torch engine measures a GPU, cuda:N",
        ));
    iteragpu()
        .args(["measure", "--engine", "torch", "--plan", "--device", "cuda"])
        .args(["--compute-capability", "9.0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--plan replays the native engine's",
        ));
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure", "--device", "cpu", "--python", "python3", "--output", "run.json",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--python applies to --engine torch",
        ));
    assert!(!dir.path().join("run.json").exists());
}

/// `environment --engine torch` with `args`, as JSON (exit 0 expected).
fn torch_environment(python: &Path, args: &[&str]) -> serde_json::Value {
    let out = iteragpu()
        .args(["environment", "--engine", "torch", "--json"])
        .args(["--python", python.to_str().unwrap()])
        .args(args)
        .assert()
        .code(0)
        .get_output()
        .clone();
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn environment_through_a_torch_that_sees_no_gpu_says_so_as_the_native_engine_does() {
    let Some(python) = torch_python() else { return };
    // One device: usable no, the reason, exit 0 (as the native engine without a driver).
    let v = torch_environment(&python, &[]);
    assert_eq!(v["schema"], "iteragpu.environment/1");
    assert_eq!(v["requested_device"], "cuda:0");
    assert_eq!(v["usable"], false);
    assert_eq!(v["reference_device"], false);
    let problem = v["problem"].as_str().unwrap();
    assert!(
        problem.contains("sees no GPU (torch.cuda.is_available() is False)"),
        "{v}"
    );
    assert_eq!(v["details"]["engine"], "torch");
    assert!(
        v["details"]["torch"].as_str().unwrap().starts_with("2."),
        "{v}"
    );
    // The AMD package: every GPU missing, the engine named, exit 0.
    let v = torch_environment(&python, &["--package", "mi300x:7:1"]);
    assert_eq!(v["schema"], "iteragpu.lot/1");
    assert_eq!(v["usable"], false);
    assert_eq!(v["visible_devices"], 0);
    assert_eq!(v["engine"]["name"], "torch");
    assert!(
        v["problem"].as_str().unwrap().contains("sees no GPU"),
        "{v}"
    );
    let codes: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["gpu_missing"]);
    assert_eq!(v["findings"][0]["figures"]["expected_gpus"], 1);
    assert!(v["devices"].as_array().unwrap().is_empty());
}

#[test]
fn environment_on_the_cpu_test_switch_is_a_lot_document_with_the_engine_named() {
    let Some(python) = torch_python() else { return };
    // Against an AMD package, the stand-in (the host's memory) is far short: the lot check says so.
    let v = torch_environment(
        &python,
        &[
            "--device",
            "all",
            "--test-only-cpu",
            "--package",
            "mi300x:7:1",
        ],
    );
    let lot: serde_json::Value = v.clone();
    assert_eq!(lot["schema"], "iteragpu.lot/1");
    assert_eq!(lot["requested_device"], "all");
    assert_eq!(lot["visible_devices"], 1);
    assert_eq!(lot["engine"]["name"], "torch");
    assert!(
        lot["engine"]["build"]
            .as_str()
            .unwrap()
            .contains("--test-only-cpu"),
        "{lot}"
    );
    let d = &lot["devices"][0];
    assert_eq!(d["environment"]["schema"], "iteragpu.environment/1");
    assert_eq!(d["environment"]["backend"], "torch-cpu-test-only");
    assert_eq!(d["environment"]["reference_device"], true);
    assert_eq!(d["environment"]["details"]["engine"], "torch");
    assert_eq!(d["facts"]["device"], "cuda:0");
    assert!(d["facts"]["total_memory_bytes"].as_u64().unwrap() > 0);
    // What torch's CPU device cannot say is unavailable with the reason, never a figure.
    let gpu = &d["environment"]["details"]["gpu"];
    assert!(
        gpu["uuid"].as_str().unwrap().starts_with("unavailable ("),
        "{gpu}"
    );
    assert!(d["facts"]["sm_clock_mhz"].is_null());
    let find = |code: &str| {
        lot["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == code)
            .cloned()
    };
    let short = find("memory_below_package").expect("the stand-in is short of an MI300X");
    assert_eq!(short["severity"], "warning");
    assert_eq!(short["figures"]["package_usable_memory_mib"], 196_592);
    let unread = find("nvml_unavailable").expect("no management library is noted");
    assert!(
        unread["message"]
            .as_str()
            .unwrap()
            .contains("no management library read cuda:0"),
        "{unread}"
    );
    // The fleet check reads it as any node's lot document.
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("n0");
    std::fs::create_dir(&node).unwrap();
    std::fs::write(node.join("environment.json"), lot.to_string()).unwrap();
    std::fs::write(node.join("environment.exit"), "0\n").unwrap();
    let out = iteragpu()
        .args(["fleet", "check", dir.path().to_str().unwrap(), "--json"])
        .args(["--package", "mi300x:7:1"])
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let fleet: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(fleet["nodes"][0]["steps"][0]["status"], "ok", "{fleet}");
    assert_eq!(fleet["gpus"][0]["device"], "cuda:0", "{fleet}");
    // The human report names the engine and its peer source.
    iteragpu()
        .args([
            "environment",
            "--engine",
            "torch",
            "--device",
            "all",
            "--test-only-cpu",
        ])
        .args(["--python", python.to_str().unwrap()])
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("engine: torch 2.")
                .and(predicate::str::contains("backend torch-cpu-test-only")),
        );
}

#[test]
fn environment_without_torch_or_python_is_one_sentence_each() {
    // python3 here has no torch (CI installs torch only into a venv).
    iteragpu()
        .args(["environment", "--engine", "torch", "--python", "python3"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(
            predicate::str::contains("PyTorch cannot be imported by")
                .and(predicate::str::contains("No module named 'torch'"))
                .and(predicate::function(|s: &str| s.trim().lines().count() == 1)),
        );
    let empty = tempfile::tempdir().unwrap();
    iteragpu()
        .env("PATH", empty.path())
        .args([
            "environment",
            "--engine",
            "torch",
            "--package",
            "mi300x:7:1",
        ])
        .assert()
        .code(2)
        .stdout("")
        .stderr(
            predicate::str::contains("no python3 on the PATH has PyTorch (none found)")
                .and(predicate::function(|s: &str| s.trim().lines().count() == 1)),
        );
    for (args, says) in [
        (
            &["--engine", "torch", "--device", "cpu"][..],
            "the torch engine describes GPUs",
        ),
        (
            &[
                "--engine",
                "torch",
                "--device",
                "cuda:0",
                "--package",
                "mi300x:7:1",
            ][..],
            "--package checks a whole lot",
        ),
        (
            &["--python", "python3"][..],
            "--python applies to --engine torch",
        ),
        (&["--engine", "rocm"][..], "rocm"),
    ] {
        iteragpu()
            .arg("environment")
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicate::str::contains(says));
    }
}
