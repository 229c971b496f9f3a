//! The SkyPilot task as a node runs it: its `setup` and `run` under bash, with the wheel copied
//! where the task's `file_mounts` put it (the one step SkyPilot itself does), then `fleet
//! check` on the node's folder against the plan written beside the task.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use assert_cmd::Command;
use yaml_rust2::YamlLoader;

const WHEEL: &str = "iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl";

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// A wheel-shaped zip holding `binary` where maturin puts a `bin` binding's program.
pub(crate) fn wheel(path: &Path, binary: Option<&Path>) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("iteragpu-0.1.0.dist-info/METADATA", options)
        .unwrap();
    zip.write_all(b"Metadata-Version: 2.1\nName: iteragpu\nVersion: 0.1.0\n")
        .unwrap();
    if let Some(binary) = binary {
        zip.start_file("iteragpu-0.1.0.data/scripts/iteragpu", options)
            .unwrap();
        zip.write_all(&std::fs::read(binary).unwrap()).unwrap();
    }
    zip.finish().unwrap();
}

/// The task's `setup` and `run` blocks, as SkyPilot reads them.
fn blocks(yaml: &Path) -> (String, String) {
    let docs = YamlLoader::load_from_str(&std::fs::read_to_string(yaml).unwrap()).unwrap();
    let task = &docs[0];
    (
        task["setup"].as_str().unwrap().to_string(),
        task["run"].as_str().unwrap().to_string(),
    )
}

/// Writes the task for one CPU node with `wheel_path`, and a node's home with the wheel
/// mounted; returns (home, task, plan).
fn task_and_home(tmp: &Path, binary: Option<&Path>) -> (PathBuf, PathBuf, PathBuf) {
    let wheel_path = tmp.join(WHEEL);
    wheel(&wheel_path, binary);
    let yaml = tmp.join("fleet.yaml");
    let a = iteragpu()
        .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "1"])
        .args(["--device", "cpu", "--probe-seconds", "0.5", "--wheel"])
        .arg(&wheel_path)
        .arg("--output")
        .arg(&yaml)
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    assert!(
        stdout.contains(
            "fetch: mkdir -p fleet-results/ && rsync -a fleet:iteragpu-fleet/ fleet-results/\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "check: iteragpu fleet check fleet-results --plan {}",
            tmp.join("fleet.plan.json").display()
        )),
        "{stdout}"
    );
    let home = tmp.join("home");
    std::fs::create_dir_all(home.join("iteragpu-dist")).unwrap();
    std::fs::copy(&wheel_path, home.join("iteragpu-dist").join(WHEEL)).unwrap();
    (home, yaml, tmp.join("fleet.plan.json"))
}

fn bash(script: &str, home: &Path) -> std::process::Output {
    Process::new("bash")
        .arg("-c")
        .arg(script)
        .env("HOME", home)
        .env("SKYPILOT_NODE_RANK", "0")
        .env("SKYPILOT_NUM_NODES", "1")
        .env("SKYPILOT_TASK_ID", "sky-2026-12-03-test_1")
        .current_dir(home)
        .output()
        .unwrap()
}

#[test]
fn a_wheel_without_the_program_fails_the_setup_and_nothing_run_fails_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, yaml, plan) = task_and_home(tmp.path(), None);
    let (setup, _) = blocks(&yaml);
    let out = bash(&setup, &home);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The node never ran a check: the plan's node is missing, the verdict fails.
    std::fs::create_dir_all(home.join("iteragpu-fleet")).unwrap();
    iteragpu()
        .args(["fleet", "check"])
        .arg(home.join("iteragpu-fleet"))
        .arg("--plan")
        .arg(&plan)
        .assert()
        .code(1);
}

#[test]
fn the_task_installs_from_the_wheel_without_pip_runs_and_its_folder_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let binary = assert_cmd::cargo::cargo_bin("iteragpu");
    let (home, yaml, plan) = task_and_home(tmp.path(), Some(&binary));
    let (setup, run) = blocks(&yaml);
    assert!(!setup.contains("pip install"), "{setup}");
    let out = bash(&setup, &home);
    assert!(
        out.status.success(),
        "setup:\n{setup}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("iteragpu "));
    let out = bash(&run, &home);
    let results = home.join("iteragpu-fleet");
    assert!(
        out.status.success(),
        "run:\n{run}\nstderr:\n{}\nprobe.stderr: {}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(results.join("0/probe.stderr")).unwrap_or_default()
    );
    for check in ["environment", "probe", "measure"] {
        assert_eq!(
            std::fs::read_to_string(results.join("0").join(format!("{check}.exit"))).unwrap(),
            "0\n"
        );
    }
    let a = iteragpu()
        .args(["fleet", "check"])
        .arg(&results)
        .arg("--plan")
        .arg(&plan)
        .assert();
    let out = a.get_output();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
