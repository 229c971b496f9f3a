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

const HEADER: &str = "run_id,date_utc,protocol_sha256,corpus_id,gpu,days,lots,device_model,device_uuid,driver_version,measurement_sha256,units_submitted,units_accepted,acceptance_threshold,threshold_met,notes";

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
        environment: lab::cpu::environment(ToolInfo::new(None)),
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

fn write_measurement(dir: &Path, n: u64, complete: bool) -> PathBuf {
    let path = dir.join(format!("m{n}.json"));
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&measurement(n, complete)).unwrap(),
    )
    .unwrap();
    path
}

const FILLED: [(&str, &str); 8] = [
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
];

/// `protocol init`, fill every field, `protocol lock`.
fn locked_protocol(dir: &Path) -> PathBuf {
    let path = dir.join("protocol.txt");
    iteragpu()
        .args(["protocol", "init"])
        .arg(&path)
        .assert()
        .success()
        .stdout(predicate::str::contains("fill in every field"));
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (key, value) in FILLED {
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
    let m2 = write_measurement(dir.path(), 2, true);

    record(
        &grid,
        &protocol,
        &m1,
        &[
            "--package",
            "b200:7:2",
            "--submitted",
            "500",
            "--accepted",
            "473",
        ],
    )
    .assert()
    .success()
    .stdout(predicate::str::contains("line 2"))
    .stdout(predicate::str::contains(
        "473 of 500 units accepted (threshold 0.9: met)",
    ))
    .stdout(predicate::str::contains("cpu-reference"));
    let out = record(
        &grid,
        &protocol,
        &m2,
        &[
            "--package",
            "h100-sxm:3:1",
            "--submitted",
            "200",
            "--accepted",
            "150",
            "--notes",
            "second run, queue drift",
            "--json",
        ],
    )
    .assert()
    .success();
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["line"], 3);
    assert_eq!(doc["row"]["threshold_met"], false);

    let text = std::fs::read_to_string(&grid).unwrap();
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
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2);
    let sha1 = sha256(&std::fs::read(&m1).unwrap());
    let r = &rows[0];
    assert_eq!(&r[0], &sha1[..12]);
    assert_eq!(&r[1], "2026-09-24T08:00:01Z");
    assert_eq!(&r[2], protocol_sha);
    assert_eq!(&r[3], "tickets-v3");
    assert_eq!((&r[4], &r[5], &r[6]), ("b200", "7", "2"));
    assert_eq!(&rows[1][4], "h100-sxm");
    assert_eq!((&r[8], &r[9]), ("cpu-reference", "none"));
    assert_eq!(&r[10], sha1);
    assert_eq!(
        (&r[11], &r[12], &r[13], &r[14]),
        ("500", "473", "0.9", "true")
    );
    assert_eq!(&rows[1][15], "second run, queue drift");
    assert_eq!(&rows[1][14], "false");

    // cost: the whole package price over the distinct accepted units.
    let b200 = unit_price(2 * lot_price("b200", 7), 473);
    let h100 = unit_price(lot_price("h100-sxm", 3), 150);
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains("b200:7:2 (NVIDIA B200)"))
        .stdout(predicate::str::contains(format!(
            "({b200} cents = package price / 473"
        )))
        .stdout(predicate::str::contains(format!(
            "({h100} cents = package price / 150"
        )));
    let out = iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .arg("--json")
        .assert()
        .success();
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["packages"][0]["gpu"], "b200");
    assert_eq!(doc["packages"][0]["accepted_units"], 473);
    assert_eq!(
        doc["packages"][0]["total_price_cents"],
        2 * lot_price("b200", 7)
    );
    assert_eq!(doc["packages"][0]["unit_price_cents"], b200.as_str());
    assert_eq!(doc["packages"][1]["unit_price_cents"], h100.as_str());
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

