//! Issue 27: every option that sizes work or memory, swept with 0, 1, its limit, the limit + 1,
//! 2^63 and 2^64 - 1. Each value ends in a sentence and exit 0, 1 or 2: never a panic (101), an
//! abort (134) or the kernel's OOM killer (137), and never a hang. `probe --copy-bytes
//! 18446744073709551615` once panicked ("capacity overflow"), 100GiB aborted and 12GiB was
//! OOM-killed after 52 s.

use std::time::{Duration, Instant};

use assert_cmd::Command;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// Bytes the host can give a new allocation, as /proc/meminfo says (the tool also honours a
/// cgroup limit, which can only make it smaller).
fn mem_available() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// One option: the command before it, the option, and its largest accepted value.
struct SizeOption {
    command: &'static [&'static str],
    option: &'static str,
    limit: u64,
    /// The values to run (by default 0, 1, limit, limit + 1, 2^63, 2^64 - 1).
    values: Option<Vec<u64>>,
}

fn values(o: &SizeOption) -> Vec<u64> {
    o.values
        .clone()
        .unwrap_or_else(|| vec![0, 1, o.limit, o.limit.saturating_add(1), 1 << 63, u64::MAX])
}

const MEASURE_CPU: &[&str] = &[
    "measure",
    "--device",
    "cpu",
    "--warmup",
    "0",
    "--repeats",
    "1",
];
const PLAN_GPU: &[&str] = &[
    "measure",
    "--plan",
    "--device",
    "cuda",
    "--compute-capability",
    "9.0",
];
const PROBE_CPU: &[&str] = &["probe", "--device", "cpu", "--seconds", "0.1"];

fn options() -> Vec<SizeOption> {
    let elements = (1u64 << 31) - 1;
    let host = mem_available();
    let o = |command, option, limit| SizeOption {
        command,
        option,
        limit,
        values: None,
    };
    vec![
        o(MEASURE_CPU, "--batch", elements),
        o(MEASURE_CPU, "--context", elements),
        o(MEASURE_CPU, "--width", elements),
        o(MEASURE_CPU, "--hidden", elements),
        o(MEASURE_CPU, "--threads", 1024),
        o(MEASURE_CPU, "--max-memory", u64::MAX),
        // The limit itself (10,000 passes of the smallest model) runs for real, in seconds.
        o(
            &["measure", "--device", "cpu", "--repeats", "1"],
            "--warmup",
            10_000,
        ),
        o(
            &["measure", "--device", "cpu", "--warmup", "0"],
            "--repeats",
            10_000,
        ),
        o(MEASURE_CPU, "--seed", u64::MAX),
        o(PLAN_GPU, "--batch", elements),
        o(PLAN_GPU, "--context", elements),
        o(PLAN_GPU, "--width", elements),
        o(PLAN_GPU, "--hidden", elements),
        o(PLAN_GPU, "--cublas-workspace", u64::MAX),
        o(PLAN_GPU, "--cublaslt-workspace", u64::MAX),
        // The host's whole memory is not allocated for real here: half of what is available
        // plus one (two buffers one byte too large) stands for the limit + 1, and 1 GiB, which
        // this machine holds, for an accepted large value.
        SizeOption {
            command: PROBE_CPU,
            option: "--copy-bytes",
            limit: host / 2,
            values: Some(vec![
                0,
                1,
                4095,
                4096,
                1 << 30,
                host / 2 + 1,
                100 << 30,
                12 << 30,
                1 << 63,
                u64::MAX,
            ]),
        },
        o(PROBE_CPU, "--max-samples", 10_000),
        o(&["estimate"], "--parameters", u64::MAX),
        o(&["estimate", "--parameters", "7B"], "--bits", 64),
        o(
            &["estimate", "--parameters", "7B", "--bits", "4"],
            "--group-size",
            u64::MAX,
        ),
        o(
            &["estimate", "--parameters", "7B", "--bits", "16"],
            "--batch",
            u64::MAX,
        ),
        o(&["fit", "--bits", "16"], "--parameters", u64::MAX),
        o(
            &["fit", "--parameters", "7B", "--bits", "16"],
            "--max-gpus",
            u64::from(u32::MAX),
        ),
        o(
            &["price", "--gpu", "b200", "--days", "7"],
            "--lots",
            u64::MAX,
        ),
        o(
            &["price", "--gpu", "b200", "--days", "7", "--lots", "1"],
            "--accepted-results",
            u64::MAX,
        ),
    ]
}

#[test]
fn no_size_option_value_crashes_aborts_or_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let mut runs = 0;
    for (n, o) in options().iter().enumerate() {
        for (k, value) in values(o).into_iter().enumerate() {
            let mut cmd = iteragpu();
            cmd.current_dir(dir.path())
                .args(o.command)
                .arg(o.option)
                .arg(value.to_string())
                .timeout(Duration::from_secs(120));
            let writes = o.command[0] == "measure" && !o.command.contains(&"--plan")
                || o.command[0] == "probe";
            if writes {
                cmd.arg("--output").arg(format!("out-{n}-{k}.json"));
            }
            let started = Instant::now();
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let line = format!("{} {} {value}", o.command.join(" "), o.option);
            let code = out.status.code();
            assert!(
                matches!(code, Some(0..=2)),
                "{line}: exit {:?} after {:?}: {stderr}",
                out.status,
                started.elapsed()
            );
            assert!(!stderr.contains("panicked"), "{line}: {stderr}");
            if code != Some(0) {
                assert_eq!(stderr.lines().count(), 1, "{line}: one sentence: {stderr}");
            }
            runs += 1;
        }
    }
    assert!(runs > 150, "{runs}");
}

/// The probe's buffers are refused before they are made when they cannot fit the host, in well
/// under a second, naming the option and what the host has; nothing is written.
#[test]
fn a_probe_whose_copy_buffers_exceed_the_host_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for value in ["100GiB", "18446744073709551615", "9223372036854775808"] {
        let started = Instant::now();
        let out = iteragpu()
            .current_dir(dir.path())
            .args([
                "probe",
                "--device",
                "cpu",
                "--seconds",
                "1",
                "--copy-bytes",
                value,
            ])
            .args(["--output", "p.json"])
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{value}: {stderr}");
        assert!(
            stderr.contains("of host memory for its two copy buffers"),
            "{value}: {stderr}"
        );
        assert!(stderr.contains("nothing was written"), "{value}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{value}: {:?}",
            started.elapsed()
        );
        assert!(!dir.path().join("p.json").exists());
    }
}
