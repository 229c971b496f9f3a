//! Errors, whatever the command: one line on stderr, or with `--json` one JSON object
//! `{"error": ..., "exit_code": ...}`, and the exit code it names; clap's own refusals included.

use assert_cmd::Command;
use serde_json::Value;

/// Runs `args`, checks the exit code, an empty stdout and one stderr line, and returns it.
fn one_line_error(args: &[&str], code: i32) -> String {
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(args)
        .assert()
        .code(code)
        .get_output()
        .clone();
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    assert!(stderr.ends_with('\n'));
    stderr.trim_end().to_string()
}

fn json_error(args: &[&str], code: i32) -> Value {
    let line = one_line_error(args, code);
    let doc: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let keys: Vec<&String> = doc.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["error", "exit_code"], "{doc}");
    assert_eq!(doc["exit_code"], code, "{doc}");
    assert!(
        !doc["error"]
            .as_str()
            .unwrap()
            .starts_with("iteragpu: error")
    );
    doc
}

#[test]
fn with_json_a_usage_error_is_one_json_object() {
    let doc = json_error(
        &[
            "price", "--gpu", "h100", "--days", "7", "--lots", "1", "--json",
        ],
        2,
    );
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains("did you mean `h100-sxm`")
    );
}

#[test]
fn with_json_a_runtime_failure_is_one_json_object_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "not,a,catalogue\n").unwrap();
    let doc = json_error(
        &[
            "price",
            "--list",
            "--catalogue",
            bad.to_str().unwrap(),
            "--json",
        ],
        1,
    );
    assert!(doc["error"].as_str().unwrap().contains("bad.csv"), "{doc}");
}

#[test]
fn with_json_clap_refusals_are_json_too() {
    let doc = json_error(&["price", "--gpu", "b200", "--days", "7", "--json"], 2);
    let message = doc["error"].as_str().unwrap();
    assert!(message.contains("--lots <L>"), "{message}");
    let doc = json_error(
        &["estimate", "--bits", "16", "--parameters", "x", "--json"],
        2,
    );
    assert!(doc["error"].as_str().unwrap().contains("`x`"), "{doc}");
    json_error(&["price", "--no-such-option", "--json"], 2);
}

#[test]
fn without_json_clap_refusals_keep_the_tools_one_line_style() {
    let line = one_line_error(&["price", "--gpu", "b200", "--days", "7"], 2);
    assert_eq!(
        line,
        "iteragpu: error: the following required arguments were not provided: --lots <L> (usage: \
         iteragpu price --gpu <GPU> --days <D> --lots <L>; --help explains every option)"
    );
    let line = one_line_error(&["estimat"], 2);
    assert!(
        line.starts_with("iteragpu: error: unrecognized subcommand 'estimat'"),
        "{line}"
    );
    assert!(
        line.contains("a similar subcommand exists: 'estimate'"),
        "{line}"
    );
    let line = one_line_error(
        &[
            "measure", "--device", "cpu", "--width", "x", "--output", "o.json",
        ],
        2,
    );
    assert!(
        line.starts_with("iteragpu: error: invalid value 'x' for '--width"),
        "{line}"
    );
}

#[test]
fn help_and_version_still_print_to_stdout_and_succeed() {
    let help = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["price", "--help"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8(help).unwrap().contains("Examples:"));
    Command::cargo_bin("iteragpu")
        .unwrap()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicates::str::starts_with("iteragpu 0."));
}

/// A command that fails after writing its result up (an incomplete run, a failed verification)
/// also ends with the JSON error object when asked for JSON, after its document on stdout.
#[test]
fn with_json_a_failed_verification_ends_with_one_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("k.zip");
    Command::cargo_bin("iteragpu")
        .unwrap()
        .arg("kit")
        .arg("--output")
        .arg(&zip)
        .assert()
        .success();
    // Cut the archive short: the verification fails.
    let bytes = std::fs::read(&zip).unwrap();
    std::fs::write(&zip, &bytes[..bytes.len() / 2]).unwrap();
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .arg("verify")
        .arg(&zip)
        .arg("--json")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let doc: Value = serde_json::from_str(stderr.trim()).unwrap();
    assert_eq!(doc["exit_code"], out.status.code().unwrap());
}
