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
            "report, probe, collective, completions, man\n",
        ));
}

/// Issue 26, item 3: every command's page has EXAMPLES and EXIT STATUS, the command's own exit
/// codes among them.
#[test]
fn every_page_has_examples_and_an_exit_status() {
    for command in [
        "environment",
        "estimate",
        "price",
        "fit",
        "measure",
        "kit",
        "verify",
        "protocol",
        "record",
        "cost",
        "sweep",
        "report",
        "probe",
        "collective",
        "completions",
        "man",
    ] {
        let page = man(&[command]);
        for section in [".SH EXAMPLES", ".SH \"EXIT STATUS\"", ".SH \"SEE ALSO\""] {
            assert!(page.contains(section), "{command}: {section} missing");
        }
        assert!(
            page.contains(&format!("iteragpu {command}")),
            "{command}: its examples"
        );
        assert!(!page.contains(".SH EXTRA"), "{command}");
    }
    let measure = man(&["measure"]);
    assert!(measure.contains("For measure: 0 complete run"), "{measure}");
    let top = man(&[]);
    for section in [".SH EXAMPLES", ".SH \"EXIT STATUS\"", ".SH ENVIRONMENT"] {
        assert!(top.contains(section), "iteragpu(1): {section} missing");
    }
    assert!(top.contains("MANPATH"));
}

/// Issue 26, item 3: `man --output-dir` writes every page; `man` finds them through MANPATH and
/// renders EXAMPLES and EXIT STATUS of iteragpu-measure(1) (the roff text is checked where no
/// `man` is installed).
#[test]
fn every_page_is_installed_and_man_renders_them() {
    let dir = tempfile::tempdir().unwrap();
    let man1 = dir.path().join("man/man1");
    Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["man", "--output-dir"])
        .arg(&man1)
        .assert()
        .success()
        .stdout(predicate::str::starts_with("wrote 18 pages in "));
    let mut files: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 18, "{files:?}");
    assert!(files.contains(&"iteragpu.1".to_string()));
    assert!(files.contains(&"iteragpu-measure.1".to_string()));
    assert_eq!(
        std::fs::read_to_string(man1.join("iteragpu-measure.1")).unwrap(),
        man(&["measure"])
    );
    // A second install replaces the pages.
    Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["man", "--output-dir"])
        .arg(&man1)
        .assert()
        .success();
    let has_man = std::process::Command::new("sh")
        .args(["-c", "command -v man"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_man {
        eprintln!("no `man` here: the roff text was checked, not its rendering");
        return;
    }
    for how in ["-l", "MANPATH"] {
        let mut cmd = std::process::Command::new("man");
        cmd.env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .env("LC_ALL", "C.UTF-8");
        if how == "-l" {
            cmd.arg("-l").arg(man1.join("iteragpu-measure.1"));
        } else {
            cmd.env("MANPATH", dir.path().join("man"))
                .arg("iteragpu-measure");
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{how}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for heading in ["EXAMPLES", "EXIT STATUS", "OPTIONS"] {
            assert!(
                text.lines().any(|l| l == heading),
                "{how}: {heading} not rendered:\n{text}"
            );
        }
        assert!(text.contains("iteragpu measure --device cpu"), "{text}");
    }
}

#[test]
fn one_page_or_every_page_not_both() {
    Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["man", "measure", "--output-dir", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
}