#[test]
fn cost_counts_a_corpus_once_and_prices_nothing_as_null() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
    for (n, package, accepted) in [
        (1, "b200:7:1", "400"),
        (2, "b200:7:1", "450"),
        (3, "l40s:3:1", "0"),
    ] {
        let m = write_measurement(dir.path(), n, true);
        record(
            &grid,
            &protocol,
            &m,
            &[
                "--package",
                package,
                "--submitted",
                "500",
                "--accepted",
                accepted,
            ],
        )
        .assert()
        .success();
    }
    let out = iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .arg("--json")
        .assert()
        .success();
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let b200 = &doc["packages"][0];
    assert_eq!(b200["runs"], 2);
    assert_eq!(
        b200["accepted_units"], 450,
        "a repeat of the same corpus added units"
    );
    assert_eq!(
        b200["unit_price_cents"],
        unit_price(lot_price("b200", 7), 450).as_str()
    );
    let l40s = &doc["packages"][1];
    assert_eq!(l40s["accepted_units"], 0);
    assert!(l40s["unit_price_cents"].is_null());
    iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .assert()
        .success()
        .stdout(predicate::str::contains("none (no accepted units"));
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
        &[
            "--package",
            "b200:7:1",
            "--submitted",
            "10",
            "--accepted",
            "6",
        ],
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
    record(
        &grid,
        &path,
        &m,
        &[
            "--package",
            "b200:7:1",
            "--submitted",
            "1",
            "--accepted",
            "1",
        ],
    )
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
    let ok = [
        "--package",
        "b200:7:1",
        "--submitted",
        "10",
        "--accepted",
        "9",
    ];
    record(&grid, &protocol, &m, &ok).assert().success();
    let after_one = std::fs::read(&grid).unwrap();

    // The same measurement again.
    record(&grid, &protocol, &m, &ok).assert().code(1).stderr(
        predicate::str::contains("is already recorded").and(predicate::str::contains("line 2")),
    );
    // An incomplete measurement.
    let incomplete = write_measurement(dir.path(), 2, false);
    record(&grid, &protocol, &incomplete, &ok)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "incomplete measurement (complete: false, out of memory in cold_forward)",
        ));
    // Not a measurement at all.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{\"schema\": \"something else\"}").unwrap();
    record(&grid, &protocol, &junk, &ok)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is not a usable measurement"));

    let m3 = write_measurement(dir.path(), 3, true);
    // Counts and packages.
    record(
        &grid,
        &protocol,
        &m3,
        &[
            "--package",
            "b200:7:1",
            "--submitted",
            "10",
            "--accepted",
            "11",
        ],
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains(
        "--accepted 11 exceeds --submitted 10",
    ));
    record(
        &grid,
        &protocol,
        &m3,
        &[
            "--package",
            "b200:7:1",
            "--submitted",
            "501",
            "--accepted",
            "1",
        ],
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains(
        "exceeds the protocol's corpus_size 500",
    ));
    record(
        &grid,
        &protocol,
        &m3,
        &[
            "--package",
            "b200:5:1",
            "--submitted",
            "10",
            "--accepted",
            "9",
        ],
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains("days must be 3, 7 or 30"));
    record(
        &grid,
        &protocol,
        &m3,
        &[
            "--package",
            "b200:7:0",
            "--submitted",
            "10",
            "--accepted",
            "9",
        ],
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains("lots must be a whole number >= 1"));
    record(
        &grid,
        &protocol,
        &m3,
        &[
            "--package",
            "b200:7:1",
            "--submitted",
            "10",
            "--accepted",
            "9",
            "--notes",
            "two\nlines",
        ],
    )
    .assert()
    .code(2)
    .stderr(predicate::str::contains("--notes must be one line"));
    assert_eq!(
        std::fs::read(&grid).unwrap(),
        after_one,
        "a refused record changed the grid"
    );

    // A grid whose header does not match.
    let other = dir.path().join("other.csv");
    std::fs::write(&other, "run_id,date_utc,gpu\n").unwrap();
    record(&other, &protocol, &m3, &ok)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "does not start with the results grid header",
        ));
    assert_eq!(
        std::fs::read_to_string(&other).unwrap(),
        "run_id,date_utc,gpu\n"
    );
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
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut notes = std::collections::BTreeSet::new();
    let mut shas = std::collections::BTreeSet::new();
    for record in reader.records() {
        let record = record.unwrap();
        assert_eq!(record.len(), 16);
        assert!(notes.insert(record[15].to_string()));
        assert!(shas.insert(record[10].to_string()));
    }
    assert_eq!(notes.len() as u64, WRITERS * ROWS);
    for w in 0..WRITERS {
        for i in 0..ROWS {
            assert!(notes.contains(&format!("writer {w}, row {i}")));
        }
    }
}

/// The duplicate check and the append happen under one lock: of eight processes started at once
/// with the same measurement, exactly one records it.
#[test]
fn concurrent_duplicates_are_recorded_once() {
    let dir = tempfile::tempdir().unwrap();
    let protocol = locked_protocol(dir.path());
    let grid = grid(dir.path());
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
                    .args([
                        "--package",
                        "b200:7:1",
                        "--submitted",
                        "10",
                        "--accepted",
                        "9",
                    ])
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
/// runs, price an accepted unit; a tampered protocol is then refused.
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
        &[
            "--package",
            "h200:7:1",
            "--submitted",
            "300",
            "--accepted",
            "290",
        ],
    )
    .assert()
    .success()
    .stdout(predicate::str::contains("290 of 300 units accepted"));
    // A second run on the same corpus with fewer accepted units: not new units.
    record(
        &grid,
        &protocol,
        &b,
        &[
            "--package",
            "h200:7:1",
            "--submitted",
            "300",
            "--accepted",
            "280",
        ],
    )
    .assert()
    .success();
    let expected = unit_price(lot_price("h200", 7), 290);
    let out = iteragpu()
        .arg("cost")
        .arg("--results")
        .arg(&grid)
        .arg("--json")
        .assert()
        .success();
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["packages"][0]["accepted_units"], 290);
    assert_eq!(doc["packages"][0]["unit_price_cents"], expected.as_str());
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
        &[
            "--package",
            "h200:7:1",
            "--submitted",
            "1",
            "--accepted",
            "1",
        ],
    )
    .assert()
    .failure()
    .stderr(predicate::str::contains("was changed after it was locked"));
}
