//! `iteragpu protocol`, `record`: the quality ledger end to end, its refusals, and concurrent
//! appends.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use lab::dtype::DType;
use lab::measure::document::*;
use lab::tool::ToolInfo;
use predicates::prelude::*;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

pub(crate) const HEADER: &str = "run_id,date_utc,protocol_sha256,corpus_id,rental,gpu,days,lots,device_model,device_uuid,driver_version,device_mismatch,measurement_sha256,units_submitted,units_accepted,acceptance_threshold,threshold_met,aggregation,notes";

/// The environment of a CUDA run on a GPU called `name`, shaped as `lab-cuda` writes it.
fn gpu_environment(name: &str) -> lab::environment::Environment {
    lab::environment::Environment {
        schema: lab::environment::ENVIRONMENT_SCHEMA.into(),
        tool: ToolInfo::new(None),
        requested_device: "cuda:0".into(),
        backend: "cuda".into(),
        reference_device: false,
        usable: true,
        problem: None,
        details: serde_json::json!({
            "gpu": {"name": name, "uuid": "GPU-8c1d2f0e-0000-4000-8000-000000000001"},
            "nvml": {"available": true, "driver_version": "570.86.15"},
            "driver": {"cuda_version": "12.8"}
        }),
    }
}

/// A measurement document shaped like `measure --device cpu` writes, with the real CPU
/// environment. Its timings and counters are test fixtures, not measurements: only the ledger's
/// handling of the document is under test. `n` makes each document (and its SHA-256) distinct.
fn measurement(n: u64, complete: bool) -> MeasurementDocument {
    let memory = PhaseMemory {
        baseline_allocated_bytes: 0,
        baseline_reserved_bytes: 0,
        end_allocated_bytes: 0,
        end_reserved_bytes: 0,
        peak_allocated_bytes: 0,
        peak_reserved_bytes: 0,
        baseline_requested_bytes: 0,
        end_requested_bytes: 0,
        peak_requested_bytes: 0,
        device_before: None,
        device_after: None,
    };
    MeasurementDocument {
        schema: MEASUREMENT_SCHEMA.to_string(),
        tool: ToolInfo::new(None),
        started_utc: format!(
            "2026-09-24T{:02}:{:02}:{:02}Z",
            8 + n / 3600 % 12,
            n / 60 % 60,
            n % 60
        ),
        device_init_seconds: 0.0,
        environment: lab_cpu::environment(ToolInfo::new(None)),
        node: None,
        engine: None,
        configuration: Configuration {
            device: "cpu".into(),
            batch: 1,
            context: 16,
            width: 64,
            hidden: 256,
            hidden_source: "default".into(),
            dtype: DType::Float32,
            warmup: 1,
            repeats: 2,
            seed: n,
            allow_tf32: false,
            math_mode: "float32 accumulate, strict float32".into(),
            memory_policy: Default::default(),
        },
        synthetic_model: SyntheticModel {
            description: "Linear -> GELU -> Linear".into(),
            layers: Vec::new(),
            parameter_count: 0,
            parameter_bytes: 0,
            input_shape: vec![1, 16, 64],
            hidden_shape: vec![1, 16, 256],
            output_shape: vec![1, 16, 64],
            dtype: DType::Float32,
            forward_flops: 0,
        },
        preflight: Preflight {
            estimated_peak_reserved_bytes: 0,
            device_free_bytes: None,
        },
        phases: vec![PhaseRow {
            phase: Phase::ModelLoad,
            index: 0,
            wall_seconds: 0.0,
            device_seconds: None,
            memory,
        }],
        check: None,
        complete,
        error: (!complete).then(|| RunError {
            phase: Some(Phase::ColdForward),
            kind: "out_of_memory".into(),
            message: "out of memory in cold_forward".into(),
            allocated_bytes: None,
            reserved_bytes: None,
        }),
    }
}

/// A CPU reference measurement, as `measure --device cpu` writes.
fn write_cpu_measurement(dir: &Path, n: u64, complete: bool) -> PathBuf {
    let path = dir.join(format!("m{n}.json"));
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&measurement(n, complete)).unwrap(),
    )
    .unwrap();
    path
}

/// A measurement made on a GPU called `gpu` (a fixture: the ledger reads only its identity).
fn write_gpu_measurement(dir: &Path, n: u64, complete: bool, gpu: &str) -> PathBuf {
    let path = dir.join(format!("m{n}.json"));
    let mut doc = measurement(n, complete);
    doc.environment = gpu_environment(gpu);
    doc.configuration.device = "cuda:0".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    path
}

/// A measurement on a B200, the GPU of most packages below.
pub(crate) fn write_measurement(dir: &Path, n: u64, complete: bool) -> PathBuf {
    write_gpu_measurement(dir, n, complete, "NVIDIA B200")
}

pub(crate) const FILLED: [(&str, &str); 9] = [
    (
        "useful_unit",
        "one support ticket routed to one of 12 queues",
    ),
    (
        "acceptance_criterion",
        "the queue equals the reference label",
    ),
    ("minimum_acceptance_rate", "0.9"),
    ("corpus_id", "tickets-v3"),
    (
        "corpus_description",
        "500 anonymised tickets, export of 2026-09-01",
    ),
    ("corpus_size", "500"),
    ("judged_by", "reference labels tickets-v3-labels.csv"),
    (
        "distinctness_rule",
        "one ticket id is one unit; re-runs of a ticket are not new units",
    ),
    ("aggregation", "best"),
];

/// `protocol init`, fill every field, `protocol lock`.
pub(crate) fn locked_protocol(dir: &Path) -> PathBuf {
    locked_protocol_as(dir, "protocol.txt", &[])
}

/// [`locked_protocol`] in the file `name`, with some fields set otherwise.
fn locked_protocol_as(dir: &Path, name: &str, changes: &[(&str, &str)]) -> PathBuf {
    let path = dir.join(name);
    iteragpu()
        .args(["protocol", "init"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("fill in every field"));
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (key, value) in FILLED {
        let value = changes
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(value, |(_, v)| *v);
        text = text.replace(&format!("\n{key} =\n"), &format!("\n{key} = {value}\n"));
    }
    std::fs::write(&path, text).unwrap();
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("locked"));
    path
}

fn grid(dir: &Path) -> PathBuf {
    let path = dir.join("resultats-bruts.csv");
    std::fs::write(&path, format!("{HEADER}\n")).unwrap();
    path
}

fn record(grid: &Path, protocol: &Path, measurement: &Path, extra: &[&str]) -> Command {
    let mut cmd = iteragpu();
    cmd.arg("record")
        .arg("--results")
        .arg(grid)
        .arg("--protocol")
        .arg(protocol)
        .arg("--measurement")
        .arg(measurement)
        .args(extra);
    cmd
}

