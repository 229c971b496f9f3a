//! `iteragpu measure` end to end on the CPU reference device, and its refusals.

use std::path::Path;

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// The original's small example on the CPU device; `extra` pairs replace an option's value (a
/// lone flag such as `--json` is added).
fn measure(dir: &Path, file: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    let mut options: Vec<(String, Option<String>)> = [
        ("--device", "cpu"),
        ("--batch", "1"),
        ("--context", "16"),
        ("--width", "64"),
        ("--dtype", "float32"),
        ("--warmup", "1"),
        ("--repeats", "2"),
        ("--output", file),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
    .collect();
    let mut it = extra.iter().peekable();
    while let Some(key) = it.next() {
        let value = it
            .next_if(|v| !v.starts_with("--") || v.parse::<f64>().is_ok())
            .map(|v| v.to_string());
        match options.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => options.push((key.to_string(), value)),
        }
    }
    let args: Vec<String> = std::iter::once("measure".to_string())
        .chain(
            options
                .into_iter()
                .flat_map(|(k, v)| std::iter::once(k).chain(v)),
        )
        .collect();
    iteragpu().current_dir(dir).args(&args).assert()
}

fn schema_validator() -> jsonschema::Validator {
    let schema: Value =
        serde_json::from_str(include_str!("../../../../docs/measurement.schema.json")).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn assert_valid(doc: &Value) {
    let validator = schema_validator();
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema errors: {errors:#?}");
}

#[test]
fn the_original_small_example_runs_on_the_cpu_reference() {
    let dir = tempfile::tempdir().unwrap();
    measure(dir.path(), "m.json", &[])
        .success()
        .stdout(predicate::str::contains("CPU REFERENCE DEVICE"))
        .stdout(predicate::str::contains("check: passed"));
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("m.json")).unwrap()).unwrap();
    assert_valid(&doc);
    assert_eq!(doc["complete"], true);
    assert_eq!(doc["environment"]["reference_device"], true);
    let phases: Vec<&str> = doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["phase"].as_str().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "model_load",
            "inputs",
            "cold_forward",
            "warmup",
            "warm_forward",
            "warm_forward"
        ]
    );
    assert_eq!(doc["phases"][0]["memory"]["end_allocated_bytes"], 132_608);
    assert!(doc["phases"][0]["device_seconds"].is_null());
    // Only the document is left in the folder: no temporary file.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn every_dtype_and_the_larger_case_validate() {
    let dir = tempfile::tempdir().unwrap();
    for (i, dtype) in ["float16", "bfloat16"].iter().enumerate() {
        let file = format!("m{i}.json");
        measure(dir.path(), &file, &["--dtype", dtype]).success();
        let doc: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(&file)).unwrap()).unwrap();
        assert_valid(&doc);
        assert_eq!(doc["configuration"]["dtype"], *dtype);
        assert_eq!(doc["check"]["passed"], true);
    }
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "2",
            "--context",
            "128",
            "--width",
            "1024",
        ])
        .args([
            "--dtype",
            "float32",
            "--warmup",
            "1",
            "--repeats",
            "2",
            "--output",
            "large.json",
            "--json",
        ])
        .assert()
        .success();
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("large.json")).unwrap()).unwrap();
    assert_valid(&doc);
    assert_eq!(
        doc["synthetic_model"]["forward_flops"],
        4u64 * 256 * 1024 * 4096
    );
}

#[test]
fn json_flag_prints_exactly_the_document_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = measure(dir.path(), "m.json", &["--json"])
        .success()
        .get_output()
        .stdout
        .clone();
    let printed: Value = serde_json::from_slice(&out).unwrap();
    let written: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("m.json")).unwrap()).unwrap();
    assert_eq!(printed, written);
}

#[test]
fn an_existing_output_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.json"), "precious").unwrap();
    measure(dir.path(), "m.json", &[])
        .code(2)
        .stderr(predicate::str::contains("m.json already exists"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("m.json")).unwrap(),
        "precious"
    );
}

#[test]
fn a_missing_folder_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    measure(dir.path(), "nope/m.json", &[])
        .code(2)
        .stderr(predicate::str::contains(
            "the folder nope for nope/m.json does not exist",
        ));
}

#[test]
fn bad_options_name_the_value() {
    let dir = tempfile::tempdir().unwrap();
    measure(dir.path(), "m.json", &["--batch", "0"])
        .code(2)
        .stderr(predicate::str::contains("--batch must be at least 1"));
    measure(dir.path(), "m.json", &["--dtype", "fp8"])
        .code(2)
        .stderr(predicate::str::contains("fp8"));
    measure(dir.path(), "m.json", &["--width", "-3"])
        .code(2)
        .stderr(predicate::str::contains("-3"));
    iteragpu()
        .current_dir(dir.path())
        .args(["measure", "--device", "tpu:0", "--output", "m.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"tpu:0\" is not a device"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn a_run_too_large_for_the_machine_is_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    // Each tensor stays under the 2^31 element bound, but weights, input and output take four
    // times 8 GiB in float32. On a machine with that much free memory the run would be allowed,
    // so the test only speaks where it cannot fit (CI and development machines have 24 GiB).
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .map(str::to_string)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map(|kib| kib * 1024);
    if available.is_none_or(|a| a > 30 << 30) {
        eprintln!("skipped: this machine could hold the run ({available:?} bytes available)");
        return;
    }
    iteragpu()
        .current_dir(dir.path())
        .args([
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "2047",
        ])
        .args([
            "--width", "1048576", "--hidden", "2047", "--output", "m.json",
        ])
        .assert()
        .code(1)
        .stderr(
            predicate::str::contains("needs an estimated")
                .and(predicate::str::contains("available")),
        );
    assert!(!dir.path().join("m.json").exists());
}

#[test]
fn cuda_without_a_driver_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // An empty folder first on the loader path hides nothing here (there is no driver on CI);
    // the point is the refusal: exit 2, the sentence, no file.
    iteragpu()
        .current_dir(dir.path())
        .env("LD_LIBRARY_PATH", dir.path())
        .args(["measure", "--device", "cuda:0", "--output", "m.json"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--device cuda:0: no usable GPU"))
        .stderr(predicate::str::contains("nothing was written"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
