//! `iteragpu verify`: every kind of damage is caught and named, and nothing is extracted.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use zip::write::SimpleFileOptions;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

const TOP: &str = "iteragpu-lab-v1";

fn kit(dir: &Path) -> PathBuf {
    let out = dir.join("good.zip");
    iteragpu()
        .arg("kit")
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    out
}

/// The members of a zip, in order, as (name, bytes).
fn members(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).unwrap();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            (f.name().unwrap().to_string(), bytes)
        })
        .filter(|(name, _)| !name.ends_with('/'))
        .collect()
}

/// Writes a new zip (with valid CRCs: the zip crate computes them) from `members`.
fn write_zip(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in members {
        zip.start_file(name.as_str(), SimpleFileOptions::default())
            .unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

fn fails_with(path: &Path, messages: &[&str]) {
    let mut assert = iteragpu().arg("verify").arg(path).assert().code(1);
    for m in messages {
        assert = assert.stdout(predicate::str::contains(*m));
    }
    assert.stderr(predicate::str::contains("failed verification"));
}

#[test]
fn a_good_kit_is_complete_and_valid() {
    let dir = tempfile::tempdir().unwrap();
    let good = kit(dir.path());
    iteragpu()
        .arg("verify")
        .arg(&good)
        .assert()
        .success()
        .stdout(predicate::str::contains("complete: yes"))
        .stdout(predicate::str::contains("valid: yes"));
    // Re-packed by another writer, with the same members, it still verifies.
    let copy = dir.path().join("copy.zip");
    write_zip(&copy, &members(&good));
    iteragpu().arg("verify").arg(&copy).assert().success();
}

#[test]
fn flipped_byte_in_a_member_is_a_hash_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = members(&kit(dir.path()));
    let readme = m
        .iter_mut()
        .find(|(n, _)| n.ends_with("/README.md"))
        .unwrap();
    readme.1[0] ^= 0x01;
    let bad = dir.path().join("flipped.zip");
    write_zip(&bad, &m);
    fails_with(
        &bad,
        &[
            "complete: yes",
            "valid: no",
            "hash mismatch: README.md has SHA-256",
        ],
    );
}

#[test]
fn flipped_byte_in_the_zip_file_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let good = kit(dir.path());
    let mut bytes = std::fs::read(&good).unwrap();
    let offset = {
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(&bytes)).unwrap();
        let f = zip.by_name(&format!("{TOP}/README.md")).unwrap();
        f.data_start().unwrap() as usize
    };
    bytes[offset + 2] ^= 0x40;
    let bad = dir.path().join("raw-flip.zip");
    std::fs::write(&bad, bytes).unwrap();
    let out = iteragpu().arg("verify").arg(&bad).assert().code(1);
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("unreadable: README.md") || text.contains("hash mismatch: README.md"),
        "{text}"
    );
    assert!(text.contains("valid: no"), "{text}");
}

#[test]
fn changed_size_is_a_size_mismatch_checked_before_the_hash() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = members(&kit(dir.path()));
    let readme = m
        .iter_mut()
        .find(|(n, _)| n.ends_with("/README.md"))
        .unwrap();
    readme.1.extend_from_slice(b"one more line\n");
    let bad = dir.path().join("longer.zip");
    write_zip(&bad, &m);
    fails_with(&bad, &["size mismatch: README.md is"]);
    let out = iteragpu().arg("verify").arg(&bad).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("hash mismatch"));
}

#[test]
fn missing_member_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = members(&kit(dir.path()));
    m.retain(|(n, _)| !n.ends_with("/data/tarifs-forfaits.csv"));
    let bad = dir.path().join("missing.zip");
    write_zip(&bad, &m);
    fails_with(
        &bad,
        &[
            "complete: no",
            "missing: data/tarifs-forfaits.csv is listed in MANIFEST.json but absent",
            "valid: yes",
        ],
    );
}

#[test]
fn extra_member_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = members(&kit(dir.path()));
    m.push((
        format!("{TOP}/notes.txt"),
        b"not in the manifest\n".to_vec(),
    ));
    m.push(("stray.txt".to_string(), b"outside the folder\n".to_vec()));
    let bad = dir.path().join("extra.zip");
    write_zip(&bad, &m);
    fails_with(
        &bad,
        &[
            "complete: no",
            "unexpected: notes.txt is not listed in MANIFEST.json",
            "unexpected: stray.txt",
        ],
    );
}

