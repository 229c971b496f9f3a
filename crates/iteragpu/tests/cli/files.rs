//! What every command that writes or reads a file shares (issue 11, items 8, 14 and 16): a
//! folder that cannot be written or a name too long for it is refused before any work, with
//! exit 2 and nothing written; temporary files never outlive a run; an I/O error is said once,
//! without the working folder; an input over its stated limit is refused by name.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// A folder this process cannot create files in: a read-only temporary folder, or (as root,
/// whom permissions do not stop) `/sys`, which no one can write to. None when neither holds.
fn unwritable_folder(scratch: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ro = scratch.join("read-only");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let cannot_write = |dir: &Path| std::fs::File::create(dir.join("probe")).is_err();
    if cannot_write(&ro) {
        return Some(ro);
    }
    let _ = std::fs::remove_file(ro.join("probe"));
    let sys = PathBuf::from("/sys");
    (sys.is_dir() && cannot_write(&sys)).then_some(sys)
}

/// The commands that write a result, each aimed at `target` (a file name, or a folder for
/// `sweep`), with its inputs in `dir`.
fn writers(dir: &Path, target: &Path) -> Vec<(&'static str, Command)> {
    let mut out = Vec::new();
    let mut measure = iteragpu();
    measure
        .current_dir(dir)
        .args([
            "measure",
            "--device",
            "cpu",
            "--width",
            "2048",
            "--context",
            "512",
        ])
        .arg("--output")
        .arg(target.with_extension("json"));
    out.push(("measure", measure));
    let mut report = iteragpu();
    report
        .current_dir(dir)
        .args(["report", "m.json", "--output"])
        .arg(target.with_extension("html"));
    out.push(("report", report));
    let mut kit = iteragpu();
    kit.current_dir(dir)
        .args(["kit", "--output"])
        .arg(target.with_extension("zip"));
    out.push(("kit", kit));
    let mut init = iteragpu();
    init.current_dir(dir)
        .args(["protocol", "init"])
        .arg(target.with_extension("txt"));
    out.push(("protocol init", init));
    let mut sweep = iteragpu();
    sweep
        .current_dir(dir)
        .args([
            "sweep",
            "--device",
            "cpu",
            "--width",
            "16,32",
            "--output-dir",
        ])
        .arg(target);
    out.push(("sweep", sweep));
    // A probe long enough that being refused only after it would show in the test's time.
    let mut probe = iteragpu();
    probe
        .current_dir(dir)
        .args(["probe", "--device", "cpu", "--seconds", "30", "--output"])
        .arg(target.with_extension("probe.json"));
    out.push(("probe", probe));
    out
}

fn small_measurement(dir: &Path) {
    iteragpu()
        .current_dir(dir)
        .args(["measure", "--device", "cpu", "--output", "m.json"])
        .assert()
        .success();
}

/// Item 8: a file name longer than the filesystem takes is refused up front by every writer.
#[test]
fn a_name_too_long_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    small_measurement(dir.path());
    let long = dir.path().join("n".repeat(300));
    for (name, mut cmd) in writers(dir.path(), &long) {
        let out = cmd.assert().code(2);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(stderr.contains("too long"), "{name}: {stderr}");
    }
    // `record` (its grid) and `protocol lock` (its lock file, 5 bytes longer than the protocol).
    let protocol = dir.path().join(format!("{}.txt", "p".repeat(248)));
    iteragpu()
        .args(["protocol", "init"])
        .arg(&protocol)
        .assert()
        .success();
    let mut text = std::fs::read_to_string(&protocol).unwrap();
    for (key, value) in super::ledger::FILLED {
        text = text.replace(&format!("\n{key} =\n"), &format!("\n{key} = {value}\n"));
    }
    std::fs::write(&protocol, text).unwrap();
    iteragpu()
        .args(["protocol", "lock"])
        .arg(&protocol)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is too long for the filesystem"));
    iteragpu()
        .current_dir(dir.path())
        .args(["record", "--protocol", "p.txt", "--measurement", "m.json"])
        .args([
            "--rental",
            "r",
            "--package",
            "b200:7:1",
            "--submitted",
            "1",
            "--accepted",
            "1",
        ])
        .arg("--results")
        .arg(long.with_extension("csv"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is too long for the filesystem"));
    assert!(
        std::fs::read_dir(dir.path())
            .unwrap()
            .all(|e| e.unwrap().file_name().len() < 300),
        "a refused writer left a file"
    );
}

/// Item 8: a folder that cannot be written is refused up front by every writer, before a
/// measurement runs, with exit 2.
#[test]
fn an_unwritable_folder_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    small_measurement(dir.path());
    let Some(folder) = unwritable_folder(dir.path()) else {
        eprintln!("no unwritable folder on this machine: skipped");
        return;
    };
    let started = std::time::Instant::now();
    for (name, mut cmd) in writers(dir.path(), &folder.join("out")) {
        let out = cmd.assert().code(2);
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert!(
            stderr.contains("cannot create files in the folder")
                || stderr.contains("cannot create or write in it"),
            "{name}: {stderr}"
        );
    }
    // The 2048-wide measurement would take far longer than a refusal: nothing ran.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    iteragpu()
        .current_dir(dir.path())
        .args(["record", "--protocol", "p.txt", "--measurement", "m.json"])
        .args([
            "--rental",
            "r",
            "--package",
            "b200:7:1",
            "--submitted",
            "1",
            "--accepted",
            "1",
        ])
        .arg("--results")
        .arg(folder.join("results.csv"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "cannot create files in the folder",
        ));
}

