//! The notebook's own weight estimate (its cell `weight-estimate`, Python's standard library only)
//! against `iteragpu estimate --json`: the same figures under the same keys for every accepted
//! input, and a refusal from both for every input the CLI refuses, so the two rules cannot drift.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command as Process, Stdio};

use assert_cmd::Command;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// The source of the notebook's code cell `id`.
fn cell(id: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../notebooks/iteragpu-lab.ipynb");
    let nb: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let cells: Vec<&serde_json::Value> = nb["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .collect();
    assert_eq!(cells.len(), 1, "the notebook has no single cell `{id}`");
    assert_eq!(cells[0]["cell_type"], "code");
    cells[0]["source"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect()
}

/// One input: parameters (digits), bits, and the reserve as typed (or none).
type Case = (String, u32, Option<&'static str>);

fn case(parameters: &str, bits: u32, reserve: Option<&'static str>) -> Case {
    (parameters.to_string(), bits, reserve)
}

/// Runs the cell (its own example output swallowed), then `weight_estimate` on every case; for
/// each case, `cli` is the binary's JSON output or null when it refused. Returns Python's report.
fn python_against(cases: &[Case], cli: &[Option<String>]) -> serde_json::Value {
    const HARNESS: &str = r#"
import contextlib, io, json, sys
job = json.load(sys.stdin)
space = {"__name__": "notebook_cell"}
with contextlib.redirect_stdout(io.StringIO()):
    exec(compile(job["cell"], "weight-estimate", "exec"), space)
report = {"compared": 0, "refused_by_both": 0, "keys": [], "problems": []}
for (parameters, bits, reserve), cli in zip(job["cases"], job["cli"]):
    args = (int(parameters), bits) + (() if reserve is None else (reserve,))
    try:
        mine = space["weight_estimate"](*args)
    except ValueError as e:
        if cli is None:
            report["refused_by_both"] += 1
        else:
            report["problems"].append(f"{args}: the notebook refuses ({e}), iteragpu does not")
        continue
    if cli is None:
        report["problems"].append(f"{args}: iteragpu refuses, the notebook gives {mine}")
        continue
    theirs = json.loads(cli)
    for key, value in mine.items():
        if key not in theirs or theirs[key] != value:
            report["problems"].append(f"{args}: {key} is {value!r} here, {theirs.get(key, 'absent')!r} in iteragpu")
    report["compared"] += 1
    report["keys"] = sorted(mine)
print(json.dumps(report))
"#;
    let job = serde_json::json!({
        "cell": cell("weight-estimate"),
        "cases": cases,
        "cli": cli,
    });
    let mut child = Process::new("python3")
        .arg("-c")
        .arg(HARNESS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed for this test");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(job.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the notebook's cell failed under python3:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `iteragpu estimate --json` for each case: its stdout, or None when it exits 2 (refused).
fn cli(cases: &[Case]) -> Vec<Option<String>> {
    cases
        .iter()
        .map(|(parameters, bits, reserve)| {
            let mut cmd = iteragpu();
            cmd.args(["estimate", "--parameters", parameters.as_str(), "--bits"])
                .arg(bits.to_string())
                .arg("--json");
            if let Some(r) = reserve {
                cmd.arg(format!("--reserve-gib={r}"));
            }
            let out = cmd.output().unwrap();
            match out.status.code() {
                Some(0) => Some(String::from_utf8(out.stdout).unwrap()),
                Some(2) => None,
                other => panic!(
                    "iteragpu estimate {parameters} {bits} {reserve:?} exited {other:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        })
        .collect()
}

#[test]
fn the_notebook_refuses_what_iteragpu_estimate_refuses() {
    let cases = &[
        case("0", 16, None),
        case("18446744073709551616", 16, None),
        case("7000000000", 0, None),
        case("7000000000", 65, None),
        case("7000000000", 16, Some("-1")),
        case("7000000000", 16, Some("-0.0001")),
        case("7000000000", 16, Some("2.50001")),
        case("7000000000", 16, Some("nan")),
        case("7000000000", 16, Some("inf")),
        case("7000000000", 16, Some("1e3")),
        case("7000000000", 16, Some("4 GiB")),
        case("7000000000", 16, Some(".")),
        case("7000000000", 16, Some("1000000000000.0001")),
    ];
    let cli = cli(cases);
    assert!(
        cli.iter().all(Option::is_none),
        "iteragpu accepted one of {cases:?}: {cli:?}"
    );
    let report = python_against(cases, &cli);
    assert_eq!(report["problems"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["refused_by_both"], cases.len(), "{report:#}");
}

#[test]
fn the_notebook_estimates_what_iteragpu_estimate_prints() {
    let mut cases: Vec<Case> = vec![
        // The original README's example, then the extremes of every input.
        case("7000000000", 16, Some("4")),
        case("70000000000", 4, None),
        case("1", 1, None),
        case("1", 64, Some("0.0001")),
        case("18446744073709551615", 64, Some("1000000000000")),
        case("18446744073709551615", 1, Some("2.5")),
        case("12345678901", 12, Some("0.25")),
        case("3", 7, Some("+1.50")),
        case("999999999999", 9, Some("-0")),
        case("1073741824", 8, Some("0003.1000")),
        case("405000000000", 17, Some("5.")),
        case("8030261248", 16, Some(".5")),
        // Ties at the 4th decimal, rounded half to even: 2^25 bytes = 0.03125 GiB -> 0.0312,
        // 3 x 2^25 = 0.09375 GiB -> 0.0938; 50000 bytes = 0.00005 GB -> 0.0000, 150000 -> 0.0002.
        case("33554432", 8, None),
        case("100663296", 8, None),
        case("50000", 8, None),
        case("150000", 8, None),
    ];
    // And a spread of counts and widths (a fixed linear congruential sequence, so every run
    // compares the same inputs).
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let reserves = [None, Some("0"), Some("4"), Some("2.5"), Some("0.0003")];
    for i in 0..24u64 {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let parameters = (x >> (i % 48)).max(1);
        cases.push((
            parameters.to_string(),
            1 + (x % 64) as u32,
            reserves[i as usize % reserves.len()],
        ));
    }
    let cli = cli(&cases);
    assert!(
        cli.iter().all(Option::is_some),
        "iteragpu refused one of {cases:?}"
    );
    let report = python_against(&cases, &cli);
    assert_eq!(report["problems"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["compared"], cases.len(), "{report:#}");
    // Every figure the notebook prints is compared, the packed ones included.
    let keys: Vec<&str> = report["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    for key in [
        "bytes_per_parameter",
        "weight_bytes",
        "weight_gib",
        "weight_gb",
        "reserve_gib",
        "reserve_bytes",
        "total_gib",
        "total_bytes",
        "packed_weight_bytes",
        "packed_total_gib",
    ] {
        assert!(keys.contains(&key), "{key} is not compared: {keys:?}");
    }
}
