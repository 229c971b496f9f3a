//! `scripts/install.sh`, run as a user runs it: from a kit this build wrote and unpacked, or from
//! a checkout's `dist/`, into a new prefix and a new home, with the system's own tools (dash,
//! sha256sum, man). Other machines (`uname -m`), old glibc and musl are refused through stand-ins
//! for `uname`, `getconf` and `ldd` put first on the PATH.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output};

use assert_cmd::Command;

fn target() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

/// A kit written by this build (it carries this build: no dist/ in the folder it runs in),
/// unpacked; returns the kit's top folder.
fn unpacked_kit(dir: &Path) -> PathBuf {
    let zip = dir.join("kit.zip");
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .current_dir(dir)
        .arg("kit")
        .arg("--output")
        .arg(&zip)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("program: this machine's build"), "{out}");
    assert!(out.contains(&format!("bin/{}/iteragpu", target())), "{out}");
    assert!(out.contains("scripts/install.sh"), "{out}");
    let land = dir.join("land");
    super::kit::extract(&zip, &land);
    land.join(kit::ROOT)
}

/// The system's PATH without any folder that holds an `iteragpu`.
fn system_path(first: Option<&Path>) -> String {
    let mut parts: Vec<PathBuf> = first.into_iter().map(Path::to_path_buf).collect();
    parts.extend(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .filter(|p| !p.join("iteragpu").exists()),
    );
    std::env::join_paths(parts)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Runs `sh SCRIPT ARGS` (dash on Debian) with `home` as HOME and `path` as PATH.
fn install(script: &Path, args: &[&str], home: &Path, path: &str) -> Output {
    std::fs::create_dir_all(home).unwrap();
    Process::new("sh")
        .arg(script)
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .env("LC_ALL", "C.UTF-8")
        .output()
        .expect("sh runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn have(program: &str, test: &str) -> bool {
    let found = Process::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but `{program}` is not installed: .ci/run installs it");
        }
        eprintln!("SKIPPED part of {test}: no `{program}` on the PATH");
    }
    found
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(
                    files(&p)
                        .into_iter()
                        .map(|f| format!("{}/{f}", p.file_name().unwrap().to_string_lossy())),
                );
            } else {
                out.push(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// From an unpacked kit into ~/.local of a new home: the binary this build is, its man pages,
/// both completions, and the hints for PATH; man finds the pages through the PATH alone; a second
/// run gives the same files and leaves no temporary file.
#[test]
fn installs_from_an_unpacked_kit_into_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let top = unpacked_kit(dir.path());
    let home = dir.path().join("home");
    let script = top.join("scripts/install.sh");
    let path = system_path(None);
    let done = install(&script, &[], &home, &path);
    let out = text(&done.stdout);
    assert!(done.status.success(), "{out}{}", text(&done.stderr));
    assert_eq!(text(&done.stderr), "");
    let member = format!("bin/{}/iteragpu", target());
    for line in [
        format!("; {member} matches SHA256SUMS"),
        "installed iteragpu ".to_string(),
        "  ~/.local/bin/iteragpu".to_string(),
        "  ~/.local/share/man/man1/iteragpu.1 and ".to_string(),
        "  ~/.local/share/bash-completion/completions/iteragpu".to_string(),
        "  ~/.local/share/zsh/site-functions/_iteragpu".to_string(),
        "PATH: add to ~/.profile (or ~/.bashrc, ~/.zshrc): export PATH=\"$HOME/.local/bin:$PATH\""
            .to_string(),
        "bash: the bash-completion package loads ~/.local/share/bash-completion/completions/iteragpu by itself"
            .to_string(),
    ] {
        assert!(out.contains(&line), "no `{line}` in:\n{out}");
    }

    let local = home.join(".local");
    let installed = local.join("bin/iteragpu");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(assert_cmd::cargo::cargo_bin("iteragpu")).unwrap()
    );
    let version = Process::new(&installed).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert!(text(&version.stdout).starts_with("iteragpu "));
    assert!(out.contains(&format!("installed {}", text(&version.stdout).trim())));
    let estimate = Process::new(&installed)
        .args(["estimate", "--parameters", "7B", "--bits", "16", "--json"])
        .output()
        .unwrap();
    assert!(estimate.status.success(), "{}", text(&estimate.stderr));

    let man1 = local.join("share/man/man1");
    let pages = files(&man1);
    assert!(pages.contains(&"iteragpu.1".to_string()), "{pages:?}");
    assert!(
        pages.contains(&"iteragpu-measure.1".to_string()),
        "{pages:?}"
    );
    assert!(
        out.contains(&format!("and {} iteragpu-COMMAND.1 pages", pages.len() - 1)),
        "{out}"
    );
    let page = std::fs::read_to_string(man1.join("iteragpu-measure.1")).unwrap();
    assert!(
        page.contains("\n.TH iteragpu-measure 1 "),
        "{}",
        &page[..80]
    );
    let bash =
        std::fs::read_to_string(local.join("share/bash-completion/completions/iteragpu")).unwrap();
    let zsh = std::fs::read_to_string(local.join("share/zsh/site-functions/_iteragpu")).unwrap();
    assert!(zsh.starts_with("#compdef iteragpu"), "{}", &zsh[..40]);
    // The bash script loads and registers the completion.
    let loads = Process::new("bash")
        .arg("-c")
        .arg(r#". "$1" && complete -p iteragpu"#)
        .arg("bash")
        .arg(local.join("share/bash-completion/completions/iteragpu"))
        .output()
        .unwrap();
    assert!(loads.status.success(), "{}", text(&loads.stderr));
    assert!(text(&loads.stdout).contains("iteragpu"), "{bash:.80}");

    if have("man", "installs_from_an_unpacked_kit_into_the_home") {
        // man-db derives ~/.local/share/man from ~/.local/bin on the PATH: no MANPATH needed.
        let found = Process::new("man")
            .args(["-w", "iteragpu-measure"])
            .env_remove("MANPATH")
            .env("HOME", &home)
            .env("PATH", system_path(Some(&local.join("bin"))))
            .output()
            .unwrap();
        assert!(found.status.success(), "{}", text(&found.stderr));
        assert_eq!(
            text(&found.stdout).trim(),
            man1.join("iteragpu-measure.1").display().to_string()
        );
    }

    // Again: the same files, the same report, nothing left beside them.
    let before = files(&local);
    let again = install(&script, &[], &home, &path);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), out);
    assert_eq!(files(&local), before);
    assert!(
        before.iter().all(|f| !f.contains(".iteragpu.install")),
        "{before:?}"
    );
    // With the prefix on the PATH, it says so instead of what to add.
    let on_path = install(&script, &[], &home, &system_path(Some(&local.join("bin"))));
    assert!(
        text(&on_path.stdout).contains("PATH: ~/.local/bin is on it: run iteragpu --help"),
        "{}",
        text(&on_path.stdout)
    );
}

