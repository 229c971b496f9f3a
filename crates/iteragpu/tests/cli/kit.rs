//! `iteragpu kit`: byte-identical archives, accepted by Python's zipfile and `sha256sum -c`.

use std::io::Read;
use std::path::Path;
use std::process::Command as Process;

use assert_cmd::Command;
use predicates::prelude::*;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

fn make_kit(dir: &Path, name: &str, extra: &[&str]) -> std::path::PathBuf {
    let out = dir.join(name);
    iteragpu()
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .args(extra)
        .assert()
        .success();
    out
}

#[test]
fn twice_gives_byte_identical_zips() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_kit(dir.path(), "a.zip", &[]);
    let b = make_kit(dir.path(), "b.zip", &[]);
    let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(!a.is_empty());
    assert_eq!(a, b);
}

#[test]
fn human_output_lists_members_and_says_how_to_check() {
    let dir = tempfile::tempdir().unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["kit", "--output", "k.zip"])
        .assert()
        .success()
        .stdout(predicate::str::contains("wrote k.zip"))
        .stdout(predicate::str::contains("iteragpu-lab-v1/:"))
        .stdout(predicate::str::contains("data/resultats-bruts.csv"))
        .stdout(predicate::str::contains(
            "MANIFEST.json  (its own size only",
        ))
        .stdout(predicate::str::contains("sha256sum -c --strict SHA256SUMS"));
}

#[test]
fn refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("k.zip");
    std::fs::write(&out, b"precious").unwrap();
    iteragpu()
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("already exists"));
    assert_eq!(std::fs::read(&out).unwrap(), b"precious");
}

#[test]
fn json_is_one_document_with_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("k.zip");
    let assert = iteragpu()
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .arg("--json")
        .assert()
        .success();
    let doc: serde_json::Value = serde_json::from_slice(&assert.get_output().stdout).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(doc["bytes"], bytes.len() as u64);
    let manifest = &doc["manifest"];
    assert_eq!(manifest["root"], "iteragpu-lab-v1");
    assert_eq!(manifest["schema"], "iteragpu.kit-manifest/1");
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(manifest["totals"]["files"], files.len() as u64);
    let own = files.iter().find(|f| f["path"] == "MANIFEST.json").unwrap();
    assert!(own["sha256"].is_null());
    assert!(
        files
            .iter()
            .filter(|f| f["path"] != "MANIFEST.json")
            .all(|f| f["sha256"].is_string())
    );
    for wanted in [
        "README.md",
        "LICENSE",
        "docs/quality-protocol.md",
        "data/resultats-bruts.csv",
        "data/tarifs-forfaits.csv",
        "notebooks/iteragpu-lab.ipynb",
        "SHA256SUMS",
    ] {
        assert!(
            files.iter().any(|f| f["path"] == wanted),
            "{wanted} missing"
        );
    }
}

/// Python's zipfile finds nothing wrong, and `sha256sum -c --strict` accepts every line inside
/// a copy Python extracted.
#[test]
fn python_zipfile_and_sha256sum_accept_the_kit() {
    let dir = tempfile::tempdir().unwrap();
    let out = make_kit(dir.path(), "k.zip", &[]);
    let extract = dir.path().join("x");
    let script = "import sys, zipfile\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  bad = z.testzip()\n\
                  assert bad is None, bad\n\
                  names = z.namelist()\n\
                  assert names == sorted(names), names\n\
                  assert all(n.startswith('iteragpu-lab-v1/') for n in names), names\n\
                  z.extractall(sys.argv[2])\n\
                  print(len(names))\n";
    let py = Process::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&out)
        .arg(&extract)
        .output()
        .expect("python3 must be installed for this test");
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );

    let top = extract.join("iteragpu-lab-v1");
    let sums = Process::new("sha256sum")
        .args(["-c", "--strict", "SHA256SUMS"])
        .current_dir(&top)
        .output()
        .expect("sha256sum must be installed for this test");
    let text = String::from_utf8_lossy(&sums.stdout);
    assert!(
        sums.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&sums.stderr)
    );
    assert!(text.contains("README.md: OK") && text.contains("data/tarifs-forfaits.csv: OK"));
    assert!(!text.contains("FAILED"));

    // The extracted folder verifies too.
    iteragpu()
        .arg("verify")
        .arg(&top)
        .assert()
        .success()
        .stdout(predicate::str::contains("complete: yes"))
        .stdout(predicate::str::contains("valid: yes"));
}

#[test]
fn with_binary_ships_this_executable_as_0755() {
    let dir = tempfile::tempdir().unwrap();
    let a = make_kit(dir.path(), "a.zip", &["--with-binary"]);
    let b = make_kit(dir.path(), "b.zip", &["--with-binary"]);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let exe = assert_cmd::cargo::cargo_bin("iteragpu");
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&a).unwrap()).unwrap();
    let mut member = zip.by_name("iteragpu-lab-v1/bin/iteragpu").unwrap();
    assert_eq!(member.unix_mode().unwrap() & 0o7777, 0o755);
    let mut shipped = Vec::new();
    member.read_to_end(&mut shipped).unwrap();
    assert!(
        shipped == std::fs::read(exe).unwrap(),
        "the shipped binary differs"
    );

    iteragpu().arg("verify").arg(&a).assert().success();
}