/// A grid row read back as CSV, by column name.
struct GridRow(csv::StringRecord);

impl GridRow {
    fn get(&self, column: &str) -> &str {
        let i = HEADER.split(',').position(|c| c == column).unwrap();
        &self.0[i]
    }
}

fn grid_rows(grid: &Path) -> Vec<GridRow> {
    let text = std::fs::read_to_string(grid).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(
        reader
            .headers()
            .unwrap()
            .iter()
            .collect::<Vec<_>>()
            .join(","),
        HEADER
    );
    reader.records().map(|r| GridRow(r.unwrap())).collect()
}

fn cost_json(grid: &Path) -> serde_json::Value {
    let out = iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(grid)
        .arg("--json")
        .assert()
        .success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

fn counts(package: &str, rental: &str, submitted: u64, accepted: u64) -> Vec<String> {
    [
        "--rental",
        rental,
        "--package",
        package,
        "--submitted",
        &submitted.to_string(),
        "--accepted",
        &accepted.to_string(),
    ]
    .map(str::to_string)
    .to_vec()
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn init_lock_and_record_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let lock: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("protocol.txt.lock")).unwrap())
            .unwrap();
    let protocol_sha = lock["protocol_sha256"].as_str().unwrap().to_string();
    let grid = grid(dir.path());
    let m1 = write_measurement(dir.path(), 1, true);
    let m2 = write_gpu_measurement(dir.path(), 2, true, "NVIDIA H100 80GB HBM3");

    record(&grid, &protocol, &m1, &args(&counts("b200:7:2", "b200-a", 500, 473)))
        .assert()
        .success()
        .stdout(predicate::str::contains("line 2"))
        .stdout(predicate::str::contains(
            "rental b200-a, package b200:7:2 (NVIDIA B200), 473 of 500 units accepted (threshold 0.9: met)",
        ))
        .stdout(predicate::str::contains(
            "device NVIDIA B200 (GPU-8c1d2f0e-0000-4000-8000-000000000001, driver 570.86.15)",
        ));
    let mut extra = counts("h100-sxm:3:1", "h100-a", 200, 150);
    extra.extend(["--notes", "second run, queue drift", "--json"].map(str::to_string));
    let out = record(&grid, &protocol, &m2, &args(&extra))
        .assert()
        .success();
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["line"], 3);
    assert_eq!(doc["row"]["threshold_met"], false);
    assert_eq!(doc["row"]["rental"], "h100-a");

    let rows = grid_rows(&grid);
    assert_eq!(rows.len(), 2);
    let sha1 = sha256(&std::fs::read(&m1).unwrap());
    let r = &rows[0];
    assert_eq!(r.get("run_id"), &sha1[..12]);
    assert_eq!(r.get("date_utc"), "2026-09-24T08:00:01Z");
    assert_eq!(r.get("protocol_sha256"), protocol_sha);
    assert_eq!(r.get("corpus_id"), "tickets-v3");
    assert_eq!(r.get("rental"), "b200-a");
    assert_eq!(
        (r.get("gpu"), r.get("days"), r.get("lots")),
        ("b200", "7", "2")
    );
    assert_eq!(rows[1].get("gpu"), "h100-sxm");
    assert_eq!(r.get("device_model"), "NVIDIA B200");
    assert_eq!(r.get("driver_version"), "570.86.15");
    assert_eq!(r.get("device_mismatch"), "false");
    assert_eq!(r.get("measurement_sha256"), sha1);
    assert_eq!(
        (
            r.get("units_submitted"),
            r.get("units_accepted"),
            r.get("acceptance_threshold"),
            r.get("threshold_met"),
            r.get("aggregation")
        ),
        ("500", "473", "0.9", "true", "best")
    );
    assert_eq!(rows[1].get("notes"), "second run, queue drift");
    assert_eq!(rows[1].get("threshold_met"), "false");

    // cost: the whole package price over the accepted units; the H100 run did not meet the
    // threshold, so that rental has no unit price.
    let b200 = unit_price(2 * lot_price("b200", 7), 473);
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains("rental b200-a: b200:7:2 (NVIDIA B200)"))
        .stdout(predicate::str::contains(format!("({b200} cents = price / 473")))
        .stdout(predicate::str::contains(
            "per accepted unit    none: its one run did not meet the protocol's minimum_acceptance_rate",
        ));
    let doc = cost_json(&grid);
    let rental = &doc["rentals"][0];
    assert_eq!(rental["rental"], "b200-a");
    assert_eq!(rental["gpu"], "b200");
    assert_eq!(rental["accepted_units"], 473);
    assert_eq!(rental["total_price_cents"], 2 * lot_price("b200", 7));
    assert_eq!(rental["unit_price_cents"], b200.as_str());
    assert!(doc["rentals"][1]["unit_price_cents"].is_null());
    assert!(
        doc["rentals"][1]["no_unit_price"]
            .as_str()
            .unwrap()
            .contains("did not meet")
    );
    assert_eq!(
        doc["totals"][0]["total_price_cents"],
        2 * lot_price("b200", 7) + lot_price("h100-sxm", 3)
    );
}

/// Issue 11, item 4: only runs that met the threshold count, and the protocol's rule picks among
/// them; no unit price without one, with the reason.
#[test]
fn only_passing_runs_count_by_the_protocols_rule() {
    let dir = tempfile::tempdir().unwrap();
    for (name, rule, expected) in [
        ("best.txt", "best", 480),
        ("last.txt", "last", 460),
        ("mean.txt", "mean", 470),
    ] {
        let protocol = locked_protocol_as(dir.path(), name, &[("aggregation", rule)]);
        let grid = dir.path().join(format!("{rule}.csv"));
        for (i, accepted) in [470u64, 480, 100, 460].into_iter().enumerate() {
            let m = write_measurement(dir.path(), 100 * expected + i as u64, true);
            record(
                &grid,
                &protocol,
                &m,
                &args(&counts("b200:3:1", "r1", 500, accepted)),
            )
            .assert()
            .success();
        }
        let doc = cost_json(&grid);
        let r = &doc["rentals"][0];
        assert_eq!(r["runs"], 4, "{rule}");
        assert_eq!(r["runs_meeting_threshold"], 3, "{rule}");
        assert_eq!(r["corpora"][0]["aggregation"], rule);
        assert_eq!(r["accepted_units"], expected, "{rule}");
        assert_eq!(
            r["unit_price_cents"],
            unit_price(lot_price("b200", 3), expected).as_str()
        );
    }
    // Runs that all stay below the threshold give no unit price, and say why.
    let protocol = dir.path().join("best.txt");
    let grid = dir.path().join("below.csv");
    for (i, accepted) in [400u64, 449].into_iter().enumerate() {
        let m = write_measurement(dir.path(), 900 + i as u64, true);
        record(
            &grid,
            &protocol,
            &m,
            &args(&counts("b200:3:1", "r1", 500, accepted)),
        )
        .assert()
        .success()
        .stdout(predicate::str::contains("(threshold 0.9: not met)"));
    }
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "per accepted unit    none: none of its 2 runs met the protocol's minimum_acceptance_rate, so no unit counts as accepted",
        ));
    let doc = cost_json(&grid);
    assert!(doc["rentals"][0]["unit_price_cents"].is_null());
    assert!(doc["totals"][0]["unit_price_cents"].is_null());
}

