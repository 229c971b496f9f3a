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

/// Issue 36: the .tar.gz beside the zip holds the same members (the system's tar unpacks it,
/// sha256sum and verify accept it), is byte-identical from run to run, and an existing one is
/// never overwritten (nor the zip written without it).
#[test]
fn a_tar_gz_is_written_beside_the_zip() {
    let dir = tempfile::tempdir().unwrap();
    let out = iteragpu()
        .current_dir(dir.path())
        .args(["kit", "--output", "a.zip", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(doc["tar_gz"]["output"], "a.tar.gz");
    let tar_gz = std::fs::read(dir.path().join("a.tar.gz")).unwrap();
    assert_eq!(doc["tar_gz"]["bytes"], tar_gz.len() as u64);
    assert_eq!(doc["tar_gz"]["sha256"], kit::hash::sha256_hex(&tar_gz));
    let _ = make_kit(dir.path(), "b.zip", &[]);
    assert_eq!(tar_gz, std::fs::read(dir.path().join("b.tar.gz")).unwrap());

    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let tar = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(dir.path().join("a.tar.gz"))
        .arg("-C")
        .arg(&unpacked)
        .output()
        .unwrap();
    assert!(tar.status.success(), "{tar:?}");
    let zipped = dir.path().join("zipped");
    extract(&dir.path().join("a.zip"), &zipped);
    for member in doc["manifest"]["files"].as_array().unwrap() {
        let path = format!("iteragpu-lab-v1/{}", member["path"].as_str().unwrap());
        assert_eq!(
            std::fs::read(unpacked.join(&path)).unwrap(),
            std::fs::read(zipped.join(&path)).unwrap(),
            "{path}"
        );
    }
    let sums = std::process::Command::new("sha256sum")
        .args(["-c", "--strict", "--quiet", "SHA256SUMS"])
        .current_dir(unpacked.join("iteragpu-lab-v1"))
        .output()
        .unwrap();
    assert!(sums.status.success(), "{sums:?}");
    iteragpu()
        .args(["verify"])
        .arg(dir.path().join("a.tar.gz"))
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "(tar.gz, manifest in iteragpu-lab-v1/)",
        ));

    iteragpu()
        .current_dir(dir.path())
        .args(["kit", "--output", "a.zip"])
        .assert()
        .code(2);
    std::fs::remove_file(dir.path().join("a.zip")).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["kit", "--output", "a.zip"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains("a.tar.gz already exists"));
    assert!(!dir.path().join("a.zip").exists());
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

/// Extracts a zip into `dir` with Python's zipfile, a reader that is not ours.
pub fn extract(zip: &Path, dir: &Path) {
    let py = Process::new("python3")
        .arg("-c")
        .arg("import sys, zipfile\nzipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])\n")
        .arg(zip)
        .arg(dir)
        .output()
        .expect("python3 must be installed for this test");
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    // zipfile does not restore permissions: the binaries must be executable.
    let bin = dir.join("iteragpu-lab-v1/bin");
    if bin.is_dir() {
        use std::os::unix::fs::PermissionsExt;
        for target in std::fs::read_dir(&bin).unwrap() {
            let exe = target.unwrap().path().join("iteragpu");
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}

const GNU_X86: &str = "/lib64/ld-linux-x86-64.so.2";
const GNU_ARM: &str = "/lib/ld-linux-aarch64.so.1";

/// This checkout's builds hold no builder path (.cargo/config.toml remaps them), so a kit
/// carries the running iteragpu by itself. A copy with a builder's path in it is refused by
/// `--with-binary`, and by itself makes a kit with no program, which says so.
#[test]
fn this_build_ships_and_one_with_builders_paths_does_not() {
    let exe = assert_cmd::cargo::cargo_bin("iteragpu");
    let bytes = std::fs::read(&exe).unwrap();
    assert_eq!(
        kit::binary::builder_paths(&bytes),
        Vec::<String>::new(),
        "a build of this checkout holds no builder path"
    );
    let dir = tempfile::tempdir().unwrap();
    let registry = [
        "", "home", "me", ".cargo", "registry", "src", "i", "a-1", "src", "x.rs",
    ]
    .join("/");
    let dirty = dir.path().join("iteragpu");
    let mut with_path = bytes.clone();
    with_path.extend_from_slice(format!("\0{registry}\0").as_bytes());
    std::fs::write(&dirty, with_path).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dirty, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = dir.path().join("k.zip");
    Command::new(&dirty)
        .current_dir(dir.path())
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .arg("--with-binary")
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains(format!(
            "the running iteragpu holds the path {registry} of the machine that built it"
        )))
        .stderr(predicate::str::contains("scripts/release.sh"));
    assert!(!out.exists());
    let printed = Command::new(&dirty)
        .current_dir(dir.path())
        .args(["kit", "--output", "k.zip", "--json"])
        .assert()
        .success()
        .stderr(predicate::str::starts_with(
            "iteragpu: warning: the kit carries no program: no portable binaries in dist/",
        ))
        .get_output()
        .stdout
        .clone();
    let doc: serde_json::Value = serde_json::from_slice(&printed).unwrap();
    assert_eq!(doc["program"]["source"], "none");
    assert_eq!(doc["program"]["members"], serde_json::json!([]));
    let files = doc["manifest"]["files"].as_array().unwrap();
    assert!(
        files
            .iter()
            .all(|f| !f["path"].as_str().unwrap().starts_with("bin/"))
    );
}

/// Without a binary option the kit carries the portable binaries of dist/ when it holds them,
/// else this build; `--release-dir` names another folder, and one without binaries is refused.
#[test]
fn the_kit_carries_the_release_or_this_build() {
    let dir = tempfile::tempdir().unwrap();
    let this = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let kit_json = |args: &[&str]| -> serde_json::Value {
        let out = iteragpu()
            .current_dir(dir.path())
            .arg("kit")
            .args(args)
            .arg("--json")
            .assert()
            .success()
            .get_output()
            .clone();
        let mut doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["stderr"] = String::from_utf8(out.stderr).unwrap().into();
        doc
    };
    let doc = kit_json(&["--output", "this.zip"]);
    assert_eq!(doc["program"]["source"], "this-build");
    // The glibc figure is this binary's own, read from its version needs, and said plainly when
    // it is newer than the kit README's 2.28.
    let this_binary = std::fs::read(assert_cmd::cargo::cargo_bin("iteragpu")).unwrap();
    let needed = kit::glibc_needed(&this_binary).unwrap();
    assert_eq!(
        doc["program"]["glibc_needed"],
        serde_json::json!(needed.map(|v| v.to_string()))
    );
    match needed {
        Some(v) if v > kit::KIT_GLIBC => {
            let note = doc["program"]["note"].as_str().unwrap();
            assert!(
                note.contains(&format!(
                    "it needs glibc {v} or newer, not the 2.28 the kit's README states"
                )),
                "{note}"
            );
            let stderr = doc["stderr"].as_str().unwrap();
            assert!(
                stderr.starts_with(&format!(
                    "iteragpu: warning: the running iteragpu needs glibc {v} or newer"
                )),
                "{stderr}"
            );
        }
        _ => assert_eq!(doc["stderr"], ""),
    }
    assert_eq!(
        doc["program"]["members"],
        serde_json::json!([format!("bin/{this}/iteragpu")])
    );
    assert!(
        doc["program"]["note"].as_str().unwrap().starts_with(
            "this machine's build (the running iteragpu, no portable binaries in dist/)"
        )
    );
    let shipped = |zip: &str, member: &str| -> Vec<u8> {
        let mut zip =
            zip::ZipArchive::new(std::fs::File::open(dir.path().join(zip)).unwrap()).unwrap();
        let mut f = zip.by_name(&format!("iteragpu-lab-v1/{member}")).unwrap();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).unwrap();
        bytes
    };
    assert_eq!(
        shipped("this.zip", &format!("bin/{this}/iteragpu")),
        std::fs::read(assert_cmd::cargo::cargo_bin("iteragpu")).unwrap()
    );
    assert_eq!(
        shipped("this.zip", "scripts/install.sh"),
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh"))
            .unwrap()
    );

    // scripts/release.sh's layout, in dist/ of the folder it runs in.
    let x86 = kit::binary::test_elf(62, Some(GNU_X86), b"portable x86");
    let arm = kit::binary::test_elf(183, Some(GNU_ARM), b"portable arm");
    for (target, bytes) in [
        ("x86_64-unknown-linux-gnu", &x86),
        ("aarch64-unknown-linux-gnu", &arm),
    ] {
        let folder = dir.path().join("dist").join(target);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("iteragpu"), bytes).unwrap();
    }
    let doc = kit_json(&["--output", "release.zip"]);
    assert_eq!(doc["program"]["source"], "release");
    assert_eq!(doc["program"]["folder"], "dist");
    assert_eq!(
        doc["program"]["members"],
        serde_json::json!([
            "bin/x86_64-unknown-linux-gnu/iteragpu",
            "bin/aarch64-unknown-linux-gnu/iteragpu"
        ])
    );
    assert_eq!(
        shipped("release.zip", "bin/x86_64-unknown-linux-gnu/iteragpu"),
        x86
    );
    assert_eq!(
        shipped("release.zip", "bin/aarch64-unknown-linux-gnu/iteragpu"),
        arm
    );
    iteragpu()
        .current_dir(dir.path())
        .args(["kit", "--output", "release.txt.zip"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "program: the portable binaries of scripts/release.sh in dist/ (glibc 2.28 or newer)",
        ));

    assert_eq!(doc["stderr"], "");
    assert_eq!(doc["program"]["glibc_needed"], serde_json::Value::Null);

    // A "release" binary that needs a newer glibc than the README promises is refused whole.
    if needed.is_some_and(|v| v > kit::KIT_GLIBC) {
        let newer = dir.path().join("newer");
        let folder = newer.join(format!("{}-unknown-linux-gnu", std::env::consts::ARCH));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("iteragpu"), &this_binary).unwrap();
        let v = needed.unwrap();
        iteragpu()
            .current_dir(dir.path())
            .args(["kit", "--output", "newer.zip", "--release-dir", "newer"])
            .assert()
            .code(2)
            .stderr(predicate::str::contains(format!(
                "iteragpu needs glibc {v} or newer (its highest GLIBC_ symbol version), newer \
                 than the 2.28 the kit's README states: it will not start on an older system; \
                 rebuild it with scripts/release.sh"
            )));
        assert!(!dir.path().join("newer.zip").exists());
        assert!(!dir.path().join("newer.tar.gz").exists());
    }

    std::fs::rename(dir.path().join("dist"), dir.path().join("elsewhere")).unwrap();
    let doc = kit_json(&["--output", "elsewhere.zip", "--release-dir", "elsewhere"]);
    assert_eq!(doc["program"]["source"], "release");
    assert_eq!(doc["program"]["folder"], "elsewhere");
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    iteragpu()
        .current_dir(dir.path())
        .args(["kit", "--output", "none.zip", "--release-dir", "empty"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::contains(
            "--release-dir empty: holds no x86_64-unknown-linux-gnu/iteragpu or \
             aarch64-unknown-linux-gnu/iteragpu",
        ));
    assert!(!dir.path().join("none.zip").exists());
}