/// One byte changed in the kit's binary: refused by its checksum, and nothing installed.
#[test]
fn a_tampered_binary_is_refused_and_nothing_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    let top = unpacked_kit(dir.path());
    let binary = top.join(format!("bin/{}/iteragpu", target()));
    let mut bytes = std::fs::read(&binary).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&binary, bytes).unwrap();
    let prefix = dir.path().join("prefix");
    let done = install(
        &top.join("scripts/install.sh"),
        &["--prefix", prefix.to_str().unwrap()],
        &dir.path().join("home"),
        &system_path(None),
    );
    assert_eq!(done.status.code(), Some(1));
    assert_eq!(text(&done.stdout), "");
    let err = text(&done.stderr);
    assert!(
        err.starts_with(&format!(
            "install.sh: error: bin/{}/iteragpu does not match SHA256SUMS (SHA-256 ",
            target()
        )),
        "{err}"
    );
    assert!(err.contains("nothing was installed"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!prefix.exists(), "{:?}", files(&prefix));
}

/// A checkout after scripts/release.sh, holding `bytes` as dist/<target>/iteragpu with its
/// dist/SHA256SUMS and a copy of install.sh under scripts/.
fn checkout_with_dist(dir: &Path, bytes: &[u8]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let checkout = dir.join("checkout");
    let bin = checkout.join("dist").join(target());
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(checkout.join("scripts")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install.sh"),
        checkout.join("scripts/install.sh"),
    )
    .unwrap();
    std::fs::write(bin.join("iteragpu"), bytes).unwrap();
    std::fs::set_permissions(bin.join("iteragpu"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sums = Process::new("sh")
        .arg("-c")
        .arg(format!("sha256sum -- {}/iteragpu > SHA256SUMS", target()))
        .current_dir(checkout.join("dist"))
        .status()
        .unwrap();
    assert!(sums.success());
    checkout
}

/// A checkout after scripts/release.sh: the script finds dist/<target>/iteragpu and
/// dist/SHA256SUMS by itself and installs under --prefix.
#[test]
fn installs_from_a_checkouts_dist_under_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::fs::read(assert_cmd::cargo::cargo_bin("iteragpu")).unwrap();
    let checkout = checkout_with_dist(dir.path(), &exe);
    let prefix = dir.path().join("opt");
    let done = install(
        &checkout.join("scripts/install.sh"),
        &["--prefix", prefix.to_str().unwrap()],
        &dir.path().join("home"),
        &system_path(None),
    );
    let out = text(&done.stdout);
    assert!(done.status.success(), "{out}{}", text(&done.stderr));
    assert!(
        out.contains(&format!("; {}/iteragpu matches SHA256SUMS", target())),
        "{out}"
    );
    let shown = prefix.display().to_string();
    for line in [
        format!("  {shown}/bin/iteragpu"),
        format!(
            "PATH: add to ~/.profile (or ~/.bashrc, ~/.zshrc): export PATH=\"{shown}/bin:$PATH\""
        ),
        format!("bash: add to ~/.bashrc: . \"{shown}/share/bash-completion/completions/iteragpu\""),
        format!(
            "zsh: add to ~/.zshrc, before compinit: fpath=(\"{shown}/share/zsh/site-functions\" $fpath)"
        ),
    ] {
        assert!(out.contains(&line), "no `{line}` in:\n{out}");
    }
    assert!(prefix.join("bin/iteragpu").is_file());
    assert!(prefix.join("share/man/man1/iteragpu-measure.1").is_file());
    assert!(
        prefix
            .join("share/bash-completion/completions/iteragpu")
            .is_file()
    );
    assert!(prefix.join("share/zsh/site-functions/_iteragpu").is_file());
}

/// A binary built on a newer system than this one does not start (the loader lacks a GLIBC_
/// version): refused in one sentence that names the version, and nothing is installed.
#[test]
fn a_binary_for_a_newer_glibc_is_refused_and_nothing_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    // What the dynamic loader prints for such a binary, as Debian 11's did for a Debian 12 build.
    let too_new = "#!/bin/sh\n\
        echo \"$0: /lib/x86_64-linux-gnu/libm.so.6: version \\`GLIBC_2.35' not found (required by $0)\" >&2\n\
        echo \"$0: /lib/x86_64-linux-gnu/libc.so.6: version \\`GLIBC_2.34' not found (required by $0)\" >&2\n\
        exit 1\n";
    let checkout = checkout_with_dist(dir.path(), too_new.as_bytes());
    let prefix = dir.path().join("opt");
    let done = install(
        &checkout.join("scripts/install.sh"),
        &["--prefix", prefix.to_str().unwrap()],
        &dir.path().join("home"),
        &system_path(None),
    );
    let err = text(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "install.sh: error: {}/iteragpu needs GLIBC_2.35, newer than this machine's glibc ",
            target()
        )),
        "{err}"
    );
    assert!(err.trim_end().ends_with("nothing was installed"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(files(&prefix), Vec::<String>::new());
}

/// Writes an executable stand-in for `name` into `dir`.
fn stand_in(dir: &Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Another architecture, a glibc older than 2.28 and musl are each refused in one sentence, and
/// nothing is installed; so are an unknown option and a folder that holds no kit.
#[test]
fn other_machines_old_glibc_musl_and_bad_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let top = unpacked_kit(dir.path());
    let script = top.join("scripts/install.sh");
    let home = dir.path().join("home");
    // (case, stand-ins as (program, script), exit code, the error's start)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], i32, &'a str);
    let cases: [Case<'_>; 4] = [
        (
            "riscv",
            &[("uname", r#"[ "$1" = -m ] && echo riscv64 || echo Linux"#)],
            1,
            "install.sh: error: this machine is riscv64 (uname -m); the kit's iteragpu runs on x86_64 and aarch64 Linux only",
        ),
        (
            "old-glibc",
            &[("getconf", "echo 'glibc 2.17'")],
            1,
            "install.sh: error: this system has glibc 2.17; iteragpu needs glibc 2.28 or newer",
        ),
        (
            "musl",
            &[
                (
                    "getconf",
                    "echo 'getconf: GNU_LIBC_VERSION: unknown variable' >&2; exit 1",
                ),
                (
                    "ldd",
                    "echo 'musl libc (x86_64)' >&2; echo 'Version 1.2.4' >&2; exit 1",
                ),
            ],
            1,
            "install.sh: error: this system's C library is musl (ldd --version), not glibc",
        ),
        (
            "unknown-option",
            &[],
            2,
            "install.sh: error: unknown argument `--prefx`; the options are --prefix DIR, --from DIR and --help",
        ),
    ];
    for (name, fakes, code, says) in cases {
        let fake = dir.path().join(format!("fake-{name}"));
        std::fs::create_dir_all(&fake).unwrap();
        for (program, body) in fakes {
            stand_in(&fake, program, body);
        }
        let prefix = dir.path().join(format!("prefix-{name}"));
        let mut args = vec!["--prefix", prefix.to_str().unwrap()];
        if name == "unknown-option" {
            args.push("--prefx");
        }
        let done = install(&script, &args, &home, &system_path(Some(&fake)));
        let err = text(&done.stderr);
        assert_eq!(done.status.code(), Some(code), "{name}: {err}");
        assert!(err.starts_with(says), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(!prefix.exists(), "{name}: something was installed");
    }
    // A folder with no kit in it.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let done = install(
        &script,
        &["--from", empty.to_str().unwrap()],
        &home,
        &system_path(None),
    );
    assert_eq!(done.status.code(), Some(1));
    assert!(
        text(&done.stderr).contains(&format!(
            "holds no iteragpu for this machine ({})",
            target()
        )),
        "{}",
        text(&done.stderr)
    );
    let help = install(&script, &["--help"], &home, &system_path(None));
    assert!(help.status.success());
    for word in ["--prefix DIR", "SHA256SUMS", "glibc 2.28", "share/man/man1"] {
        assert!(text(&help.stdout).contains(word), "{word}");
    }
}

/// What `sh` makes of one printed shell line: `line`, then `then`, with `home` as HOME, in a
/// folder of its own; returns stdout.
fn sh_reads(line: &str, then: &str, home: &Path) -> String {
    let out = Process::new("sh")
        .arg("-c")
        .arg(format!("{line}\n{then}"))
        .current_dir(home)
        .env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .env("MANPATH", "/usr/share/man")
        .output()
        .expect("sh runs");
    assert!(out.status.success(), "{line}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The text after `marker` on the line of `out` that holds it.
fn after<'a>(out: &'a str, marker: &str) -> &'a str {
    let line = out
        .lines()
        .find(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no `{marker}` in:\n{out}"));
    &line[line.find(marker).unwrap() + marker.len()..]
}

/// A --prefix with every character a shell line treats specially (issue 32): the PATH, MANPATH,
/// bash and zsh lines it prints name the folder exactly when a shell reads them, and run
/// nothing; a prefix with a line break or a `:`, which no PATH line can carry, is refused and
/// nothing is installed.
#[test]
fn a_hostile_prefix_is_quoted_in_the_lines_it_prints() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::fs::read(assert_cmd::cargo::cargo_bin("iteragpu")).unwrap();
    let checkout = checkout_with_dist(dir.path(), &exe);
    let script = checkout.join("scripts/install.sh");
    let home = dir.path().join("home");
    let pwned = dir.path().join("pwned");
    let hostile = format!(
        "it's \"$(touch {p})\" `touch {p}` \\n !x ~ $HOME *",
        p = pwned.display()
    );
    // Outside the home folder, and under it (written with $HOME).
    for prefix in [dir.path().join(&hostile), home.join(&hostile)] {
        let done = install(
            &script,
            &["--prefix", prefix.to_str().unwrap()],
            &home,
            &system_path(None),
        );
        let out = text(&done.stdout);
        assert!(done.status.success(), "{out}{}", text(&done.stderr));
        assert!(prefix.join("bin/iteragpu").is_file());
        let path = after(&out, "(or ~/.bashrc, ~/.zshrc): ");
        assert!(path.starts_with("export PATH="), "{out}");
        assert_eq!(
            sh_reads(path, "printf %s \"$PATH\"", &home),
            format!("{}/bin:/usr/bin:/bin", prefix.display())
        );
        let bash = after(&out, "bash: add to ~/.bashrc: . ");
        assert_eq!(
            sh_reads(&format!("printf %s {bash}"), "", &home),
            format!(
                "{}/share/bash-completion/completions/iteragpu",
                prefix.display()
            )
        );
        let zsh = after(&out, "before compinit: ");
        let word = zsh
            .strip_prefix("fpath=(")
            .and_then(|w| w.strip_suffix(" $fpath)"))
            .unwrap_or_else(|| panic!("{zsh}"));
        let zsh_dir = format!("{}/share/zsh/site-functions", prefix.display());
        assert_eq!(sh_reads(&format!("printf %s {word}"), "", &home), zsh_dir);
        if have("zsh", "a_hostile_prefix_is_quoted_in_the_lines_it_prints") {
            let out = Process::new("zsh")
                .args(["-f", "-c", &format!("{zsh}\nprint -rn -- $fpath[1]")])
                .env_clear()
                .env("HOME", &home)
                .output()
                .unwrap();
            assert_eq!(text(&out.stdout), zsh_dir, "{}", text(&out.stderr));
        }
        assert!(!pwned.exists(), "a printed line ran a command");
    }
    // With MANPATH set, the MANPATH line too.
    let prefix = dir.path().join(format!("man {hostile}"));
    let done = Process::new("sh")
        .arg(&script)
        .args(["--prefix", prefix.to_str().unwrap()])
        .env_clear()
        .env("HOME", &home)
        .env("PATH", system_path(None))
        .env("MANPATH", "/usr/share/man")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap();
    let out = text(&done.stdout);
    assert!(done.status.success(), "{out}{}", text(&done.stderr));
    let man = format!("export MANPATH={}", after(&out, "add export MANPATH="));
    assert_eq!(
        sh_reads(&man, "printf %s \"$MANPATH\"", &home),
        format!("{}/share/man:/usr/share/man", prefix.display())
    );
    assert!(!pwned.exists());
    // What no PATH line can carry: refused in one sentence, nothing installed.
    for (name, says) in [
        (
            "line\nbreak",
            "--prefix holds a line break or another control character",
        ),
        (
            "a:b",
            "holds a `:`, which separates the folders of PATH and MANPATH",
        ),
    ] {
        let prefix = dir.path().join(name);
        let done = install(
            &script,
            &["--prefix", prefix.to_str().unwrap()],
            &home,
            &system_path(None),
        );
        let err = text(&done.stderr);
        assert_eq!(done.status.code(), Some(2), "{err}");
        assert!(
            err.starts_with("install.sh: error: ") && err.contains(says),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!prefix.exists());
    }
}