/// Issue 11, item 3: a package in the grid is a rental; two rentals of one package cost twice,
/// and a corpus rerun on the second rental adds no units.
#[test]
fn two_rentals_of_one_package_cost_twice() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let h200 = |n| write_gpu_measurement(dir.path(), n, true, "NVIDIA H200");
    record(
        &grid,
        &protocol,
        &h200(1),
        &args(&counts("h200:7:1", "first", 500, 470)),
    )
    .assert()
    .success();
    record(
        &grid,
        &protocol,
        &h200(2),
        &args(&counts("h200:7:1", "second", 500, 480)),
    )
    .assert()
    .success();
    let lot = lot_price("h200", 7);
    let doc = cost_json(&grid);
    assert_eq!(doc["rentals"].as_array().unwrap().len(), 2);
    assert_eq!(
        doc["rentals"][0]["unit_price_cents"],
        unit_price(lot, 470).as_str()
    );
    assert_eq!(
        doc["rentals"][1]["unit_price_cents"],
        unit_price(lot, 480).as_str()
    );
    let total = &doc["totals"][0];
    assert_eq!(total["rentals"], 2);
    assert_eq!(total["total_price_cents"], 2 * lot);
    assert_eq!(total["accepted_units"], 480, "the same corpus counts once");
    assert_eq!(total["unit_price_cents"], unit_price(2 * lot, 480).as_str());
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains("all 2 rentals together"))
        .stdout(predicate::str::contains(format!("({} cents)", 2 * lot)));

    // One rental is one package: the name cannot come back with another package.
    let before = std::fs::read(&grid).unwrap();
    record(
        &grid,
        &protocol,
        &h200(3),
        &args(&counts("h200:7:2", "first", 500, 490)),
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains(
        "rental first is package h200:7:1 (line 2); one rental is one package",
    ));
    record(
        &grid,
        &protocol,
        &h200(3),
        &args(&counts("h200:7:1", "=bad name", 500, 490)),
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains("is not a rental name"));
    // A corpus is judged by one protocol per grid.
    let other = locked_protocol_as(
        dir.path(),
        "other.txt",
        &[("minimum_acceptance_rate", "0.5")],
    );
    record(
        &grid,
        &other,
        &h200(3),
        &args(&counts("h200:7:1", "first", 500, 490)),
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains(
        "corpus tickets-v3 is judged by protocol",
    ));
    assert_eq!(std::fs::read(&grid).unwrap(), before);
}

/// Issue 11, item 1: a package the catalogue does not sell is refused before any row is written,
/// so `cost` can always price the grid.
#[test]
fn record_refuses_a_package_the_catalogue_does_not_sell() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = dir.path().join("new-grid.csv");
    let m = write_measurement(dir.path(), 1, true);
    record(&grid, &protocol, &m, &args(&counts("b20:7:1", "r1", 10, 9)))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "package \"b20:7:1\" is not valid: unknown GPU `b20`",
        ))
        .stderr(predicate::str::contains("did you mean `b200`?"));
    assert!(!grid.exists(), "a refused package created the grid");
    // The catalogue `record` checks against is the one given, as for `cost`.
    let catalogue = dir.path().join("tariffs.csv");
    std::fs::write(
        &catalogue,
        rent::catalogue::EMBEDDED_CSV.replace("b200,", "b200x,"),
    )
    .unwrap();
    record(
        &grid,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .arg("--catalogue")
    .arg(&catalogue)
    .assert()
    .code(2)
    .stderr(predicate::str::contains("unknown GPU `b200`"));
    record(
        &grid,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .assert()
    .success();
    // A grid priced with another catalogue names the rental and the way out.
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .arg("--catalogue")
        .arg(&catalogue)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "line 2: rental r1 (b200:7:1) cannot be priced",
        ))
        .stderr(predicate::str::contains("--catalogue FILE"));
}

/// Issue 11, item 2: a CPU reference run, or another GPU model, is not a run of the package's GPU.
#[test]
fn record_refuses_another_device_unless_allowed_and_cost_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let cpu = write_cpu_measurement(dir.path(), 1, true);
    let h100 = write_gpu_measurement(dir.path(), 2, true, "NVIDIA H100 80GB HBM3");
    let ok = counts("h200:7:1", "r1", 10, 9);
    record(&grid, &protocol, &cpu, &args(&ok))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "was measured on the CPU reference device (",
        ))
        .stderr(predicate::str::contains(
            "not on the NVIDIA H200 of package h200:7:1",
        ))
        .stderr(predicate::str::contains("--allow-device-mismatch"));
    record(&grid, &protocol, &h100, &args(&ok))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "was measured on NVIDIA H100 80GB HBM3 (GPU-8c1d2f0e-0000-4000-8000-000000000001), not on the NVIDIA H200",
        ));
    assert_eq!(
        std::fs::read_to_string(&grid).unwrap(),
        format!("{HEADER}\n")
    );
    // The same H100 run is a match for an H100 SXM package.
    record(
        &grid,
        &protocol,
        &h100,
        &args(&counts("h100-sxm:7:1", "r2", 10, 9)),
    )
    .assert()
    .success()
    .stdout(predicate::str::contains("device mismatch").not());
    record(&grid, &protocol, &cpu, &args(&ok))
        .arg("--allow-device-mismatch")
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "device mismatch: not measured on an NVIDIA H200; recorded with --allow-device-mismatch",
        ));
    let rows = grid_rows(&grid);
    assert_eq!(rows[0].get("device_mismatch"), "false");
    assert_eq!(rows[1].get("device_mismatch"), "true");
    assert_eq!(rows[1].get("device_uuid"), "cpu-reference");
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "device mismatch      line 3: measured on ",
        ))
        .stdout(predicate::str::contains(
            "(cpu-reference), not an NVIDIA H200 (--allow-device-mismatch)",
        ));
    let doc = cost_json(&grid);
    assert_eq!(
        doc["rentals"][0]["device_mismatches"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    assert_eq!(doc["rentals"][1]["device_mismatches"][0]["line"], 3);
}
/// The bundled catalogue's lot price, read from the CSV file itself.
fn lot_price(gpu: &str, days: u32) -> u64 {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/tarifs-forfaits.csv"
    ));
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let headers = reader.headers().unwrap().clone();
    let col = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (g, d, p) = (col("gpu"), col("days"), col("price_cents"));
    reader
        .records()
        .map(Result::unwrap)
        .find(|r| &r[g] == gpu && r[d] == days.to_string())
        .map(|r| r[p].parse().unwrap())
        .unwrap()
}

