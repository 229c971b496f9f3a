//! `measure --engine torch` on this machine, which has no GPU: every way it cannot run ends with
//! exit 2, one sentence, nothing written and never a CPU run. (The program's protocol itself is
//! tested on a CPU-only torch in crates/lab-torch/tests/program.rs.)

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