#[test]
fn unsafe_paths_are_named_and_nothing_is_extracted() {
    let dir = tempfile::tempdir().unwrap();
    let good = kit(dir.path());
    let mut m = members(&good);
    m.push((format!("{TOP}/../evil.txt"), b"escape\n".to_vec()));
    m.push((
        "/tmp/iteragpu-absolute-evil.txt".to_string(),
        b"absolute\n".to_vec(),
    ));
    let bad = dir.path().join("unsafe.zip");
    {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&bad).unwrap());
        for (name, bytes) in &m {
            zip.start_file(name.as_str(), SimpleFileOptions::default())
                .unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.add_symlink(
            format!("{TOP}/link"),
            "/etc/passwd",
            SimpleFileOptions::default(),
        )
        .unwrap();
        zip.finish().unwrap();
    }
    let before: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    fails_with(
        &bad,
        &[
            "complete: no",
            "unsafe path: iteragpu-lab-v1/../evil.txt (a `..` component",
            "unsafe path: /tmp/iteragpu-absolute-evil.txt (an absolute path)",
            "unsafe path: iteragpu-lab-v1/link (a symbolic link)",
        ],
    );
    let after: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(before, after, "verify wrote something");
    assert!(!dir.path().join("evil.txt").exists());
    assert!(!Path::new("/tmp/iteragpu-absolute-evil.txt").exists());
}

#[test]
fn a_folder_is_checked_without_following_links() {
    let dir = tempfile::tempdir().unwrap();
    let good = kit(dir.path());
    let root = dir.path().join("x");
    for (name, bytes) in members(&good) {
        let path = root.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let top = root.join(TOP);
    iteragpu().arg("verify").arg(&root).assert().success();
    iteragpu().arg("verify").arg(&top).assert().success();

    let license = top.join("LICENSE");
    let mut bytes = std::fs::read(&license).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x20;
    std::fs::write(&license, bytes).unwrap();
    std::fs::remove_file(top.join("docs/quality-protocol.md")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("/etc/passwd", top.join("data/link.csv")).unwrap();
    let mut expected = vec![
        "hash mismatch: LICENSE",
        "missing: docs/quality-protocol.md",
    ];
    if cfg!(unix) {
        expected.push("unsafe path: data/link.csv (a symbolic link)");
    }
    fails_with(&top, &expected);
}

#[test]
fn no_manifest_means_nothing_can_be_judged() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = members(&kit(dir.path()));
    m.retain(|(n, _)| !n.ends_with("/MANIFEST.json"));
    let bad = dir.path().join("no-manifest.zip");
    write_zip(&bad, &m);
    fails_with(
        &bad,
        &[
            "missing manifest",
            "complete: no",
            "valid: no",
            "not checked",
        ],
    );
}

#[test]
fn json_names_each_failure_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = members(&kit(dir.path()));
    m.retain(|(n, _)| !n.ends_with("/LICENSE"));
    m.push((format!("{TOP}/extra"), b"x".to_vec()));
    let bad = dir.path().join("bad.zip");
    write_zip(&bad, &m);
    let out = iteragpu()
        .arg("verify")
        .arg(&bad)
        .arg("--json")
        .assert()
        .code(1);
    let doc: serde_json::Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(doc["complete"], false);
    assert_eq!(doc["valid"], true);
    let kinds: Vec<_> = doc["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap(), f["path"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("missing", "LICENSE"), ("unexpected", "extra")]);
}

#[test]
fn not_a_kit_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, b"hello").unwrap();
    iteragpu()
        .arg("verify")
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("is not a readable zip archive"));
    iteragpu()
        .arg("verify")
        .arg(dir.path().join("absent.zip"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot read"));
}

/// Where each member's local header starts, and its central record, by name.
fn offsets(bytes: &[u8]) -> Vec<(String, u64, u64)> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    (0..zip.len())
        .map(|i| {
            let f = zip.by_index_raw(i).unwrap();
            (
                f.name().unwrap().to_string(),
                f.header_start(),
                f.central_header_start(),
            )
        })
        .collect()
}