/// `total / n` cents, rounded half to even to 4 places (the tool always writes 4 places).
fn unit_price(total: u64, n: u64) -> String {
    let scaled = u128::from(total) * 10_000;
    let (n, mut q) = (u128::from(n), scaled / u128::from(n));
    let r = scaled % n;
    if 2 * r > n || (2 * r == n && q % 2 == 1) {
        q += 1;
    }
    format!("{}.{:04}", q / 10_000, q % 10_000)
}

fn sha256(bytes: &[u8]) -> String {
    use sha2_free::hex_sha256;
    hex_sha256(bytes)
}

/// SHA-256 through the system tool, so the test does not reuse the code it checks.
mod sha2_free {
    pub fn hex_sha256(bytes: &[u8]) -> String {
        use std::io::Write;
        let mut child = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sha256sum must be installed for this test");
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_string()
    }
}

#[test]
fn a_tampered_protocol_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let m = write_measurement(dir.path(), 1, true);
    let text = std::fs::read_to_string(&protocol).unwrap();
    std::fs::write(
        &protocol,
        text.replace(
            "minimum_acceptance_rate = 0.9",
            "minimum_acceptance_rate = 0.5",
        ),
    )
    .unwrap();
    record(
        &grid,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 6)),
    )
    .assert()
    .code(1)
    .stdout("")
    .stderr(predicate::str::contains("was changed after it was locked"));
    assert_eq!(
        std::fs::read_to_string(&grid).unwrap(),
        format!("{HEADER}\n")
    );
    // Locking again to hide the change is refused too.
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&protocol)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("already locked"));
}

#[test]
fn protocol_init_and_lock_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.txt");
    iteragpu()
        .args(["protocol", "init"])
        .arg(&path)
        .assert()
        .success();
    let first = std::fs::read(&path).unwrap();
    iteragpu()
        .args(["protocol", "init"])
        .arg(&path)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("already exists"));
    assert_eq!(std::fs::read(&path).unwrap(), first);
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "cannot be locked: fill in useful_unit",
        ));
    assert!(!dir.path().join("p.txt.lock").exists());

    // An unlocked protocol cannot take results.
    let grid = grid(dir.path());
    let m = write_measurement(dir.path(), 1, true);
    record(&grid, &path, &m, &args(&counts("b200:7:1", "r1", 1, 1)))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is not locked"));

    let text = String::from_utf8(first).unwrap().replace(
        "\nminimum_acceptance_rate =\n",
        "\nminimum_acceptance_rate = 95%\n",
    );
    let mut text = text;
    for (key, value) in FILLED
        .iter()
        .filter(|(k, _)| *k != "minimum_acceptance_rate")
    {
        text = text.replace(&format!("\n{key} =\n"), &format!("\n{key} = {value}\n"));
    }
    std::fs::write(&path, text).unwrap();
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "minimum_acceptance_rate = \"95%\" is not valid",
        ));
}

#[test]
fn record_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let m = write_measurement(dir.path(), 1, true);
    let ok = counts("b200:7:1", "r1", 10, 9);
    record(&grid, &protocol, &m, &args(&ok)).assert().success();
    let after_one = std::fs::read(&grid).unwrap();

    // The same measurement again.
    record(&grid, &protocol, &m, &args(&ok))
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("is already recorded").and(predicate::str::contains("line 2")),
        );
    // An incomplete measurement.
    let incomplete = write_measurement(dir.path(), 2, false);
    record(&grid, &protocol, &incomplete, &args(&ok))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "incomplete measurement (complete: false, out of memory in cold_forward)",
        ));
    // Not a measurement at all.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{\"schema\": \"something else\"}").unwrap();
    record(&grid, &protocol, &junk, &args(&ok))
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is not a usable measurement"));
    // A measurement that is not there.
    record(&grid, &protocol, &dir.path().join("nope.json"), &args(&ok))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "nope.json: No such file or directory (os error 2)",
        ));

    let m3 = write_measurement(dir.path(), 3, true);
    for (extra, words) in [
        (
            counts("b200:7:1", "r1", 10, 11),
            "--accepted 11 exceeds --submitted 10",
        ),
        (
            counts("b200:7:1", "r1", 501, 1),
            "exceeds the protocol's corpus_size 500",
        ),
        (counts("b200:5:1", "r1", 10, 9), "days must be 3, 7 or 30"),
        (
            counts("b200:7:0", "r1", 10, 9),
            "lots must be a whole number >= 1",
        ),
        (counts("b200:7:1", "r 1", 10, 9), "is not a rental name"),
    ] {
        record(&grid, &protocol, &m3, &args(&extra))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(words));
    }
    for notes in ["two\nlines", "a bell\u{7}", &"x".repeat(1001)] {
        record(&grid, &protocol, &m3, &args(&ok))
            .args(["--notes", notes])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "--notes must be one line of text of at most 1000 characters",
            ));
    }
    assert_eq!(
        std::fs::read(&grid).unwrap(),
        after_one,
        "a refused record changed the grid"
    );

    // A grid whose header does not match, and the grid of an earlier version.
    let other = dir.path().join("other.csv");
    std::fs::write(&other, "run_id,date_utc,gpu\n").unwrap();
    record(&other, &protocol, &m3, &args(&ok))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "is not a results grid of this version",
        ))
        .stderr(predicate::str::contains(
            "It is not a grid this tool writes",
        ));
    assert_eq!(
        std::fs::read_to_string(&other).unwrap(),
        "run_id,date_utc,gpu\n"
    );
    let earlier = dir.path().join("earlier.csv");
    std::fs::write(&earlier, "run_id,date_utc,protocol_sha256,corpus_id,gpu,days,lots,device_model,device_uuid,driver_version,measurement_sha256,units_submitted,units_accepted,acceptance_threshold,threshold_met,notes\n").unwrap();
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&earlier)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("written by an earlier iteragpu"));
}

