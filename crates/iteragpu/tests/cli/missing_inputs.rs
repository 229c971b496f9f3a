//! One rule for a file or folder named on the command line that is not there, whatever the
//! command and whichever option names it: refused input, exit 2 (README's exit-code table), one
//! line on stderr that names the path, nothing on stdout.

use assert_cmd::Command;
use serde_json::Value;

/// Every command that reads a user-named file, once per option naming one. `{M}` is the missing
/// path; `{DIR}` a folder of real files (`e.json`, `e.csv`) for the other inputs, and room for
/// outputs. Only one path is missing in each line, so the sentence must name that one.
const CASES: &[&str] = &[
    "report {M} --output {DIR}/report.html",
    "record --results {DIR}/grid.csv --protocol {M} --measurement {DIR}/e.json --rental a \
     --package b200:7:1 --submitted 1 --accepted 1",
    "record --results {DIR}/grid.csv --protocol {DIR}/e.json --measurement {DIR}/e.json \
     --rental a --package b200:7:1 --submitted 1 --accepted 1 --catalogue {M}",
    "cost --results {M}",
    "cost --results {DIR}/e.csv --catalogue {M}",
    "price --gpu b200 --days 7 --lots 1 --catalogue {M}",
    "price --list --catalogue {M}",
    "verify {M}",
    "estimate --model {M}",
    "fit --model {M} --bits 16",
    "fit --parameters 7B --bits 16 --offers {M}",
    "fit --parameters 7B --bits 16 --probe {M}",
    "fit --parameters 7B --bits 16 --catalogue {M}",
    "fit --parameters 7B --bits 16 --datasheet {M}",
    "protocol lock {M}",
    "fleet check {M}",
    "fleet slurm --package b200:7:2 --nodes 1 --catalogue {M} --output {DIR}/fleet-a",
    "fleet slurm --package b200:7:2 --nodes 1 --binary {M} --output {DIR}/fleet-b",
    "fleet skypilot --package b200:7:2 --nodes 1 --wheel {M} --output {DIR}/sky.yaml",
    "kit --binary {M} --output {DIR}/kit.zip",
    "probe --device cpu --datasheet {M} --output {DIR}/probe.json",
    "environment --device cpu --datasheet {M}",
    "environment --device cpu --catalogue {M}",
    "environment --package b200:7:1 --catalogue {M}",
];

fn run(
    line: &str,
    dir: &std::path::Path,
    missing: &std::path::Path,
) -> (Option<i32>, String, String) {
    let args: Vec<String> = line
        .split_whitespace()
        .map(|a| {
            a.replace("{M}", missing.to_str().unwrap())
                .replace("{DIR}", dir.to_str().unwrap())
        })
        .collect();
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(&args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_input_is_exit_2_naming_it_in_every_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("e.json"), "{}\n").unwrap();
    std::fs::write(dir.path().join("e.csv"), "").unwrap();
    let mut wrong = Vec::new();
    for (i, line) in CASES.iter().enumerate() {
        // In a folder that is there, so it is the file that is missing, and in one that is not.
        for missing in [
            dir.path().join(format!("absent-{i}.file")),
            dir.path().join(format!("no-folder-{i}")).join("absent"),
        ] {
            let (code, stdout, stderr) = run(line, dir.path(), &missing);
            let shown = missing.display().to_string();
            if code != Some(2)
                || !stdout.is_empty()
                || stderr.lines().count() != 1
                || !stderr.contains(&shown)
            {
                wrong.push(format!(
                    "{line} with {shown}: exit {code:?}, stdout {stdout:?}, stderr {stderr:?}"
                ));
            }
            assert!(!missing.exists(), "{line}: created {shown}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_missing_input_names_exit_2_in_the_json_error_too() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.csv");
    let (code, stdout, stderr) = run(
        "price --gpu b200 --days 7 --lots 1 --json --catalogue {M}",
        dir.path(),
        &missing,
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let doc: Value = serde_json::from_str(stderr.trim_end()).unwrap();
    assert_eq!(doc["exit_code"], 2, "{doc}");
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .contains(&missing.display().to_string()),
        "{doc}"
    );
}

/// The rule is about paths that are not there: a file that is there but does not read as what
/// it should be stays a data error (exit 1), so the two are told apart.
#[test]
fn a_file_that_is_there_but_bad_stays_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "not,a,catalogue\n").unwrap();
    let (code, _, stderr) = run(
        "price --gpu b200 --days 7 --lots 1 --catalogue {M}",
        dir.path(),
        &bad,
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(&bad.display().to_string()), "{stderr}");
}
