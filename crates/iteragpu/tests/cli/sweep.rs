//! `iteragpu sweep` end to end on the CPU reference device: the summary, the stopping rules, and
//! the refusals.

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// A small CPU sweep over `width`; `extra` adds options.
fn sweep(dir: &Path, width: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    iteragpu()
        .current_dir(dir)
        .args(["sweep", "--device", "cpu", "--batch", "1", "--context", "8"])
        .args(["--width", width, "--warmup", "1", "--repeats", "2"])
        .args(["--output-dir", "runs"])
        .args(extra)
        .assert()
}

fn summary(dir: &Path) -> Vec<csv::StringRecord> {
    let mut r = csv::Reader::from_path(dir.join("runs/summary.csv")).unwrap();
    assert_eq!(
        r.headers().unwrap().iter().collect::<Vec<_>>(),
        [
            "dimension",
            "value",
            "batch",
            "context",
            "width",
            "hidden",
            "dtype",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "warm_forward_median_wall_seconds",
            "warm_forward_median_device_seconds",
            "achieved_flops_per_second",
            "check_passed",
            "status",
            "reason",
            "file",
            "device",
            "engine"
        ]
    );
    r.records().map(Result::unwrap).collect()
}

/// The pre-flight estimate `measure` records for a shape (the ceiling tests are built on it).
fn estimate(dir: &Path, width: usize) -> u64 {
    let file = format!("estimate-{width}.json");
    let out = iteragpu()
        .current_dir(dir)
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "8",
        ])
        .args([
            "--width",
            &width.to_string(),
            "--warmup",
            "1",
            "--repeats",
            "2",
        ])
        .args(["--output", &file, "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    // On the CPU device the pre-flight check compares the whole process's plan.
    doc["environment"]["details"]["host_memory"]["total_bytes"]
        .as_u64()
        .or(doc["preflight"]["estimated_peak_reserved_bytes"].as_u64())
        .unwrap()
}

#[test]
fn a_cpu_sweep_writes_one_document_and_one_row_per_point() {
    let dir = tempfile::tempdir().unwrap();
    sweep(dir.path(), "16..64:x2", &[])
        .success()
        .stdout(predicate::str::contains("all 3 points measured"))
        .stderr(predicate::str::contains("[3/3] width 64: ok"));
    let rows = summary(dir.path());
    assert_eq!(rows.len(), 3);
    for (row, width) in rows.iter().zip([16, 32, 64]) {
        let w = width.to_string();
        let hidden = (4 * width).to_string();
        assert_eq!(&row[0], "width");
        assert_eq!(&row[1], w.as_str());
        assert_eq!((&row[4], &row[5]), (w.as_str(), hidden.as_str()));
        assert_eq!(&row[6], "float32");
        assert_eq!(&row[10], "", "the CPU has no device clock");
        assert_eq!((&row[12], &row[13], &row[14]), ("true", "ok", ""));
        let file = format!("point-width-{width}.json");
        assert_eq!(&row[15], file.as_str());
        // The row's figures are the document's.
        let doc: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("runs").join(&file)).unwrap())
                .unwrap();
        assert_eq!(doc["configuration"]["width"], width);
        assert_eq!(doc["complete"], true);
        let peak = doc["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["memory"]["peak_reserved_bytes"].as_u64().unwrap())
            .max()
            .unwrap();
        assert_eq!(row[8].parse::<u64>().unwrap(), peak);
        let flops = doc["synthetic_model"]["forward_flops"].as_f64().unwrap();
        let wall: f64 = row[9].parse().unwrap();
        let achieved: f64 = row[11].parse().unwrap();
        assert!((achieved * wall - flops).abs() <= 1e-9 * flops);
    }
    // Only the documents and the summary: no temporary file.
    assert_eq!(
        std::fs::read_dir(dir.path().join("runs")).unwrap().count(),
        4
    );
}

