//! `fleet slurm` and `fleet skypilot` against hostile values (issue 32): a line break in a
//! `--catalogue`'s model name (it used to be copied raw into a comment of the script and of the
//! YAML, so the next line ran as shell or added YAML keys), control characters in options,
//! Slurm's time formats, and output folders that sbatch reads as a pattern. Every refusal is
//! one sentence naming the value, exit 2, and leaves no folder and no file behind.
//! (The property test of every field is `crates/fleet/tests/quoting.rs`.)

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The bundled catalogue with every `NVIDIA B200` model field replaced by `model`, CSV-quoted.
fn catalogue_with_model(dir: &Path, model: &str) -> PathBuf {
    let csv = std::fs::read_to_string(repo().join("data/tarifs-forfaits.csv")).unwrap();
    let field = format!(",\"{}\",", model.replace('"', "\"\""));
    let hostile = csv.replace(",NVIDIA B200,", &field);
    assert_ne!(hostile, csv);
    let path = dir.join("catalogue.csv");
    std::fs::write(&path, hostile).unwrap();
    path
}

/// Runs the command, requires exit 2 (a refused option) and one line on stderr, and returns
/// that line.
fn refused(cmd: &mut Command) -> String {
    refused_with(cmd, 2)
}

/// Runs the command, requires the exit code and one line on stderr, and returns that line.
fn refused_with(cmd: &mut Command, code: i32) -> String {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr:?}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// Every entry under `dir`, for "nothing was left behind".
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn wheel(dir: &Path) -> PathBuf {
    let wheel = dir.join("iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl");
    std::fs::write(&wheel, b"").unwrap();
    wheel
}

#[test]
fn a_line_break_in_a_catalogue_model_name_is_refused_by_both_verbs() {
    let tmp = tempfile::tempdir().unwrap();
    let pwned = tmp.path().join("pwned");
    // The reproduction of issue 32: after the line break, a shell command for the batch script
    // and a YAML key for the task.
    let payload = format!(
        "NVIDIA B200\ntouch {}\nenvs: {{LD_PRELOAD: /tmp/x.so}}",
        pwned.display()
    );
    let catalogue = catalogue_with_model(tmp.path(), &payload);
    let wheel = wheel(tmp.path());
    let before = entries(tmp.path());
    let out = tmp.path().join("fleet");
    // A data file that fails validation is exit 1, like every other fault of a --catalogue
    // (README's exit-code table); a refused option is exit 2.
    let line = refused_with(
        iteragpu()
            .args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
            .args(["--device", "cpu", "--catalogue"])
            .arg(&catalogue)
            .arg("--output")
            .arg(&out),
        1,
    );
    assert!(
        line.contains(", row 2, column `model`: `NVIDIA B200\\u{a}touch "),
        "{line}"
    );
    assert!(
        line.contains("holds a line break or another control character"),
        "{line}"
    );
    let yaml = tmp.path().join("fleet.yaml");
    let line = refused_with(
        iteragpu()
            .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "4"])
            .arg("--catalogue")
            .arg(&catalogue)
            .arg("--wheel")
            .arg(&wheel)
            .arg("--output")
            .arg(&yaml),
        1,
    );
    assert!(line.contains("column `model`"), "{line}");
    assert!(line.contains("\\u{a}envs: {LD_PRELOAD"), "{line}");
    assert_eq!(entries(tmp.path()), before, "nothing written");
    assert!(!pwned.exists());
}

#[test]
fn a_model_name_with_quotes_and_dollars_is_quoted_not_run() {
    // Printable text with every shell and YAML metacharacter is accepted, and quoted: the
    // script's comment carries it as one shell word, bash parses the script, nothing runs.
    let tmp = tempfile::tempdir().unwrap();
    let pwned = tmp.path().join("pwned");
    let model = format!(
        "NVIDIA B200 '$(touch {p})' `touch {p}` \"x\" #: {{a: b}}",
        p = pwned.display()
    );
    let catalogue = catalogue_with_model(tmp.path(), &model);
    let out = tmp.path().join("fleet");
    iteragpu()
        .args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
        .args(["--device", "cpu", "--catalogue"])
        .arg(&catalogue)
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    let script = std::fs::read_to_string(out.join("fleet.sbatch")).unwrap();
    let quoted = format!("'{}'", model.replace('\'', r"'\''"));
    assert!(
        script.contains(&format!("(8 x {quoted}, 2 per node)")),
        "{script}"
    );
    let status = std::process::Command::new("bash")
        .args(["-n"])
        .arg(out.join("fleet.sbatch"))
        .status()
        .unwrap();
    assert!(status.success());
    let yaml = tmp.path().join("fleet.yaml");
    iteragpu()
        .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "4"])
        .arg("--catalogue")
        .arg(&catalogue)
        .arg("--wheel")
        .arg(wheel(tmp.path()))
        .arg("--output")
        .arg(&yaml)
        .assert()
        .success();
    let text = std::fs::read_to_string(&yaml).unwrap();
    let quoted = format!("\"{}\"", model.replace('\\', "\\\\").replace('"', "\\\""));
    assert!(
        text.contains(&format!("(8 x {quoted}, 2 per node)")),
        "{text}"
    );
    assert!(!pwned.exists());
}