/// Issue 27: a complete document that cannot be a real run is refused with the field, its value
/// and what is accepted (exit 1, a file that fails its checks), and the grid is left as it was.
#[test]
fn record_refuses_documents_that_cannot_be_a_real_run() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let ok = counts("b200:7:1", "r1", 10, 9);
    let document = |n: u64| {
        let mut doc = measurement(n, true);
        doc.environment = gpu_environment("NVIDIA B200");
        doc.configuration.device = "cuda:0".into();
        serde_json::to_value(doc).unwrap()
    };
    let check = |passed: bool, relative_error: f64| {
        serde_json::json!({
            "method": "float64 reference on the CPU", "rows": [0], "max_abs_error": 0.0,
            "relative_error": relative_error, "bound": 1e-5, "passed": passed
        })
    };
    let soon = humantime::format_rfc3339_seconds(
        std::time::SystemTime::now() - std::time::Duration::from_secs(60),
    )
    .to_string();
    let cases: Vec<(&str, serde_json::Value, String)> = vec![
        (
            "/phases",
            serde_json::json!([]),
            "complete is true but phases is empty".into(),
        ),
        (
            "/check",
            check(false, 0.25),
            "complete is true but check.passed is false (relative error 0.25, bound 1e-5): only \
             a run whose numerical check passed is recorded"
                .into(),
        ),
        (
            "/check",
            check(true, 0.25),
            "check.passed is true but check.relative_error 0.25 is not a finite number within \
             check.bound 1e-5"
                .into(),
        ),
        (
            "/phases/0/wall_seconds",
            serde_json::json!(-1.0),
            "phases[0].wall_seconds (model_load) is -1: a time is a finite number of seconds, 0 \
             or more"
                .into(),
        ),
        (
            "/device_init_seconds",
            serde_json::json!(-1.0),
            "device_init_seconds is -1:".into(),
        ),
        (
            "/phases/0/wall_seconds",
            serde_json::json!(1e308),
            "phases[0].wall_seconds (model_load) is 1e308 seconds, longer than the 7 days \
             (604800 seconds) of package b200:7:1: a run on the rental cannot outlast it"
                .into(),
        ),
        (
            "/phases/0/device_seconds",
            serde_json::json!(700_000.0),
            "phases[0].device_seconds (model_load) is 700000 seconds, longer than the 7 days"
                .into(),
        ),
        (
            "/started_utc",
            serde_json::json!("9999-01-01T00:00:00Z"),
            "started_utc \"9999-01-01T00:00:00Z\" is later than now (".into(),
        ),
    ];
    for (n, (pointer, value, words)) in cases.into_iter().enumerate() {
        let mut doc = document(100 + n as u64);
        *doc.pointer_mut(pointer).unwrap() = value;
        let path = dir.path().join(format!("bad{n}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        record(&grid, &protocol, &path, &args(&ok))
            .assert()
            .code(1)
            .stderr(predicate::str::contains(format!(
                "bad{n}.json is not a usable measurement: {words}"
            )));
    }
    // A run that started a minute ago cannot have taken an hour.
    let mut doc = document(200);
    doc["started_utc"] = serde_json::json!(soon);
    doc["phases"][0]["wall_seconds"] = serde_json::json!(3600.0);
    let path = dir.path().join("ends-later.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    record(&grid, &protocol, &path, &args(&ok))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(format!(
            "started_utc \"{soon}\" plus the 3600 seconds of device_init_seconds and the phases' \
             wall_seconds ends at"
        )));
    // JSON has no infinity: a number too large for a float is not JSON this tool reads.
    let text = serde_json::to_string_pretty(&document(201))
        .unwrap()
        .replacen("\"wall_seconds\": 0.0", "\"wall_seconds\": 1e999", 1);
    assert!(text.contains("1e999"));
    let path = dir.path().join("infinite.json");
    std::fs::write(&path, text).unwrap();
    record(&grid, &protocol, &path, &args(&ok))
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "infinite.json is not a usable measurement: not JSON (number out of range",
        ));
    assert_eq!(
        std::fs::read_to_string(&grid).unwrap(),
        format!("{HEADER}\n"),
        "a refused record changed the grid"
    );
    // The same document with possible figures is recorded.
    let mut doc = document(202);
    doc["check"] = check(true, 1e-7);
    doc["phases"][0]["wall_seconds"] = serde_json::json!(0.5);
    doc["started_utc"] = serde_json::json!(soon);
    let path = dir.path().join("possible.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    record(&grid, &protocol, &path, &args(&ok))
        .assert()
        .success()
        .stdout(predicate::str::contains("recorded run"));
}

/// Issue 27: `record` never writes a grid past [`ledger::grid::GRID_LIMIT`], the most `cost`
/// and `record` read. A grid 322 bytes under it and a row with a 900-character note: refused
/// (exit 2) with the way to a new grid, the grid unchanged and still read; the run then goes in
/// a new grid.
#[test]
fn record_refuses_to_grow_a_grid_past_what_its_readers_accept() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let ok = counts("b200:7:1", "r1", 10, 9);
    let m1 = write_measurement(dir.path(), 1, true);
    record(&grid, &protocol, &m1, &args(&ok)).assert().success();
    // Rows as `record` writes them, each another run (SHA-256 `i`), padded by their notes to
    // fill the grid to 322 bytes under the limit.
    let mut bytes = std::fs::read(&grid).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let line = text.lines().nth(1).unwrap();
    let sha = grid_rows(&grid)[0].get("measurement_sha256").to_string();
    let (_, rest) = line.split_once(',').unwrap();
    assert!(
        rest.ends_with(','),
        "a row with no notes ends with an empty field: {line}"
    );
    let row = |i: usize, notes: usize| {
        let other = format!("{i:064x}");
        format!(
            "{},{}{}\n",
            &other[..12],
            rest.replace(sha.as_str(), &other),
            "n".repeat(notes)
        )
    };
    let limit = ledger::grid::GRID_LIMIT as usize;
    let remaining = limit - 322 - bytes.len();
    let bare = row(1, 0).len();
    let rows = remaining.div_ceil(bare + ledger::grid::NOTES_MAX);
    for i in 0..rows {
        let len = remaining / rows + usize::from(i < remaining % rows);
        bytes.extend(row(i + 1, len - bare).into_bytes());
    }
    assert_eq!(bytes.len(), limit - 322);
    std::fs::write(&grid, &bytes).unwrap();

    let m2 = write_measurement(dir.path(), 2, true);
    let note = "x".repeat(900);
    let mut long = args(&ok);
    long.extend(["--notes", &note]);
    record(&grid, &protocol, &m2, &long)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "bytes with this row, over the 64 MiB (67108864 bytes) a results grid may hold, \
             which `record` and `cost` refuse to read; the grid is unchanged: record this run \
             and the next ones in a new grid, --results NEW.csv with a file that does not exist \
             yet",
        ));
    assert!(
        std::fs::read(&grid).unwrap() == bytes,
        "the grid was changed"
    );
    assert_eq!(temporaries(dir.path()), Vec::<String>::new());
    // Its readers still read it.
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains(format!("{} runs", rows + 1)));
    // And the run goes in a new grid.
    let new = dir.path().join("new.csv");
    record(&new, &protocol, &m2, &long)
        .assert()
        .success()
        .stdout(predicate::str::contains("line 2 (new grid)"));
}