/// Item 8: a temporary file left by a killed writer is removed by the next writer in its folder;
/// one whose writer is alive is not.
#[test]
fn stale_temporary_files_are_cleaned_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = dir.path().join(format!(".iteragpu-{dead}-a1b2c3.tmp"));
    let live = dir
        .path()
        .join(format!(".iteragpu-{}-d4e5f6.tmp", std::process::id()));
    for (n, cmd) in [
        ("kit", vec!["kit", "--output", "k.zip"]),
        ("init", vec!["protocol", "init", "p.txt"]),
    ] {
        std::fs::write(&stale, b"half a file").unwrap();
        std::fs::write(&live, b"being written").unwrap();
        iteragpu()
            .current_dir(dir.path())
            .args(&cmd)
            .assert()
            .success();
        assert!(!stale.exists(), "{n} left a stale temporary file");
        assert!(live.exists(), "{n} removed the file of a live writer");
    }
}

/// Item 16: an I/O error is said once (not the OS message twice) and without the absolute
/// working folder or a temporary file's name.
#[test]
fn an_io_error_is_said_once_without_the_working_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 1 && exec \"$0\" measure --device cpu --output out.json")
        .arg(assert_cmd::cargo::cargo_bin("iteragpu"))
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "iteragpu: error: could not write out.json: File too large (os error 27)"
    );
    assert!(!dir.path().join("out.json").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Item 14: every input file has a stated limit; a larger one is refused by name, without being
/// read (a sparse file of that size costs no disk, and `/dev/zero` never ends).
#[test]
fn inputs_over_their_limit_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = |name: &str, size: u64| {
        let path = dir.path().join(name);
        std::fs::File::create(&path).unwrap().set_len(size).unwrap();
        path
    };
    let big = sparse("big.json", (16 << 20) + 1);
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "big.json", "--output", "r.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "big.json is larger than 16 MiB, the limit for a measurement document",
        ));
    // A device is no document: refused by what it is, before a byte is read.
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "/dev/zero", "--output", "r.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "could not read /dev/zero: it is a device, not a regular file",
        ));
    assert!(!dir.path().join("r.html").exists());
    sparse("grid.csv", (64 << 20) + 1);
    iteragpu()
        .current_dir(dir.path())
        .args(["cost", "--results", "grid.csv"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "grid.csv is larger than 64 MiB, the limit for a results grid",
        ));
    sparse("p.txt", (1 << 20) + 1);
    iteragpu()
        .current_dir(dir.path())
        .args(["protocol", "lock", "p.txt"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "p.txt is larger than 1 MiB, the limit for a protocol file",
        ));
    std::fs::create_dir(dir.path().join("sweep")).unwrap();
    sparse("sweep/summary.csv", (16 << 20) + 1);
    iteragpu()
        .current_dir(dir.path())
        .args(["report", "sweep", "--output", "r.html"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "is larger than 16 MiB, the limit for a sweep summary",
        ));
    drop(big);
}