/// The offset of the end of central directory record.
fn end_record(bytes: &[u8]) -> usize {
    (0..bytes.len() - 21)
        .rev()
        .find(|&i| bytes[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
        .unwrap()
}

/// Inserts `junk` at `at` and moves every offset the archive holds past it, so that the zip
/// library still reads the archive as if nothing were there.
fn insert(bytes: &[u8], at: usize, junk: &[u8]) -> Vec<u8> {
    let n = junk.len() as u32;
    let entries = offsets(bytes);
    let eocd = end_record(bytes);
    let cd_start = u32::from_le_bytes(bytes[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(junk);
    out.extend_from_slice(&bytes[at..]);
    let shifted = |pos: usize| if pos >= at { pos + junk.len() } else { pos };
    for (_, local, central) in entries {
        if local as usize >= at {
            let field = shifted(central as usize) + 42;
            let v = u32::from_le_bytes(out[field..field + 4].try_into().unwrap()) + n;
            out[field..field + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    let eocd = shifted(eocd);
    if cd_start >= at {
        let v = cd_start as u32 + n;
        out[eocd + 16..eocd + 20].copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Issue 11, item 12: a local header that names another file than its central entry (what a
/// streaming extractor would write) is caught, though the central directory and every hash
/// are intact.
#[test]
fn a_local_header_that_differs_from_its_central_entry_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let good = kit(dir.path());
    let mut bytes = std::fs::read(&good).unwrap();
    let (_, local, _) = offsets(&bytes)
        .into_iter()
        .find(|(n, _, _)| n == &format!("{TOP}/README.md"))
        .unwrap();
    let name_at = local as usize + 30;
    let evil = b"../../../../../tmp/EVL.md";
    assert_eq!(
        &bytes[name_at..name_at + evil.len()],
        b"iteragpu-lab-v1/README.md"
    );
    bytes[name_at..name_at + evil.len()].copy_from_slice(evil);
    let bad = dir.path().join("local-name.zip");
    std::fs::write(&bad, &bytes).unwrap();
    fails_with(
        &bad,
        &[
            "complete: no",
            "archive structure: the local header of iteragpu-lab-v1/README.md names it ../../../../../tmp/EVL.md",
            "valid: yes",
        ],
    );
}

/// Issue 11, item 12: bytes before, between or after the entries, where another tool could find
/// members this one does not see, are refused.
#[test]
fn data_before_between_or_after_the_entries_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(kit(dir.path())).unwrap();
    let entries = offsets(&good);
    let eocd = end_record(&good);
    let cd = u32::from_le_bytes(good[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
    let junk = b"PK\x03\x04 a member only a local-header reader would find";
    let second = entries[1].1 as usize;
    let cases = [
        (
            "before.zip",
            insert(&good, 0, junk),
            format!("{} bytes of data lie before the first entry", junk.len()),
        ),
        (
            "between.zip",
            insert(&good, second, junk),
            format!("{} bytes of data lie before {}", junk.len(), entries[1].0),
        ),
        (
            "before-cd.zip",
            insert(&good, cd, junk),
            format!(
                "{} bytes of data lie between the last entry and the central directory",
                junk.len()
            ),
        ),
        (
            "after.zip",
            [good.as_slice(), junk].concat(),
            format!("{} bytes follow the end of the archive", junk.len()),
        ),
    ];
    for (name, bytes, message) in cases {
        // The zip library itself still reads every member.
        assert!(zip::ZipArchive::new(std::io::Cursor::new(&bytes)).is_ok() || name == "after.zip");
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        fails_with(
            &path,
            &["complete: no", &format!("archive structure: {message}")],
        );
    }
}

/// Issue 11, item 12: names that are one name on a case-insensitive or normalising filesystem.
#[test]
fn names_that_collide_after_case_folding_or_normalisation_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = kit(dir.path());
    let mut m = members(&good);
    m.push((format!("{TOP}/readme.md"), b"another readme\n".to_vec()));
    m.push((format!("{TOP}/caf\u{e9}.txt"), b"composed\n".to_vec()));
    m.push((format!("{TOP}/cafe\u{301}.txt"), b"decomposed\n".to_vec()));
    let bad = dir.path().join("collide.zip");
    write_zip(&bad, &m);
    fails_with(
        &bad,
        &[
            "name collision: readme.md and README.md",
            "name collision: caf\u{e9}.txt and cafe\u{301}.txt",
        ],
    );
    // An extracted folder on a case-sensitive filesystem: the same rule.
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&good).unwrap()).unwrap();
    archive.extract(dir.path().join("x")).unwrap();
    std::fs::write(dir.path().join("x").join(TOP).join("LICENSE.md"), b"x").unwrap();
    std::fs::write(dir.path().join("x").join(TOP).join("license.MD"), b"y").unwrap();
    fails_with(
        &dir.path().join("x"),
        &["name collision: license.MD and LICENSE.md"],
    );
}

/// Issue 27: `TOP/./README.md` and `TOP/docs//x` beside `TOP/README.md` and `TOP/docs/x`, each
/// listed with its own hash: unzip -o and Python's zipfile write the second over the first.
#[test]
fn names_that_extract_over_another_member_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut content: Vec<(String, Vec<u8>)> = members(&kit(dir.path()))
        .into_iter()
        .map(|(name, bytes)| (name[TOP.len() + 1..].to_string(), bytes))
        .filter(|(rel, _)| rel != "MANIFEST.json")
        .collect();
    content.push(("./README.md".into(), b"not the kit's README\n".to_vec()));
    content.push(("docs//catalogue.md".into(), b"not the catalogue\n".to_vec()));
    let listed: Vec<(String, &[u8])> = content
        .iter()
        .map(|(rel, bytes)| (rel.clone(), bytes.as_slice()))
        .collect();
    let tool = kit::ManifestTool {
        commit: None,
        name: "iteragpu".into(),
        version: "0".into(),
    };
    let (_, manifest) = kit::Manifest::for_content(TOP, tool, &listed).unwrap();
    content.push(("MANIFEST.json".into(), manifest.into_bytes()));
    let m: Vec<(String, Vec<u8>)> = content
        .into_iter()
        .map(|(rel, bytes)| (format!("{TOP}/{rel}"), bytes))
        .collect();
    let bad = dir.path().join("over.zip");
    write_zip(&bad, &m);
    fails_with(
        &bad,
        &[
            "complete: no",
            "name collision: README.md and ./README.md are extracted to one file",
            "name collision: docs/catalogue.md and docs//catalogue.md are extracted to one file",
            "unsafe path: iteragpu-lab-v1/./README.md (a `.` component or an empty segment, \
             which extractors drop)",
            "valid: yes",
        ],
    );
}

/// Issue 36: a .tar.gz is read through a tar reader: repacked by the system's tar with one
/// member changed, with a link added, or cut short, it fails; as written by `kit`, it passes.
#[test]
fn a_tar_gz_with_a_changed_member_a_link_or_a_cut_fails() {
    let dir = tempfile::tempdir().unwrap();
    let _ = kit(dir.path());
    let good = dir.path().join("good.tar.gz");
    let tar = |args: &[&str]| {
        let out = std::process::Command::new("tar")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "tar {args:?}: {out:?}");
    };
    tar(&["-xzf", "good.tar.gz"]);
    let readme = dir.path().join(TOP).join("README.md");
    let mut bytes = std::fs::read(&readme).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&readme, bytes).unwrap();
    tar(&["-czf", "changed.tar.gz", TOP]);
    iteragpu()
        .arg("verify")
        .arg(dir.path().join("changed.tar.gz"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "(tar.gz, manifest in iteragpu-lab-v1/)",
        ))
        .stdout(predicate::str::contains("valid: no"))
        .stdout(predicate::str::contains("hash mismatch: README.md"));

    std::fs::remove_dir_all(dir.path().join(TOP)).unwrap();
    tar(&["-xzf", "good.tar.gz"]);
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join(TOP).join("passwd")).unwrap();
    tar(&["-czf", "link.tar.gz", TOP]);
    iteragpu()
        .arg("verify")
        .arg(dir.path().join("link.tar.gz"))
        .assert()
        .code(1)
        .stdout(predicate::str::contains("complete: no"))
        .stdout(predicate::str::contains(
            "unsafe path: iteragpu-lab-v1/passwd (a symbolic link)",
        ));

    let bytes = std::fs::read(&good).unwrap();
    let cut = dir.path().join("cut.tar.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let out = iteragpu().arg("verify").arg(&cut).output().unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");

    iteragpu().arg("verify").arg(&good).assert().success();
}
