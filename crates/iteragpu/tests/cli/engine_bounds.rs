//! The torch engine's Python is bounded (lab_child): a Python that hangs ends at its deadline,
//! one that leaves a grandchild in a session of its own leaves nothing, a `kill -9` of iteragpu
//! leaves nothing, and a Python that cannot import torch is refused in its own words. The
//! Pythons are small bash scripts; each process they start carries a marker no other process
//! has, so `pgrep -f` finds exactly what is left of them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use predicates::prelude::*;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// A marker unique to one test run.
fn marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("itg-{name}-{}-{nanos}", std::process::id())
}

/// A fake Python: `body` as a bash script in `dir`.
fn python(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("python");
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).unwrap();
    path
}

/// The processes whose command line holds `marker`.
fn left(marker: &str) -> String {
    let out = std::process::Command::new("pgrep")
        .args(["-af", marker])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn measure(dir: &Path, python: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    iteragpu()
        .current_dir(dir)
        .args(["measure", "--engine", "torch", "--device", "cuda:0"])
        .arg("--python")
        .arg(python)
        .args(extra)
        .args(["--output", "run.json"])
        .timeout(Duration::from_secs(60))
        .assert()
}

/// A Python that prints a line, then sleeps for ever under a name holding `m`.
fn hanging(m: &str) -> String {
    format!("echo 'loading {m}' >&2\nexec -a 'python-{m}' sleep 1000")
}

/// A Python that starts a grandchild in a new session (which ignores SIGTERM), then hangs.
fn forking(m: &str, ready: &Path) -> String {
    format!(
        "setsid bash -c \"trap '' TERM; exec -a 'grandchild-{m}' sleep 1000\" &\n\
         while ! pgrep -f 'grandchild-{m}' >/dev/null; do sleep 0.05; done\n\
         touch '{}'\n\
         echo 'started a grandchild' >&2\n\
         exec -a 'python-{m}' sleep 1000",
        ready.display()
    )
}

#[test]
fn a_hanging_python_ends_at_its_deadline_and_nothing_of_it_remains() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("hang");
    let py = python(dir.path(), &hanging(&m));
    let started = Instant::now();
    let out = measure(dir.path(), &py, &["--timeout", "1s"])
        .code(1)
        .stderr(
            predicate::str::contains("did not finish within 1s")
                .and(predicate::str::contains(format!(
                    "its last line on stderr: \"loading {m}\""
                )))
                .and(predicate::str::contains("nothing was written")),
        )
        .get_output()
        .clone();
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(left(&m), "", "processes left behind");
    assert!(!dir.path().join("run.json").exists());
}

#[test]
fn a_grandchild_in_a_new_session_that_ignores_sigterm_is_ended_too() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("setsid");
    let py = python(dir.path(), &forking(&m, &dir.path().join("ready")));
    measure(dir.path(), &py, &["--timeout", "2s"])
        .code(1)
        .stderr(predicate::str::contains(
            "did not finish within 2s, so it and every process it started were ended",
        ));
    assert!(dir.path().join("ready").exists(), "the grandchild started");
    assert_eq!(left(&m), "", "processes left behind");
}

#[test]
fn a_kill_9_of_iteragpu_leaves_no_child_and_no_grandchild() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("kill9");
    let ready = dir.path().join("ready");
    let py = python(dir.path(), &forking(&m, &ready));
    let mut run = std::process::Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .current_dir(dir.path())
        .args(["measure", "--engine", "torch", "--device", "cuda:0"])
        .arg("--python")
        .arg(&py)
        .args(["--output", "run.json"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !ready.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ready.exists(), "the grandchild never started");
    assert!(left(&m).contains(&format!("grandchild-{m}")));
    run.kill().unwrap(); // SIGKILL
    run.wait().unwrap();
    // The supervisor ends the tree on its own after iteragpu's death: SIGTERM, a 2 s grace (the
    // grandchild ignores SIGTERM), SIGKILL.
    let until = Instant::now() + Duration::from_secs(15);
    while !left(&m).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(left(&m), "", "processes left behind");
}

#[test]
fn a_python_that_cannot_import_torch_is_refused_in_its_own_words() {
    let dir = tempfile::tempdir().unwrap();
    let py = python(
        dir.path(),
        "echo 'Traceback (most recent call last):' >&2\n\
         echo '  File \"<string>\", line 1, in <module>' >&2\n\
         echo \"ModuleNotFoundError: No module named 'torch'\" >&2\n\
         exit 1",
    );
    let out = measure(dir.path(), &py, &[])
        .code(2)
        .stderr(predicate::str::contains(format!(
            "--python {} cannot import PyTorch (ModuleNotFoundError: No module named 'torch')",
            py.display()
        )))
        .get_output()
        .clone();
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
    assert!(!dir.path().join("run.json").exists());
}

#[test]
fn a_python_that_ends_silently_on_stdout_is_a_failure_quoting_its_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let py = python(
        dir.path(),
        "echo 'Segmentation fault in libfoo' >&2\nexit 1",
    );
    measure(dir.path(), &py, &[]).code(1).stderr(
        predicate::str::contains("ended with exit 1 and wrote no document")
            .and(predicate::str::contains(
                "its last line on stderr: \"Segmentation fault in libfoo\"",
            ))
            .and(predicate::str::contains("EOF").not()),
    );
}

#[test]
fn a_timeout_that_is_no_duration_or_zero_is_refused_and_the_native_engine_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let py = python(dir.path(), "exit 0");
    for bad in ["0s", "soon", "10"] {
        measure(dir.path(), &py, &["--timeout", bad])
            .code(2)
            .stderr(predicate::str::contains(format!("`{bad}`")));
    }
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure",
            "--device",
            "cpu",
            "--timeout",
            "1m",
            "--output",
            "r.json",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--timeout 1m: measure bounds only --engine torch's Python",
        ));
}

#[test]
fn a_sweep_point_whose_python_hangs_fails_at_its_deadline_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("sweep");
    let py = python(dir.path(), &forking(&m, &dir.path().join("ready")));
    iteragpu()
        .current_dir(dir.path())
        .args([
            "sweep", "--engine", "torch", "--device", "cuda:0", "--width", "64,128",
        ])
        .arg("--python")
        .arg(&py)
        .args(["--timeout", "1s", "--output-dir", "sweep"])
        .timeout(Duration::from_secs(60))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "stopped at width 64: failed: the torch engine",
        ))
        .stderr(predicate::str::contains("did not finish within 1s"));
    assert_eq!(left(&m), "", "processes left behind");
}

#[test]
fn ctrl_c_ends_the_python_and_its_grandchild_with_a_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let m = marker("ctrlc");
    let ready = dir.path().join("ready");
    let py = python(dir.path(), &forking(&m, &ready));
    // A terminal's Ctrl-C: SIGINT to the foreground process group, iteragpu's own here.
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("iteragpu"));
    cmd.current_dir(dir.path())
        .args(["measure", "--engine", "torch", "--device", "cuda:0"])
        .arg("--python")
        .arg(&py)
        .args(["--output", "run.json"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let run = cmd.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !ready.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ready.exists(), "the grandchild never started");
    let status = std::process::Command::new("kill")
        .args(["-INT", "--", &format!("-{}", run.id())])
        .status()
        .unwrap();
    assert!(status.success());
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "was interrupted (Ctrl-C, SIGTERM or SIGHUP), so it and every process it started \
             were ended"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(left(&m), "", "processes left behind");
}