#[test]
fn a_memory_ceiling_stops_the_sweep_there_and_keeps_the_earlier_points() {
    let dir = tempfile::tempdir().unwrap();
    // A ceiling between the estimates of width 128 and width 256 (segments round small runs up
    // to the same 2 MiB, so the widths must differ enough): 64 and 128 fit, 256 must not.
    let (fits, refused) = (estimate(dir.path(), 128), estimate(dir.path(), 256));
    assert!(fits < refused, "{fits} < {refused}");
    let ceiling = (fits + refused) / 2;
    let out = sweep(
        dir.path(),
        "64..512:x2",
        &["--max-memory", &ceiling.to_string(), "--json"],
    )
    .success()
    .stderr(predicate::str::contains(
        "stopped at width 256: would_not_fit",
    ))
    .stderr(predicate::str::contains("1 later point(s) not run"))
    .get_output()
    .stdout
    .clone();
    let printed: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(printed["stopped"], "memory_limit");
    assert_eq!(printed["rows"].as_array().unwrap().len(), 3);
    let rows = summary(dir.path());
    let statuses: Vec<&str> = rows.iter().map(|r| &r[13]).collect();
    assert_eq!(statuses, ["ok", "ok", "would_not_fit"]);
    let reason = &rows[2][14];
    assert!(
        reason.contains("needs an estimated")
            && reason.contains(&format!("--max-memory {ceiling}")),
        "{reason}"
    );
    assert_eq!(&rows[2][15], "", "a refused point writes no document");
    // The earlier points are intact; the refused one and the one after it were never written.
    let runs = dir.path().join("runs");
    for (width, kept) in [(64, true), (128, true), (256, false), (512, false)] {
        let doc = runs.join(format!("point-width-{width}.json"));
        assert_eq!(doc.is_file(), kept, "{}", doc.display());
        if kept {
            let doc: Value = serde_json::from_slice(&std::fs::read(doc).unwrap()).unwrap();
            assert_eq!(doc["complete"], true);
        }
    }
}

#[test]
fn a_ceiling_below_the_first_point_measures_nothing_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    sweep(dir.path(), "16,32", &["--max-memory-fraction", "1e-9"])
        .code(1)
        .stderr(predicate::str::contains(
            "stopped at width 16: would_not_fit",
        ))
        .stderr(predicate::str::contains("(free memory x 0.000000001)"));
    let rows = summary(dir.path());
    assert_eq!(rows.len(), 1);
    assert_eq!(&rows[0][13], "would_not_fit");
}

#[test]
fn measure_refuses_above_its_ceilings_before_writing_anything() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["measure", "--device", "cpu", "--max-memory", "1KiB"])
        .args(["--output", "m.json"])
        .assert()
        .code(1)
        .stderr(predicate::str::starts_with(
            "iteragpu: error: would not fit: this run needs an estimated",
        ));
    assert!(!dir.path().join("m.json").exists());
    for bad in ["0", "1.5", "-0.5", "nan", "inf"] {
        iteragpu()
            .current_dir(dir.path())
            .args(["measure", "--device", "cpu", "--output", "m.json"])
            .arg(format!("--max-memory-fraction={bad}"))
            .assert()
            .code(2)
            .stderr(predicate::str::contains("above 0 and at most 1"));
    }
}