/// Issue 11, item 6: a row cut anywhere (by an earlier version, a kill, a full disk, or by hand)
/// is reported by its line by every reader, and nothing is counted or added until it is fixed.
#[test]
fn a_torn_or_foreign_line_is_reported_by_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    for n in 1..=3 {
        let m = write_measurement(dir.path(), n, true);
        record(
            &grid,
            &protocol,
            &m,
            &args(&counts("b200:7:1", "r1", 10, 9)),
        )
        .assert()
        .success();
    }
    let whole = std::fs::read(&grid).unwrap();
    let m4 = write_measurement(dir.path(), 4, true);
    // Half of the last row, as the append of an earlier version left it.
    let cut = &whole[..whole.len() - 40];
    std::fs::write(&grid, cut).unwrap();
    for cmd in [
        record(
            &grid,
            &protocol,
            &m4,
            &args(&counts("b200:7:1", "r1", 10, 9)),
        ),
        {
            let mut c = iteragpu();
            c.arg("cost").arg("--results").arg(&grid);
            c
        },
    ] {
        let mut cmd = cmd;
        cmd.assert().code(1).stderr(predicate::str::contains(
            "line 4: the last line has no line end",
        ));
    }
    assert_eq!(
        std::fs::read(&grid).unwrap(),
        cut,
        "record changed a torn grid"
    );
    // A cut that still ends a line leaves a row with too few fields.
    let line_end = cut.iter().rposition(|b| *b == b',').unwrap();
    let mut short = cut[..line_end].to_vec();
    short.push(b'\n');
    std::fs::write(&grid, &short).unwrap();
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("line 4:"));
    // A hand-edited count that no longer agrees with threshold_met.
    let text = String::from_utf8(whole.clone()).unwrap();
    let forged = text.replacen(",10,9,0.9,true,", ",10,2,0.9,true,", 1);
    std::fs::write(&grid, forged).unwrap();
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "line 2: threshold_met is true but 2 of 10",
        ));
}

/// Runs `iteragpu` with a file-size limit (SIGXFSZ ignored, so a write past it fails with EFBIG
/// as on a full disk) of `blocks` blocks, in `dir`.
fn with_file_limit(dir: &Path, blocks: u64, args: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {blocks} && exec \"$0\" \"$@\""
        ))
        .arg(assert_cmd::cargo::cargo_bin("iteragpu"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The temporary files of this tool left in `dir`.
pub(crate) fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".iteragpu-"))
        .collect()
}

/// Issue 11, item 6: a write that fails (a full disk) leaves the grid as it was and no temporary
/// file, and says so once.
#[test]
fn a_full_disk_leaves_the_grid_whole() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    for n in 1..=6 {
        let m = write_measurement(dir.path(), n, true);
        record(
            &grid,
            &protocol,
            &m,
            &args(&counts("b200:7:1", "r1", 10, 9)),
        )
        .args(["--notes", &"a long note ".repeat(80)])
        .assert()
        .success();
    }
    let before = std::fs::read(&grid).unwrap();
    assert!(before.len() > 5000);
    let m = write_measurement(dir.path(), 7, true);
    let os = |s: &str| std::ffi::OsString::from(s);
    let out = with_file_limit(
        dir.path(),
        4,
        &[
            &os("record"),
            &os("--results"),
            grid.as_os_str(),
            &os("--protocol"),
            protocol.as_os_str(),
            &os("--measurement"),
            m.as_os_str(),
            &os("--rental"),
            &os("r1"),
            &os("--package"),
            &os("b200:7:1"),
            &os("--submitted"),
            &os("10"),
            &os("--accepted"),
            &os("9"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("File too large"), "{stderr}");
    assert_eq!(stderr.matches("os error").count(), 1, "{stderr}");
    assert_eq!(std::fs::read(&grid).unwrap(), before);
    assert!(
        temporaries(dir.path()).is_empty(),
        "{:?}",
        temporaries(dir.path())
    );
    record(
        &grid,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .assert()
    .success()
    .stdout(predicate::str::contains("line 8"));
}

/// Issue 11, item 7: `protocol init` and `protocol lock` on a full disk leave nothing (no empty
/// protocol, no empty lock), and the protocol can be locked afterwards.
#[test]
fn an_interrupted_init_or_lock_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let os = std::ffi::OsStr::new;
    let out = with_file_limit(dir.path(), 0, &[os("protocol"), os("init"), os("p.txt")]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.path().join("p.txt").exists(),
        "a 0-byte protocol was left"
    );
    assert!(temporaries(dir.path()).is_empty());

    let protocol = locked_protocol_as(dir.path(), "p.txt", &[]);
    std::fs::remove_file(dir.path().join("p.txt.lock")).unwrap();
    let out = with_file_limit(dir.path(), 0, &[os("protocol"), os("lock"), os("p.txt")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("could not write p.txt.lock: File too large"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("p.txt.lock").exists(),
        "an empty lock was left"
    );
    assert!(temporaries(dir.path()).is_empty());
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&protocol)
        .assert()
        .success();
}

/// Runs `iteragpu args` in `dir` under `strace`, the `nth` fsync failing with EIO (fault
/// injection by the kernel's tracer, no fake in the binary). `None` when strace is missing or
/// may not trace here (a container without ptrace).
fn with_failing_fsync(dir: &Path, nth: u32, args: &[&str]) -> Option<std::process::Output> {
    let works = std::process::Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works {
        eprintln!("strace is missing or cannot trace here: skipped");
        return None;
    }
    let output = std::process::Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=fsync,fdatasync",
            "-e",
        ])
        .arg(format!("inject=fsync,fdatasync:error=EIO:when={nth}"))
        .arg(assert_cmd::cargo::cargo_bin("iteragpu"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    Some(output)
}

/// Issue 11, item 7: a failed flush is a failure only while the data is not in place. The file's
/// own flush failing (before the rename) is exit 1 with nothing left; the folder's flush failing
/// (after the rename) is exit 0 with the file complete and a warning that says so.
#[test]
fn a_failed_flush_fails_before_the_data_is_in_place_and_warns_after() {
    let dir = tempfile::tempdir().unwrap();
    let Some(out) = with_failing_fsync(dir.path(), 1, &["protocol", "init", "a.txt"]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("could not write a.txt: Input/output error"),
        "{stderr}"
    );
    assert!(!dir.path().join("a.txt").exists());
    assert!(temporaries(dir.path()).is_empty());

    let out = with_failing_fsync(dir.path(), 2, &["protocol", "init", "b.txt"]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("b.txt is written and complete, but its folder could not be flushed"),
        "{stderr}"
    );
    let template = std::fs::read_to_string(dir.path().join("b.txt")).unwrap();
    assert!(template.contains("\ncorpus_id ="), "{template}");

    // The lock: the same two moments.
    let protocol = locked_protocol_as(dir.path(), "p.txt", &[]);
    std::fs::remove_file(dir.path().join("p.txt.lock")).unwrap();
    let out = with_failing_fsync(dir.path(), 1, &["protocol", "lock", "p.txt"]).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.path().join("p.txt.lock").exists());
    let out = with_failing_fsync(dir.path(), 2, &["protocol", "lock", "p.txt"]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("its folder could not be flushed"),
        "{stderr}"
    );
    assert!(temporaries(dir.path()).is_empty());
    // The lock written under the warning is a whole lock: the protocol is usable.
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&protocol)
        .assert()
        .code(predicate::ne(0))
        .stderr(predicate::str::contains("already locked"));
}