/// `--binary` places each executable under bin/<target>/ from its ELF header, 0755, and the
/// kit verifies; a second binary for one target, a file that is not an ELF executable, and one
/// with a builder's path are refused.
#[test]
fn binaries_go_under_bin_by_target() {
    let dir = tempfile::tempdir().unwrap();
    let x86 = dir.path().join("x86");
    let arm = dir.path().join("arm");
    std::fs::write(
        &x86,
        kit::binary::test_elf(62, Some(GNU_X86), b"x86 program"),
    )
    .unwrap();
    std::fs::write(
        &arm,
        kit::binary::test_elf(183, Some(GNU_ARM), b"arm program"),
    )
    .unwrap();
    let out = dir.path().join("k.zip");
    let printed = iteragpu()
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .arg("--binary")
        .arg(&x86)
        .arg("--binary")
        .arg(&arm)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let printed = String::from_utf8(printed).unwrap();
    for target in ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"] {
        assert!(
            printed.contains(&format!("bin/{target}/iteragpu")),
            "{printed}"
        );
    }
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&out).unwrap()).unwrap();
    for (target, source) in [("x86_64", &x86), ("aarch64", &arm)] {
        let mut member = zip
            .by_name(&format!(
                "iteragpu-lab-v1/bin/{target}-unknown-linux-gnu/iteragpu"
            ))
            .unwrap();
        assert_eq!(member.unix_mode().unwrap() & 0o7777, 0o755);
        let mut shipped = Vec::new();
        member.read_to_end(&mut shipped).unwrap();
        assert_eq!(shipped, std::fs::read(source).unwrap());
    }
    drop(zip);
    iteragpu().arg("verify").arg(&out).assert().success();

    let refused = |args: &[&Path], says: &str| {
        let out = dir.path().join("refused.zip");
        let mut cmd = iteragpu();
        cmd.arg("kit").arg("--output").arg(&out);
        for a in args {
            cmd.arg("--binary").arg(a);
        }
        cmd.assert().code(2).stderr(predicate::str::contains(says));
        assert!(!out.exists());
    };
    refused(&[&x86, &x86], "two binaries for x86_64-unknown-linux-gnu");
    let script = dir.path().join("script");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    refused(
        &[&script],
        "is not a binary the kit can ship: it is not an ELF executable",
    );
    let dirty = dir.path().join("dirty");
    let registry = [
        "", "home", "me", ".cargo", "registry", "src", "i", "a-1", "src", "x.rs",
    ]
    .join("/");
    std::fs::write(
        &dirty,
        kit::binary::test_elf(62, Some(GNU_X86), registry.as_bytes()),
    )
    .unwrap();
    refused(
        &[&dirty],
        &format!("holds the path {registry} of the machine that built it"),
    );
    refused(&[&dir.path().join("nope")], "no such file");
}