#[test]
fn refusals_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    sweep(dir.path(), "64", &[])
        .code(2)
        .stderr(predicate::str::contains("none was"));
    iteragpu()
        .current_dir(dir.path())
        .args([
            "sweep", "--device", "cpu", "--batch", "1,2", "--width", "16,32",
        ])
        .args(["--output-dir", "runs"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--batch and --width were"));
    sweep(dir.path(), "64..16:x2", &[])
        .code(2)
        .stderr(predicate::str::contains("starts above its end"));
    sweep(dir.path(), "16..64", &[])
        .code(2)
        .stderr(predicate::str::contains("has no step"));
    sweep(dir.path(), "16,32", &["--max-memory", "lots"])
        .code(2)
        .stderr(predicate::str::contains("`lots` is not a byte count"));
    iteragpu()
        .current_dir(dir.path())
        .args(["sweep", "--device", "tpu:0", "--width", "16,32"])
        .args(["--output-dir", "runs"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"tpu:0\" is not a device"));
    // Nothing was created by a refused sweep.
    assert!(!dir.path().join("runs").exists());
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    std::fs::write(dir.path().join("runs/old.json"), "{}").unwrap();
    sweep(dir.path(), "16,32", &[])
        .code(2)
        .stderr(predicate::str::contains("runs is not empty"));
}

#[test]
fn no_usable_gpu_ends_the_sweep_with_exit_2_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        // No driver can be found: the same refusal as `measure --device cuda:0` without a GPU.
        .env("LD_LIBRARY_PATH", dir.path())
        .env("CUDA_PATH", dir.path())
        .args(["sweep", "--device", "cuda:0", "--width", "16,32"])
        .args(["--output-dir", "runs"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no usable GPU"));
    let rows = summary(dir.path());
    assert_eq!(rows.len(), 1);
    assert_eq!(&rows[0][13], "failed");
}

/// The rows of `dir/summary.csv` as (status, file).
fn statuses(dir: &Path) -> Vec<(String, String)> {
    let Ok(mut r) = csv::Reader::from_path(dir.join("summary.csv")) else {
        return Vec::new();
    };
    r.records()
        .filter_map(Result::ok)
        .map(|r| (r[13].to_string(), r[15].to_string()))
        .collect()
}

/// Every point document in `dir` is named by a row of its summary.
fn every_point_file_is_listed(dir: &Path) {
    let listed: Vec<String> = statuses(dir).into_iter().map(|(_, f)| f).collect();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("point-") {
            assert!(
                listed.contains(&name),
                "{name} is not in summary.csv: {listed:?}"
            );
        }
    }
}

/// A sweep whose second point runs for seconds, started in `dir/runs`.
fn slow_sweep(dir: &Path) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
        .current_dir(dir)
        .args([
            "sweep",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "256",
        ])
        .args(["--width", "64,512,640", "--warmup", "1", "--repeats", "60"])
        .args(["--output-dir", "runs"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the summary says the point `value` is running; the children of `parent` then.
fn wait_for_running(dir: &Path, file: &str, parent: u32) -> Vec<u32> {
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(120) {
        if statuses(dir)
            .iter()
            .any(|(s, f)| s == "running" && f == file)
        {
            let kids = children(parent);
            if !kids.is_empty() {
                return kids;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{file} never ran");
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                // pid (comm) state ppid ...: the comm may hold spaces, so read after the `)`.
                s.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(pid)
            })
        })
        .collect()
}

/// A process that is gone, or a zombie nobody has reaped yet.
fn is_dead(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| {
                rest.split_whitespace()
                    .next()
                    .map(|st| st == "Z" || st == "X")
            })
            .unwrap_or(true)
    })
}

fn signal(pid: u32, name: &str) {
    assert!(
        std::process::Command::new("kill")
            .args([format!("-{name}"), pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Issue 11, item 11: two sweeps into the same new folder never both succeed: the folder is
/// claimed for a sweep's whole life. (Started together, two sweeps of an earlier version both
/// succeeded with each other's points about once in ten rounds.)
#[test]
fn two_sweeps_never_share_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..30 {
        let folder = format!("runs-{round}");
        let start = || {
            std::process::Command::new(assert_cmd::cargo::cargo_bin("iteragpu"))
                .current_dir(dir.path())
                .args(["sweep", "--device", "cpu", "--batch", "1", "--context", "8"])
                .args(["--width", "8,16", "--repeats", "1", "--output-dir", &folder])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (start(), start());
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let codes: Vec<_> = outs.iter().map(|o| o.status.code()).collect();
        assert!(
            codes.contains(&Some(0)) && codes.contains(&Some(2)),
            "round {round}: {codes:?}"
        );
        let refused = outs.iter().find(|o| o.status.code() == Some(2)).unwrap();
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("is not empty"),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
        let runs = dir.path().join(&folder);
        let rows = statuses(&runs);
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|(s, _)| s == "ok"), "{rows:?}");
        every_point_file_is_listed(&runs);
        assert!(!runs.join(".iteragpu-sweep.lock").exists());
    }
}

/// Issue 11, item 11: SIGTERM is Ctrl-C: the point in progress finishes, the rest are listed as
/// interrupted, nothing keeps running, and the summary names every document in the folder.
#[test]
fn sigterm_stops_the_sweep_after_its_point() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = slow_sweep(dir.path());
    let runs = dir.path().join("runs");
    let kids = wait_for_running(&runs, "point-width-512.json", sweep.id());
    assert!(runs.join(".iteragpu-sweep.lock").exists());
    signal(sweep.id(), "TERM");
    let out = sweep.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    for kid in kids {
        assert!(is_dead(kid), "the point's process {kid} outlived the sweep");
    }
    let rows = statuses(&runs);
    let status: Vec<&str> = rows.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(status, ["ok", "ok", "interrupted"], "{rows:?}");
    assert!(runs.join("point-width-512.json").exists());
    every_point_file_is_listed(&runs);
    assert!(!runs.join(".iteragpu-sweep.lock").exists());
}

/// Issue 11, item 11: a sweep killed with SIGKILL (which it cannot catch) takes its point's
/// process with it, and the summary already names the point it was measuring.
#[test]
fn a_killed_sweep_takes_its_point_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut sweep = slow_sweep(dir.path());
    let runs = dir.path().join("runs");
    let kids = wait_for_running(&runs, "point-width-512.json", sweep.id());
    sweep.kill().unwrap();
    sweep.wait().unwrap();
    let start = std::time::Instant::now();
    while !kids.iter().all(|k| is_dead(*k)) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "the point's process outlived the killed sweep"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let rows = statuses(&runs);
    assert_eq!(
        rows.last().unwrap(),
        &("running".to_string(), "point-width-512.json".to_string())
    );
    every_point_file_is_listed(&runs);
    // The folder is not reused: a new sweep is told why.
    sweep_into(dir.path(), "runs").code(2).stderr(
        predicate::str::contains("a sweep that was killed left")
            .or(predicate::str::contains("is not empty")),
    );
}