/// Item 10: what was typed on the command line, quoted back in an error, never reaches the
/// terminal raw either.
#[test]
fn a_refused_command_line_is_quoted_without_control_characters() {
    let out = iteragpu()
        .args(["record", "--package", "b200\u{1b}]0;owned\u{7}:7:1"])
        .assert()
        .code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(!stderr.contains(['\u{1b}', '\u{7}']), "{stderr:?}");
    assert!(stderr.contains("b200\\u{1b}]0;owned\\u{7}"), "{stderr:?}");
    iteragpu()
        .args(["cost", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("Per rental"));
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A process id no process has (pid_max is at most 2^22): a temporary file named after it looks
/// stale to every writer.
fn dead_pid() -> u32 {
    let pid = 4_000_000;
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    pid
}

/// Issue 27, item 1: any local user can plant a FIFO (or a link to one) under a stale temporary
/// file's name in a shared folder. Every writer in that folder still finishes, within seconds,
/// and leaves the FIFO alone (`record` once hung holding the grid's lock, freezing the ledger).
#[test]
fn a_fifo_named_like_a_stale_temporary_file_hangs_no_writer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    small_measurement(d);
    let protocol = super::ledger::locked_protocol(d);
    let pid = dead_pid();
    let fifo = d.join(format!(".iteragpu-{pid}-0.tmp"));
    mkfifo(&fifo);
    let far = tempfile::tempdir().unwrap();
    mkfifo(&far.path().join("f"));
    let link = d.join(format!(".iteragpu-{pid}-1.tmp"));
    std::os::unix::fs::symlink(far.path().join("f"), &link).unwrap();
    let grid = d.join("results.csv");
    let commands: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        (
            "measure",
            ["measure", "--device", "cpu", "--output", "x.json"]
                .map(Into::into)
                .to_vec(),
        ),
        (
            "probe",
            [
                "probe",
                "--device",
                "cpu",
                "--seconds",
                "0.2",
                "--copy-bytes",
                "1MiB",
                "--output",
                "p.json",
            ]
            .map(Into::into)
            .to_vec(),
        ),
        (
            "report",
            ["report", "m.json", "--output", "r.html"]
                .map(Into::into)
                .to_vec(),
        ),
        ("kit", ["kit", "--output", "k.zip"].map(Into::into).to_vec()),
        (
            "protocol init",
            ["protocol", "init", "new-protocol.txt"]
                .map(Into::into)
                .to_vec(),
        ),
        (
            "record",
            vec![
                "record".into(),
                "--results".into(),
                grid.clone().into(),
                "--protocol".into(),
                protocol.clone().into(),
                "--measurement".into(),
                "m.json".into(),
                "--rental".into(),
                "r".into(),
                "--package".into(),
                "b200:7:1".into(),
                "--submitted".into(),
                "1".into(),
                "--accepted".into(),
                "1".into(),
                "--allow-device-mismatch".into(),
            ],
        ),
    ];
    for (name, args) in commands {
        let started = std::time::Instant::now();
        let out = iteragpu()
            .current_dir(d)
            .args(&args)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{name} took {:?}",
            started.elapsed()
        );
        assert!(
            fifo.symlink_metadata().unwrap().file_type().is_fifo(),
            "{name} touched the FIFO"
        );
        assert!(
            link.symlink_metadata().unwrap().file_type().is_symlink(),
            "{name} touched the link"
        );
    }
    // `protocol lock` writes its lock file beside the protocol.
    iteragpu()
        .current_dir(d)
        .args(["protocol", "lock", "protocol.txt"])
        .timeout(std::time::Duration::from_secs(30))
        .assert()
        .code(predicate::in_iter([0, 1, 2]));
    assert!(fifo.symlink_metadata().is_ok());
}

/// Issue 27: a FIFO (or a device, or a folder) given where a file is read is refused at once with
/// a sentence saying what it is; opening a FIFO with no writer once blocked `report`, `record` and
/// `verify` forever.
#[test]
fn a_fifo_given_as_an_input_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    small_measurement(d);
    let protocol = super::ledger::locked_protocol(d);
    mkfifo(&d.join("doc.json"));
    mkfifo(&d.join("grid.csv"));
    mkfifo(&d.join("tariffs.csv"));
    mkfifo(&d.join("kit.zip"));
    std::fs::create_dir(d.join("model")).unwrap();
    mkfifo(&d.join("model/config.json"));
    let said = "is a FIFO (named pipe), not a regular file";
    let refusals: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        (
            "report",
            ["report", "doc.json", "--output", "r.html"]
                .map(Into::into)
                .to_vec(),
        ),
        (
            "record's measurement",
            vec![
                "record".into(),
                "--results".into(),
                "new.csv".into(),
                "--protocol".into(),
                protocol.clone().into(),
                "--measurement".into(),
                "doc.json".into(),
                "--rental".into(),
                "r".into(),
                "--package".into(),
                "b200:7:1".into(),
                "--submitted".into(),
                "1".into(),
                "--accepted".into(),
                "1".into(),
            ],
        ),
        (
            "cost",
            ["cost", "--results", "grid.csv"].map(Into::into).to_vec(),
        ),
        (
            "record's grid",
            vec![
                "record".into(),
                "--results".into(),
                "grid.csv".into(),
                "--protocol".into(),
                protocol.clone().into(),
                "--measurement".into(),
                "m.json".into(),
                "--rental".into(),
                "r".into(),
                "--package".into(),
                "b200:7:1".into(),
                "--submitted".into(),
                "1".into(),
                "--accepted".into(),
                "1".into(),
                "--allow-device-mismatch".into(),
            ],
        ),
        ("verify", ["verify", "kit.zip"].map(Into::into).to_vec()),
        (
            "estimate --model",
            ["estimate", "--model", "model", "--bits", "16"]
                .map(Into::into)
                .to_vec(),
        ),
        (
            "price --catalogue",
            ["price", "--list", "--catalogue", "tariffs.csv"]
                .map(Into::into)
                .to_vec(),
        ),
    ];
    for (name, args) in refusals {
        let started = std::time::Instant::now();
        let out = iteragpu()
            .current_dir(d)
            .args(&args)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(1 | 2)),
            "{name}: {:?} {stderr}",
            out.status
        );
        assert!(stderr.contains(said), "{name}: {stderr}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{name} took {:?}",
            started.elapsed()
        );
    }
    assert!(!d.join("r.html").exists() && !d.join("new.csv").exists());
}