#[test]
fn control_characters_in_options_are_refused_and_nothing_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let before = entries(tmp.path());
    let slurm = |extra: &[&str], output: &Path| {
        let mut cmd = iteragpu();
        cmd.args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
            .args(extra)
            .arg("--output")
            .arg(output);
        cmd
    };
    // A line break in the output folder itself, below a folder that does not exist yet.
    let line = refused(&mut slurm(&[], &tmp.path().join("new/a\nb")));
    assert!(line.starts_with("iteragpu: error: --output `"), "{line}");
    assert!(line.contains("/new/a\\u{a}b` holds a line break"), "{line}");
    let line = refused(&mut slurm(
        &["--partition", "gpu\n#SBATCH --uid=0"],
        &tmp.path().join("p"),
    ));
    assert!(
        line.contains("--partition `gpu\\u{a}#SBATCH --uid=0`"),
        "{line}"
    );
    let wheel = wheel(tmp.path());
    let before_yaml = entries(tmp.path());
    let line = refused(
        iteragpu()
            .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "4"])
            .arg("--wheel")
            .arg(&wheel)
            .args(["--results", "s3://b/x\"\nenvs: {A: b}", "--output"])
            .arg(tmp.path().join("t.yaml")),
    );
    assert!(
        line.contains("--results `s3://b/x\"\\u{a}envs: {A: b}`"),
        "{line}"
    );
    assert_eq!(entries(tmp.path()), before_yaml);
    std::fs::remove_file(&wheel).unwrap();
    assert_eq!(entries(tmp.path()), before);
}

#[test]
fn time_limits_are_slurms_formats_and_zero_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |time: &str, output: &Path| {
        let mut cmd = iteragpu();
        cmd.args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
            .arg(format!("--time={time}"))
            .arg("--output")
            .arg(output);
        cmd
    };
    for zero in ["0", "0:00", "0-0"] {
        let line = refused(&mut run(zero, &tmp.path().join("z/deeper")));
        assert!(line.contains("(0 means unlimited)"), "{zero}: {line}");
    }
    for bad in [
        "1:2:3:4", "1-24", "1:60", "INFINITE", "-1", "1h", "30-0:1", "1:00:00 ",
    ] {
        let line = refused(&mut run(bad, &tmp.path().join("b")));
        assert!(
            line.contains("is not a Slurm time limit") || line.contains("longer than 30 days"),
            "{bad}: {line}"
        );
    }
    assert!(entries(tmp.path()).is_empty(), "{:?}", entries(tmp.path()));
    for (i, good) in ["30", "1:30:00", "1-02:03:04", "2-12"].iter().enumerate() {
        let out = tmp.path().join(format!("ok{i}"));
        run(good, &out).assert().success();
        let script = std::fs::read_to_string(out.join("fleet.sbatch")).unwrap();
        assert!(
            script.contains(&format!("\n#SBATCH --time={good}\n")),
            "{script}"
        );
    }
}

#[test]
fn an_output_folder_that_sbatch_reads_as_a_pattern_is_refused_before_any_folder_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["run-%j", "a\\b", "a#b", "a b", "it's", "HetJob-1", "q\"x"] {
        // Two missing levels above the refused name, and one below it: none may be created.
        let out = tmp.path().join("x/y").join(name).join("z");
        let line = refused(
            iteragpu()
                .args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
                .arg("--output")
                .arg(&out),
        );
        assert!(line.contains("#SBATCH line cannot carry"), "{name}: {line}");
        let shown = tmp.path().canonicalize().unwrap();
        assert!(
            line.contains(&format!("--output `{}/x/y/", shown.display())),
            "{line}"
        );
        assert!(
            entries(tmp.path()).is_empty(),
            "{name}: {:?}",
            entries(tmp.path())
        );
    }
    // `..` over a missing folder names the folder it ends in, and only that one is made.
    let out = tmp.path().join("gone/../made");
    iteragpu()
        .args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
        .arg("--output")
        .arg(&out)
        .assert()
        .success();
    assert_eq!(entries(tmp.path()), ["made"]);
    let script = std::fs::read_to_string(tmp.path().join("made/fleet.sbatch")).unwrap();
    let made = tmp.path().canonicalize().unwrap().join("made");
    assert!(
        script.contains(&format!(
            "#SBATCH --output={}/slurm-%j.out\n",
            made.display()
        )),
        "{script}"
    );
}

#[test]
fn the_help_says_what_is_refused() {
    let out = iteragpu()
        .args(["fleet", "slurm", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).replace('\n', " ");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "D-HH:MM:SS, from 1 minute to 30 days; 0 (Slurm's \"no limit\") and anything else, such as 1:2:3:4, are refused",
        "Refused, not escaped, when its absolute path holds a space, a quote, `\\`, `#`, `%`",
        "A value with a line break or another control character",
    ] {
        assert!(help.contains(said), "{said}\n{help}");
    }
}