/// Issue 11, item 9: a results path that is a link to nothing is refused, as `measure`, `kit` and
/// `report` refuse it; its target is not created. A link to a grid is followed.
#[test]
fn record_refuses_a_dangling_link_and_follows_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let m = write_measurement(dir.path(), 1, true);
    let link = dir.path().join("results.csv");
    let target = dir.path().join("elsewhere.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    record(
        &link,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains(
        "is a symbolic link to a file that does not exist",
    ));
    assert!(!target.exists(), "the link's target was created");
    std::fs::write(&target, format!("{HEADER}\n")).unwrap();
    record(
        &link,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .assert()
    .success();
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(grid_rows(&target).len(), 1);
}

/// Issue 11, item 10: a cell that a spreadsheet would run as a formula is stored as text, and a
/// control character or escape sequence from a document never reaches the terminal raw.
#[test]
fn formulas_are_neutralised_and_escapes_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let evil = "=cmd|' /C calc'!A0\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m";
    let m = write_gpu_measurement(dir.path(), 1, true, evil);
    let out = record(
        &grid,
        &protocol,
        &m,
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .args([
        "--notes",
        "=HYPERLINK(\"http://x.invalid\",\"click\")",
        "--allow-device-mismatch",
    ])
    .assert()
    .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let raw = |s: &str| s.contains(['\u{1b}', '\u{7}', '\u{9b}']);
    assert!(!raw(&stdout), "{stdout:?}");
    let rows = grid_rows(&grid);
    assert_eq!(
        rows[0].get("notes"),
        "'=HYPERLINK(\"http://x.invalid\",\"click\")"
    );
    let model = rows[0].get("device_model");
    assert!(model.starts_with("'=cmd"), "{model}");
    assert!(!raw(model) && model.contains("\\u{1b}"), "{model}");
    for json in [false, true] {
        let mut cmd = iteragpu();
        cmd.arg("cost").arg("--results").arg(&grid);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.assert().success();
        let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
        assert!(!raw(&stdout), "{stdout:?}");
    }
    // A path with an escape sequence in an error message.
    let out = record(
        &grid,
        &protocol,
        &dir.path().join("x\u{1b}[2J.json"),
        &args(&counts("b200:7:1", "r1", 10, 9)),
    )
    .assert()
    .code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        !raw(&stderr) && stderr.contains("x\\u{1b}[2J.json"),
        "{stderr:?}"
    );
    // A corpus id that starts like a formula cannot be locked.
    let path = dir.path().join("evil.txt");
    iteragpu()
        .args(["protocol", "init"])
        .arg(&path)
        .assert()
        .success();
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (key, value) in FILLED {
        let value = if key == "corpus_id" { "=1+2" } else { value };
        text = text.replace(&format!("\n{key} =\n"), &format!("\n{key} = {value}\n"));
    }
    std::fs::write(&path, text).unwrap();
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "corpus_id = \"=1+2\" is not valid",
        ));
}

/// Eight processes appending a hundred rows each (one `iteragpu record` per row) lose none and
/// corrupt none.
#[test]
fn eight_concurrent_writers_lose_nothing() {
    const WRITERS: u64 = 8;
    const ROWS: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let exe = assert_cmd::cargo::cargo_bin("iteragpu");
    let measurements: Vec<PathBuf> = (0..WRITERS * ROWS)
        .map(|n| write_measurement(dir.path(), n, true))
        .collect();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (exe, grid, protocol, measurements) = (&exe, &grid, &protocol, &measurements);
            s.spawn(move || {
                for i in 0..ROWS {
                    let n = w * ROWS + i;
                    let out = std::process::Command::new(exe)
                        .arg("record")
                        .arg("--results")
                        .arg(grid)
                        .arg("--protocol")
                        .arg(protocol)
                        .arg("--measurement")
                        .arg(&measurements[n as usize])
                        .args(["--rental", &format!("writer-{w}")])
                        .args(["--package", "b200:7:1", "--submitted", "10", "--accepted"])
                        .arg((n % 11).to_string())
                        .args(["--notes", &format!("writer {w}, row {i}")])
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            });
        }
    });
    let text = std::fs::read_to_string(&grid).unwrap();
    assert!(text.ends_with('\n'));
    assert_eq!(text.lines().count() as u64, 1 + WRITERS * ROWS);
    let mut notes = std::collections::BTreeSet::new();
    let mut shas = std::collections::BTreeSet::new();
    for row in grid_rows(&grid) {
        assert!(notes.insert(row.get("notes").to_string()));
        assert!(shas.insert(row.get("measurement_sha256").to_string()));
    }
    assert_eq!(notes.len() as u64, WRITERS * ROWS);
    for w in 0..WRITERS {
        for i in 0..ROWS {
            assert!(notes.contains(&format!("writer {w}, row {i}")));
        }
    }
    assert!(temporaries(dir.path()).is_empty());
    // And every reader accepts the result.
    assert_eq!(cost_json(&grid)["runs"], WRITERS * ROWS);
}

