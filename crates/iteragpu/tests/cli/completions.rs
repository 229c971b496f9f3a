//! `iteragpu completions SHELL`: scripts the shells accept, naming every command and option.

use std::process::Command as Process;

use assert_cmd::Command;
use predicates::prelude::*;

fn completions(shell: &str) -> String {
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["completions", shell])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn bash_completion_is_valid_bash_that_knows_every_command() {
    let script = completions("bash");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iteragpu.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Process::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Sourcing it registers the completion function.
    let loaded = Process::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p iteragpu", file.display()))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&loaded.stdout).contains("iteragpu"),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    for word in [
        "measure",
        "sweep",
        "verify",
        "completions",
        "--accepted-results",
        "--with-binary",
    ] {
        assert!(script.contains(word), "{word} missing");
    }
}

#[test]
fn zsh_and_fish_completions_name_the_tool_and_its_commands() {
    let zsh = completions("zsh");
    assert!(zsh.starts_with("#compdef iteragpu"));
    let fish = completions("fish");
    assert!(fish.contains("complete -c iteragpu"));
    for script in [zsh, fish] {
        for word in ["measure", "price", "report", "reserve-gib"] {
            assert!(script.contains(word), "{word} missing");
        }
    }
}

#[test]
fn an_unknown_shell_is_a_one_line_usage_error() {
    Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["completions", "tcsh"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::starts_with(
            "iteragpu: error: invalid value 'tcsh'",
        ))
        .stderr(predicate::str::contains("bash"))
        .stderr(predicate::function(|s: &str| s.lines().count() == 1));
}