fn sweep_into(dir: &Path, folder: &str) -> assert_cmd::assert::Assert {
    iteragpu()
        .current_dir(dir)
        .args([
            "sweep",
            "--device",
            "cpu",
            "--width",
            "16,32",
            "--output-dir",
            folder,
        ])
        .assert()
}

/// Issue 26, item 3: a CPU sweep names the CPU reference device in its text and in every row of
/// summary.csv, and `--json` says so too.
#[test]
fn a_cpu_sweep_names_the_cpu_reference_device() {
    let dir = tempfile::tempdir().unwrap();
    sweep(dir.path(), "16,32", &[])
        .success()
        .stdout(predicate::str::starts_with(
            "CPU REFERENCE DEVICE: real arithmetic on the host CPU, not a GPU measurement",
        ));
    let rows = summary(dir.path());
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(&row[16], "cpu", "{row:?}");
        assert_eq!(&row[17], "native", "{row:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(dir.path(), "16,32", &["--json"])
        .success()
        .get_output()
        .stdout
        .clone();
    let doc: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(doc["device"], "cpu");
    assert_eq!(doc["engine"], "native");
    assert_eq!(doc["reference_device"], true);
    assert_eq!(doc["rows"][0]["device"], "cpu");
}

/// Issue 26, item 3: stderr a pipe: one line per finished point, and with --progress a line as
/// each point starts; nothing else.
#[test]
fn progress_lines_on_a_pipe_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(dir.path(), "16,32", &[])
        .success()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("[1/2] width 16: ok"), "{stderr}");
    assert!(!stderr.contains("measuring"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let out = sweep(dir.path(), "16,32", &["--progress"])
        .success()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    assert_eq!(lines[0], "[1/2] width 16: measuring on cpu");
    assert!(lines[1].starts_with("[1/2] width 16: ok, "), "{stderr}");
    assert_eq!(lines[2], "[2/2] width 32: measuring on cpu");
    assert!(!stderr.contains('\u{1b}'), "no escape sequence: {stderr:?}");
}

/// Issue 26, item 3: on a terminal with TERM=dumb, no bar (it cannot be drawn) but plain lines:
/// each point as it starts and as it ends.
#[test]
fn a_sweep_on_a_dumb_terminal_prints_plain_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    let Some(pane) = crate::completions::run_on_a_terminal(
        dir.path(),
        "dumb",
        "iteragpu sweep --device cpu --batch 1 --context 8 --width 16,32 --warmup 1 --repeats 2 \
         --output-dir runs",
        "DONE ",
    ) else {
        return;
    };
    assert!(pane.contains("DONE 0"), "{pane}");
    for line in [
        "[1/2] width 16: measuring on cpu",
        "[1/2] width 16: ok, ",
        "[2/2] width 32: measuring on cpu",
        "[2/2] width 32: ok, ",
        "CPU REFERENCE DEVICE",
    ] {
        assert!(pane.contains(line), "{line} missing:\n{pane}");
    }
}

/// Issue 26, item 3: hyperfine's short flags for the passes, `-w` and `-r`, reach every point.
#[test]
fn the_short_flags_for_the_passes_reach_the_points() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["sweep", "--device", "cpu", "--batch", "1", "--context", "8"])
        .args([
            "--width",
            "16,32",
            "-w",
            "2",
            "-r",
            "3",
            "--output-dir",
            "runs",
        ])
        .assert()
        .success();
    let doc: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("runs/point-width-16.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        doc["configuration"]["warmup"], 2,
        "{}",
        doc["configuration"]
    );
    assert_eq!(doc["configuration"]["repeats"], 3);
}