/// The duplicate check and the append happen under one lock: of eight processes started at once
/// with the same measurement, exactly one records it.
#[test]
fn concurrent_duplicates_are_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = dir.path().join("created-by-the-race.csv");
    let exe = assert_cmd::cargo::cargo_bin("iteragpu");
    for round in 0..5 {
        let m = write_measurement(dir.path(), round, true);
        let children: Vec<_> = (0..8)
            .map(|_| {
                std::process::Command::new(&exe)
                    .arg("record")
                    .arg("--results")
                    .arg(&grid)
                    .arg("--protocol")
                    .arg(&protocol)
                    .arg("--measurement")
                    .arg(&m)
                    .args(counts("b200:7:1", "r1", 10, 9))
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outcomes: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let ok = outcomes.iter().filter(|o| o.status.success()).count();
        assert_eq!(
            ok, 1,
            "round {round}: {ok} processes recorded the same measurement"
        );
        for o in outcomes.iter().filter(|o| !o.status.success()) {
            assert!(String::from_utf8_lossy(&o.stderr).contains("already recorded"));
        }
    }
    assert_eq!(
        std::fs::read_to_string(&grid).unwrap().lines().count(),
        1 + 5
    );
}

/// The whole path on real CPU-device measurements: measure twice, lock a protocol, record both
/// runs (a rehearsal: `--allow-device-mismatch`), price an accepted unit; a tampered protocol is
/// then refused.
#[test]
fn end_to_end_on_real_cpu_measurements() {
    let dir = tempfile::tempdir().unwrap();
    for (name, seed) in [("run-a.json", "0"), ("run-b.json", "1")] {
        iteragpu()
            .current_dir(dir.path())
            .args([
                "measure",
                "--device",
                "cpu",
                "--batch",
                "1",
                "--context",
                "16",
            ])
            .args(["--width", "64", "--seed", seed, "--output", name])
            .assert()
            .success();
    }
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    let (a, b) = (dir.path().join("run-a.json"), dir.path().join("run-b.json"));
    record(
        &grid,
        &protocol,
        &a,
        &args(&counts("h200:7:1", "rehearsal", 300, 290)),
    )
    .arg("--allow-device-mismatch")
    .assert()
    .success()
    .stdout(predicate::str::contains("290 of 300 units accepted"));
    // A second run on the same corpus with fewer accepted units: not new units.
    record(
        &grid,
        &protocol,
        &b,
        &args(&counts("h200:7:1", "rehearsal", 300, 280)),
    )
    .arg("--allow-device-mismatch")
    .assert()
    .success();
    let expected = unit_price(lot_price("h200", 7), 290);
    let doc = cost_json(&grid);
    assert_eq!(doc["rentals"][0]["accepted_units"], 290);
    assert_eq!(doc["rentals"][0]["unit_price_cents"], expected.as_str());
    // The grid links each row to its measurement file by SHA-256.
    let text = std::fs::read_to_string(&grid).unwrap();
    assert!(text.contains(&sha256(&std::fs::read(&a).unwrap())));
    assert!(text.contains(&sha256(&std::fs::read(&b).unwrap())));

    let mut tampered = std::fs::read_to_string(&protocol).unwrap();
    tampered.push_str("# edited after the lock\n");
    std::fs::write(&protocol, tampered).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["measure", "--device", "cpu", "--output", "run-c.json"])
        .assert()
        .success();
    record(
        &grid,
        &protocol,
        &dir.path().join("run-c.json"),
        &args(&counts("h200:7:1", "rehearsal", 1, 1)),
    )
    .arg("--allow-device-mismatch")
    .assert()
    .failure()
    .stderr(predicate::str::contains("was changed after it was locked"));
}

/// Issue 11, item 5: docs/quality-protocol.md's example is the tool's real workflow: its protocol
/// file is locked, its commands run in order, and each prints what the page shows (times,
/// hashes and the CPU's name aside).
#[test]
fn the_quality_protocol_example_runs_as_written() {
    let doc = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/quality-protocol.md"
    ));
    let dir = tempfile::tempdir().unwrap();
    // The example file: the ```text block after its marker.
    let marker = "<!-- example-file: protocol.txt -->\n```text\n";
    let start = doc.find(marker).expect("the example protocol") + marker.len();
    let end = start + doc[start..].find("```\n").unwrap();
    std::fs::write(dir.path().join("protocol.txt"), &doc[start..end]).unwrap();
    // Every console block, in order.
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut rest = doc;
    while let Some(at) = rest.find("```console\n") {
        let block = &rest[at + 11..];
        let close = block.find("```\n").unwrap();
        for chunk in block[..close].split("$ ").filter(|c| !c.is_empty()) {
            let (cmd, out) = chunk.split_once('\n').unwrap();
            steps.push((cmd.to_string(), out.to_string()));
        }
        rest = &block[close..];
    }
    assert!(steps.len() >= 8, "{steps:?}");
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (cmd, expected) in steps {
        assert!(cmd.starts_with("iteragpu "), "{cmd}");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{cmd} 2>&1"))
            .env("PATH", &path)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let actual = String::from_utf8(out.stdout).unwrap();
        assert_eq!(normalise(&actual), normalise(&expected), "$ {cmd}");
    }
}

/// What differs from one machine and one moment to the next: times, hashes, the CPU's name.
fn normalise(text: &str) -> String {
    let mut text = text.to_string();
    for (pattern, with) in [
        (r"\b[0-9a-f]{64}\b", "<sha256>"),
        (r"\b[0-9a-f]{12}\b", "<run>"),
        (r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", "<time>"),
        (
            r"device .+ \(cpu-reference, driver none\)",
            "device <cpu> (cpu-reference, driver none)",
        ),
        (
            r"the CPU reference device \(.+\), not on",
            "the CPU reference device (<cpu>), not on",
        ),
        (
            r"measured on .+ \(cpu-reference\), not",
            "measured on <cpu> (cpu-reference), not",
        ),
    ] {
        text = regex::Regex::new(pattern)
            .unwrap()
            .replace_all(&text, with)
            .into_owned();
    }
    text
}

/// `record`'s counts are read as `price --accepted-results` is: plain digits, one spelling,
/// refused with a sentence before any file is read.
#[test]
fn record_counts_are_plain_digits() {
    for (option, value, says) in [
        ("--submitted", "+3", "units submitted `+3` has a `+` sign"),
        (
            "--submitted",
            "03",
            "units submitted `03` has a leading zero",
        ),
        ("--submitted", "0", "units submitted `0` is zero"),
        (
            "--accepted",
            " 3",
            "units accepted ` 3` has spaces around the digits",
        ),
        ("--accepted", "-1", "units accepted `-1` is negative"),
    ] {
        let mut args = vec![
            "record",
            "--results",
            "/nonexistent/grid.csv",
            "--protocol",
            "/nonexistent/p.txt",
            "--measurement",
            "/nonexistent/m.json",
            "--rental",
            "a",
            "--package",
            "b200:7:1",
            "--submitted",
            "5",
            "--accepted",
            "3",
        ];
        let at = args.iter().position(|a| *a == option).unwrap();
        args[at + 1] = value;
        assert_cmd::Command::cargo_bin("iteragpu")
            .unwrap()
            .args(&args)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(says));
    }
}
