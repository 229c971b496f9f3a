//! `iteragpu estimate`, end to end.

use assert_cmd::cargo::cargo_bin_cmd;
use predicates::prelude::*;

fn estimate(args: &[&str]) -> assert_cmd::assert::Assert {
    cargo_bin_cmd!("iteragpu")
        .arg("estimate")
        .args(args)
        .assert()
}

#[test]
fn the_issue_example_prints_every_figure() {
    estimate(&[
        "--parameters",
        "7000000000",
        "--bits",
        "16",
        "--reserve-gib",
        "4",
    ])
    .success()
    .stdout(predicate::str::contains("weight bytes        14000000000"))
    .stdout(predicate::str::contains("weight GiB (2^30)   13.0385"))
    .stdout(predicate::str::contains("weight GB (10^9)    14.0000"))
    .stdout(predicate::str::contains("reserve (assumed)   4.0000 GiB"))
    .stdout(predicate::str::contains("total               17.0385 GiB"))
    .stdout(predicate::str::contains(
        "not a guarantee that a model fits",
    ))
    .stdout(predicate::str::contains(
        "Not included: activations, KV cache",
    ))
    .stderr(predicate::str::is_empty());
}

#[test]
fn json_is_one_document_with_the_issue_keys() {
    let out = estimate(&[
        "--parameters",
        "7B",
        "--bits",
        "16",
        "--reserve-gib",
        "4",
        "--json",
    ])
    .success()
    .get_output()
    .stdout
    .clone();
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("one JSON document");
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "bits",
            "bytes_per_parameter",
            "excluded",
            "parameters",
            "reserve_gib",
            "total_gib",
            "weight_bytes",
            "weight_gb",
            "weight_gib"
        ]
    );
    assert_eq!(doc["parameters"], 7_000_000_000u64);
    assert_eq!(doc["bits"], 16);
    assert_eq!(doc["bytes_per_parameter"], 2);
    assert_eq!(doc["weight_bytes"], 14_000_000_000u64);
    assert_eq!(doc["weight_gib"], "13.0385");
    assert_eq!(doc["weight_gb"], "14.0000");
    assert_eq!(doc["reserve_gib"], "4.0000");
    assert_eq!(doc["total_gib"], "17.0385");
    let excluded: Vec<&str> = doc["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for item in ["activations", "KV cache", "gradients", "optimizer state"] {
        assert!(excluded.contains(&item), "{item} missing from {excluded:?}");
    }
    assert!(
        excluded
            .iter()
            .any(|e| e.starts_with("quantisation metadata"))
    );
    assert!(excluded.iter().any(|e| e.starts_with("runtime libraries")));
}

#[test]
fn other_notations_give_the_same_count() {
    for n in ["7e9", "7_000_000_000", "7B", "7000M", "7.0B", "0.007T"] {
        estimate(&["--parameters", n, "--bits", "16"])
            .success()
            .stdout(predicate::str::contains("parameters          7000000000\n"));
    }
    // 4-bit weights take one whole byte each here.
    estimate(&["--parameters", "70B", "--bits", "4"])
        .success()
        .stdout(predicate::str::contains("weight bytes        70000000000"))
        .stdout(predicate::str::contains("reserve (assumed)   none"));
}

#[test]
fn bad_input_is_refused_with_a_sentence_naming_it() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--parameters", "0", "--bits", "16"],
            "parameter count `0` is zero",
        ),
        (
            &["--parameters", "-5", "--bits", "16"],
            "parameter count `-5` is negative",
        ),
        (
            &["--parameters", "abc", "--bits", "16"],
            "parameter count `abc` is not a number",
        ),
        (
            &["--parameters", "1.5", "--bits", "16"],
            "parameter count `1.5` is not a whole number",
        ),
        (
            &["--parameters", "1.00000000001B", "--bits", "16"],
            "parameter count `1.00000000001B` is not a whole number",
        ),
        (
            &["--parameters", "18446744073709551616", "--bits", "16"],
            "parameter count `18446744073709551616` is larger than 18446744073709551615",
        ),
        (
            &["--parameters", "7B", "--bits", "0"],
            "bits per parameter `0` is not accepted; expected a whole number from 1 to 64",
        ),
        (
            &["--parameters", "7B", "--bits", "65"],
            "bits per parameter `65` is not accepted; expected a whole number from 1 to 64",
        ),
        (
            &["--parameters", "7B", "--bits", "16", "--reserve-gib", "-1"],
            "reserve `-1` GiB is negative",
        ),
        (
            &["--parameters", "7B", "--bits", "16", "--reserve-gib", "NaN"],
            "reserve `NaN` is not a finite number",
        ),
        (
            &["--parameters", "7B", "--bits", "16", "--reserve-gib", "inf"],
            "reserve `inf` is not a finite number",
        ),
    ];
    for (args, says) in cases {
        estimate(args)
            .code(2)
            .stdout(predicate::str::is_empty())
            .stderr(predicate::str::contains(*says))
            .stderr(predicate::str::contains("expected"))
            .stderr(predicate::str::contains("panicked").not());
    }
}

#[test]
fn missing_options_are_usage_errors() {
    estimate(&["--bits", "16"])
        .code(2)
        .stderr(predicate::str::contains("--parameters"));
}

#[test]
fn help_teaches_with_examples() {
    estimate(&["--help"])
        .success()
        .stdout(predicate::str::contains(
            "iteragpu estimate --parameters 7000000000 --bits 16 --reserve-gib 4",
        ))
        .stdout(predicate::str::contains("not a guarantee"));
}