/// Every link in the kit's Markdown (and in the notebook's Markdown cells) is relative and
/// resolves to a member of the kit; a `#fragment` names a heading of the target.
#[test]
fn every_link_inside_the_kit_resolves_inside_the_kit() {
    let dir = tempfile::tempdir().unwrap();
    let x86 = dir.path().join("x86");
    let arm = dir.path().join("arm");
    std::fs::write(&x86, kit::binary::test_elf(62, Some(GNU_X86), b"")).unwrap();
    std::fs::write(&arm, kit::binary::test_elf(183, Some(GNU_ARM), b"")).unwrap();
    let out = dir.path().join("k.zip");
    iteragpu()
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .arg("--binary")
        .arg(&x86)
        .arg("--binary")
        .arg(&arm)
        .assert()
        .success();
    let land = dir.path().join("x");
    extract(&out, &land);
    let top = land.join("iteragpu-lab-v1");
    let link =
        regex::Regex::new(r"\[[^\]]*\]\(([^)\s]+)(?:\s+[^)]*)?\)|^\[[^\]]+\]:\s*(\S+)").unwrap();
    let mut checked = 0;
    let mut problems = Vec::new();
    for doc in documents(&top) {
        let rel = doc.strip_prefix(&top).unwrap().to_path_buf();
        let text = if doc.extension().is_some_and(|e| e == "ipynb") {
            let nb: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&doc).unwrap()).unwrap();
            nb["cells"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["cell_type"] == "markdown")
                .flat_map(|c| c["source"].as_array().unwrap().iter())
                .map(|l| l.as_str().unwrap())
                .collect::<String>()
        } else {
            std::fs::read_to_string(&doc).unwrap()
        };
        for line in text.lines() {
            for c in link.captures_iter(line) {
                let target = c.get(1).or(c.get(2)).unwrap().as_str();
                checked += 1;
                if let Some(problem) = resolve(&top, &rel, target) {
                    problems.push(format!("{}: ({target}) {problem}", rel.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        checked >= 5,
        "only {checked} links found: is the kit README there?"
    );
}

fn documents(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(documents(&path));
        } else if path.extension().is_some_and(|e| e == "md" || e == "ipynb") {
            out.push(path);
        }
    }
    out
}

/// Why `target`, linked from `from` (relative to the kit's top), does not resolve in the kit.
fn resolve(top: &Path, from: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://") || target.starts_with("https://") {
        return None;
    }
    if target.contains("://") || target.starts_with('/') || target.starts_with("mailto:") {
        return Some("is not a relative link inside the kit".to_string());
    }
    let (file, fragment) = match target.split_once('#') {
        Some((f, frag)) => (f, Some(frag)),
        None => (target, None),
    };
    let path = if file.is_empty() {
        top.join(from)
    } else {
        top.join(from.parent().unwrap()).join(file)
    };
    let Ok(real) = path.canonicalize() else {
        return Some("names nothing in the kit".to_string());
    };
    if !real.starts_with(top.canonicalize().unwrap()) {
        return Some("leaves the kit".to_string());
    }
    if let Some(fragment) = fragment {
        let text = std::fs::read_to_string(&real).unwrap_or_default();
        let anchors: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .map(|h| {
                h.trim_start_matches('#')
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect()
            })
            .collect();
        if !anchors.iter().any(|a| a == fragment) {
            return Some(format!("has no heading #{fragment}"));
        }
    }
    None
}
