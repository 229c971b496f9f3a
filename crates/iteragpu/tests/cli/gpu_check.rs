//! `scripts/gpu-check.sh` and its judge, `scripts/gpu_check_report.py`, without a GPU: the
//! rehearsal on the CPU reference device, the fail-fast `--version`, and a verdict that fails on
//! one wrong counter.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn binary() -> PathBuf {
    assert_cmd::cargo::cargo_bin("iteragpu")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_gpu_check_rehearses_on_the_cpu_and_judges_every_case() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-check.sh"))
        .arg(out_dir.path())
        .env("GPU_CHECK_REHEARSAL", "1")
        .env("ITERAGPU", binary())
        .env_remove("DEVICE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let mut files: Vec<String> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "gpu-check-json.tar.gz",
            "gpu-check.log",
            "nvidia-smi.txt",
            "summary.txt"
        ]
    );
    let summary = std::fs::read_to_string(out_dir.path().join("summary.txt")).unwrap();
    assert!(
        summary.contains("verdict: all 11 case(s) SAME"),
        "{summary}"
    );
    assert!(summary.contains("== tf32-medium: float32"), "{summary}");
    assert!(
        summary.contains("cold_forward[0]  peak_reserved_bytes"),
        "{summary}"
    );
    let log = std::fs::read_to_string(out_dir.path().join("gpu-check.log")).unwrap();
    assert!(log.contains("refused with exit 2, as expected"), "{log}");
    assert!(log.contains("gpu-check: all steps passed"), "{log}");
}

#[test]
fn a_binary_that_cannot_run_here_stops_the_check_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("iteragpu");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"iteragpu: /lib/x86_64-linux-gnu/libc.so.6: version \\`GLIBC_2.39' not found\" >&2\nexit 1\n",
    )
    .unwrap();
    let chmod = Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    assert!(chmod.success());
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-check.sh"))
        .arg(dir.path().join("out"))
        .env("ITERAGPU", &fake)
        .env("DEVICE", "cuda:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("GLIBC_2.39' not found"), "{all}");
    assert!(all.contains("does not run on this machine"), "{all}");
    assert!(!all.contains("] environment"), "nothing else ran: {all}");
}

/// A work folder as gpu-check leaves it for one case, with the iteragpu document standing in for
/// PyTorch's too (their counters are then the same by construction).
fn case_folder() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let shape = [
        "--batch",
        "2",
        "--context",
        "8",
        "--width",
        "32",
        "--dtype",
        "float16",
        "--warmup",
        "2",
        "--repeats",
        "2",
    ];
    let run = Command::new(binary())
        .args(["measure", "--device", "cpu"])
        .args(shape)
        .arg("--output")
        .arg(work.path().join("c.json"))
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run));
    let plan = Command::new(binary())
        .args(["measure", "--plan", "--device", "cpu", "--json"])
        .args(shape)
        .output()
        .unwrap();
    assert!(plan.status.success(), "{}", text(&plan));
    std::fs::write(work.path().join("c.plan.json"), &plan.stdout).unwrap();
    std::fs::copy(work.path().join("c.json"), work.path().join("c.torch.json")).unwrap();
    std::fs::write(
        work.path().join("c.free.json"),
        r#"{"ours": null, "torch": null}"#,
    )
    .unwrap();
    work
}

fn judge(work: &Path) -> Output {
    judge_case(work, "c")
}

fn judge_case(work: &Path, case: &str) -> Output {
    Command::new("python3")
        .arg(repo().join("scripts/gpu_check_report.py"))
        .arg(work)
        .args(["--require-peer", case])
        .output()
        .expect("python3 must be installed to judge the GPU check")
}

fn edit(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    change(&mut v);
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn the_judge_fails_on_one_wrong_counter_and_names_it() {
    let work = case_folder();
    let same = judge(work.path());
    assert!(same.status.success(), "{}", text(&same));
    assert!(text(&same).contains("verdict: all 1 case(s) SAME"));

    // PyTorch reserved one more 2 MiB segment at the peak of the cold pass.
    edit(&work.path().join("c.torch.json"), |v| {
        let peak = &mut v["phases"][2]["memory"]["peak_reserved_bytes"];
        *peak = (peak.as_u64().unwrap() + 2_097_152).into();
    });
    let wrong = judge(work.path());
    let out = text(&wrong);
    assert_eq!(wrong.status.code(), Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("cold_forward[0]") && l.contains("peak_reserved_bytes"))
        .unwrap();
    assert!(
        line.contains("-2097152") && line.ends_with("DIFFERENT"),
        "{line}"
    );
    assert!(out.contains("FAILED c: 1 counter(s) differ"), "{out}");
    assert_eq!(
        out.matches("DIFFERENT").count(),
        1,
        "only that counter: {out}"
    );
}

#[test]
fn the_judge_fails_on_a_failed_check_a_missing_peer_or_a_different_policy() {
    let work = case_folder();
    edit(&work.path().join("c.torch.json"), |v| {
        v["check"]["passed"] = false.into();
    });
    let out = judge(work.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("PyTorch check failed"),
        "{}",
        text(&out)
    );

    let work = case_folder();
    edit(&work.path().join("c.torch.json"), |v| {
        v["configuration"]["memory_policy"]["cublas_workspace_bytes"] = 33_554_432.into();
    });
    let out = judge(work.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("memory_policy.cublas_workspace_bytes: iteragpu 0, pytorch 33554432"),
        "{}",
        text(&out)
    );

    let work = case_folder();
    std::fs::remove_file(work.path().join("c.torch.json")).unwrap();
    let out = judge(work.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no PyTorch document"), "{}", text(&out));
}

#[test]
fn the_judge_holds_each_case_to_its_expectations() {
    let work = case_folder();
    let met = judge_case(work.path(), "c|expect=allow_tf32:false");
    assert!(met.status.success(), "{}", text(&met));
    assert!(text(&met).contains("expected allow_tf32 false: false  ok"));
    // The CPU reference loads no kernels: a case that expects the PTX JIT fails.
    let unmet = judge_case(work.path(), "c|expect=kernel_form:ptx-jit");
    assert_eq!(unmet.status.code(), Some(1), "{}", text(&unmet));
    assert!(
        text(&unmet).contains("kernel_form is None, expected ptx-jit"),
        "{}",
        text(&unmet)
    );
}
