//! `iteragpu man [COMMAND]`: roff pages made from the same definitions as `--help`.

use assert_cmd::Command;
use predicates::prelude::*;

fn man(args: &[&str]) -> String {
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .arg("man")
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn the_tool_page_lists_every_command() {
    let page = man(&[]);
    assert!(
        page.contains(".TH iteragpu 1"),
        "{}",
        &page[..200.min(page.len())]
    );
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH DESCRIPTION",
        ".SH SUBCOMMANDS",
    ] {
        assert!(page.contains(section), "{section} missing");
    }
    for command in [
        "iteragpu\\-measure",
        "iteragpu\\-price",
        "iteragpu\\-completions",
    ] {
        assert!(page.contains(command), "{command} missing");
    }
}

#[test]
fn a_command_page_has_its_options_and_examples() {
    let page = man(&["price"]);
    assert!(
        page.contains(".TH iteragpu-price 1"),
        "{}",
        &page[..200.min(page.len())]
    );
    assert!(page.contains("\\-\\-accepted\\-results"));
    assert!(
        page.contains("iteragpu price \\-\\-gpu b200"),
        "the examples are in the page"
    );
}

#[test]
fn an_unknown_command_is_refused_with_the_list() {
    Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["man", "nope"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains(
            "unknown command `nope`; the commands are: environment, estimate, price",
        ))
        .stderr(predicate::str::contains(
            "report, probe, completions, man\n",
        ));
}
