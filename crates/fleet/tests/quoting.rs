//! Every value that reaches the batch script or the task YAML, fed arbitrary strings (issue 32):
//! either it is refused with [`fleet::Error::Value`] naming its option (and then it held a line
//! break or another control character, or broke that option's own rule), or it comes back
//! unchanged from the reader that reads it, and nothing else appears:
//!
//! - the batch script: `bash -n`; sbatch's reading of the `#SBATCH` lines (its tokenizer,
//!   written out below from Slurm's `_get_argument`); and the script run by bash with `srun`,
//!   `scontrol` and `export` recorded, whose argument lists and output must be exactly the
//!   expected ones;
//! - the task YAML: a YAML parser (yaml-rust2) must read the same document as for a plain value
//!   with only that value changed, and its `run` run by bash with `timeout` recorded;
//! - comments: the script or YAML differs from the plain one only where the value stands, and
//!   that text reads back (bash, the YAML parser) as the value.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use fleet::skypilot::{Install, Task};
use fleet::slurm::Allocation;
use fleet::{Check, Device, Plan, quote};
use proptest::prelude::*;
use yaml_rust2::{Yaml, YamlLoader};

/// The fields a user or a catalogue gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Package,
    Model,
    Binary,
    Dir,
    Partition,
    Time,
    Name,
    Wheel,
    Kit,
    Results,
}

const SLURM_FIELDS: [Field; 6] = [
    Field::Package,
    Field::Model,
    Field::Binary,
    Field::Dir,
    Field::Partition,
    Field::Time,
];
const SKYPILOT_FIELDS: [Field; 6] = [
    Field::Package,
    Field::Model,
    Field::Name,
    Field::Wheel,
    Field::Kit,
    Field::Results,
];

/// Plain values, each unique in the output, so that where a value stands is known.
const PACKAGE: &str = "pkg:base";
const MODEL: &str = "BaseModel";
const BINARY: &str = "/base/bin/iteragpu";
const DIR: &str = "/base/dir";
const PARTITION: &str = "basepart";
const TIME: &str = "77";
const NAME: &str = "basename";
const WHEEL: &str = "/base/wheelfile";
const KIT: &str = "/base/kitdir";
const RESULTS: &str = "s3://base-bucket/x";

fn plan(field: Field, value: &str) -> Plan {
    let pick = |f: Field, plain: &str| {
        if f == field {
            value.to_string()
        } else {
            plain.to_string()
        }
    };
    Plan {
        package: pick(Field::Package, PACKAGE),
        model: pick(Field::Model, MODEL),
        gpu: "b200".to_string(),
        gpus: 8,
        nodes: 4,
        // The per-node checks, each run once by the stub: the collective's steps take no value
        // from outside but the binary, which the other steps carry the same way.
        checks: vec![Check::Environment, Check::Probe, Check::Measure],
        device: Device::Gpu,
        probe_seconds: 10.0,
        binary: pick(Field::Binary, BINARY),
    }
}

fn allocation(field: Field, value: &str) -> Allocation {
    Allocation {
        partition: Some(
            if field == Field::Partition {
                value
            } else {
                PARTITION
            }
            .to_string(),
        ),
        time: Some(if field == Field::Time { value } else { TIME }.to_string()),
    }
}

fn dir(field: Field, value: &str) -> String {
    if field == Field::Dir { value } else { DIR }.to_string()
}

/// The wheel as given: the value with `.whl` after it (the only other rule of `--wheel`).
fn task(field: Field, value: &str, kit: bool) -> Task {
    Task {
        install: if field == Field::Wheel {
            Install::Wheel(format!("{value}.whl"))
        } else if kit || field == Field::Kit {
            Install::Kit(if field == Field::Kit { value } else { KIT }.to_string())
        } else {
            Install::Wheel(format!("{WHEEL}.whl"))
        },
        results: Some(
            if field == Field::Results {
                value
            } else {
                RESULTS
            }
            .to_string(),
        ),
        name: if field == Field::Name { value } else { NAME }.to_string(),
    }
}

fn unsafe_text(value: &str) -> bool {
    value.chars().any(lab_io::text::is_unsafe_char)
}

/// Whether a value holds none of the words sbatch blanks on an `#SBATCH` line.
fn sbatch_words_ok(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    !lower.contains("hetjob") && !lower.contains("packjob")
}

/// Whether a value a format can carry must be accepted for this field (its own rule).
fn field_accepts(field: Field, value: &str) -> bool {
    match field {
        Field::Partition => {
            !value.is_empty()
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.,".contains(c))
                && sbatch_words_ok(value)
        }
        Field::Time => fleet::slurm::time_minutes(value).is_ok(),
        Field::Name => {
            !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        }
        Field::Dir => {
            !value.is_empty()
                && !value
                    .chars()
                    .any(|c| c.is_whitespace() || "'\"\\#%".contains(c))
                && sbatch_words_ok(value)
        }
        _ => true,
    }
}

fn option_name(field: Field) -> &'static str {
    match field {
        Field::Package => "--package",
        Field::Model => "the catalogue's model name",
        Field::Binary => "--binary",
        Field::Dir => "--output",
        Field::Partition => "--partition",
        Field::Time => "--time",
        Field::Name => "--name",
        Field::Wheel => "--wheel",
        Field::Kit => "--kit",
        Field::Results => "--results",
    }
}

/// A refusal or an acceptance, as the field's rules say it must be.
fn check_refusal(field: Field, value: &str, error: Option<&fleet::Error>) {
    let must_accept = !unsafe_text(value) && field_accepts(field, value);
    match error {
        None => assert!(must_accept, "{field:?} {value:?} was accepted"),
        Some(e) => {
            let message = e.to_string();
            assert!(!must_accept, "{field:?} {value:?} was refused: {message}");
            assert!(
                message.starts_with(&format!("{} `", option_name(field))),
                "{field:?}: {message}"
            );
            assert!(
                !message.chars().any(lab_io::text::is_unsafe_char),
                "one printable line: {message:?}"
            );
        }
    }
}

/// What bash reads a shell word as (`printf %s WORD`).
fn bash_word(word: &str) -> String {
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &format!("printf %s {word}")])
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{word}");
    String::from_utf8(out.stdout).unwrap()
}

fn bash_syntax_ok(text: &str) -> bool {
    let mut child = Command::new("bash")
        .args(["--norc", "--noprofile", "-n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    child.wait().unwrap().success()
}

/// What a YAML reader reads a scalar as.
fn yaml_scalar(text: &str) -> String {
    let docs = YamlLoader::load_from_str(&format!("v: {text}\n")).unwrap();
    docs[0]["v"].as_str().unwrap().to_string()
}

/// `baseline` with each (plain text, value's text) replaced: the text the value's output must be.
fn expected_text(baseline: &str, replacements: &[(String, String)]) -> String {
    let mut text = baseline.to_string();
    for (from, to) in replacements {
        assert!(text.contains(from.as_str()), "{from} not in {baseline}");
        text = text.replace(from.as_str(), to);
    }
    text
}

/// The arguments of every `#SBATCH` (and `#SLURM`) line sbatch reads, as its `_get_argument`
/// splits them, up to the first line that is a command.
fn sbatch_arguments(script: &str) -> Vec<String> {
    let mut args = Vec::new();
    for line in script.lines() {
        let rest = if let Some(r) = line.strip_prefix("#SBATCH") {
            r
        } else if let Some(r) = line.strip_prefix("#SLURM") {
            r
        } else {
            match line.trim_start().chars().next() {
                None | Some('#') => continue,
                Some(_) => break,
            }
        };
        // sbatch blanks these words anywhere on the line (hetjob separators).
        let mut rest = rest.to_string();
        for word in ["packjob", "hetjob"] {
            while let Some(at) = rest.to_ascii_lowercase().find(word) {
                rest.replace_range(at..at + word.len(), &" ".repeat(word.len()));
            }
        }
        let chars: Vec<char> = rest.chars().collect();
        let mut i = 0;
        loop {
            while i < chars.len() && chars[i].is_ascii_whitespace() {
                i += 1;
            }
            if i >= chars.len() {
                break;
            }
            assert_ne!(chars[i], ':', "sbatch: unexpected `:` in {line}");
            let (mut arg, mut quoted, mut escape) = (String::new(), None, false);
            while i < chars.len() && (quoted.is_some() || !chars[i].is_ascii_whitespace()) {
                let c = chars[i];
                i += 1;
                if escape {
                    escape = false;
                } else if c == '\\' {
                    escape = true;
                    continue;
                } else if let Some(q) = quoted {
                    if c == q {
                        quoted = None;
                        continue;
                    }
                } else if c == '"' || c == '\'' {
                    quoted = Some(c);
                    continue;
                } else if c == '#' {
                    i = chars.len();
                    break;
                }
                arg.push(c);
            }
            assert!(quoted.is_none(), "sbatch: unmatched quote in {line}");
            if !arg.is_empty() {
                args.push(arg);
            }
        }
    }
    args
}

/// Runs `text` with bash in a fresh folder, the named commands replaced by functions that write
/// their arguments (NUL-separated, one record a call) to a file; returns the records, stdout,
/// stderr and the exit code.
struct Run {
    records: Vec<Vec<String>>,
    stdout: String,
    stderr: String,
    code: Option<i32>,
}

fn run_recorded(text: &str, preamble: &str, env: &[(&str, &str)]) -> Run {
    let sandbox = tempfile::tempdir().unwrap();
    let rec = sandbox.path().join("records");
    let script = sandbox.path().join("script.sh");
    std::fs::write(&script, format!("{preamble}\n{text}")).unwrap();
    let out = Command::new("bash")
        .args(["--norc", "--noprofile"])
        .arg(&script)
        .current_dir(sandbox.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("REC", &rec)
        .env("SANDBOX", sandbox.path())
        .env("HOME", sandbox.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let raw = std::fs::read(&rec).unwrap_or_default();
    let raw = String::from_utf8(raw).unwrap();
    let mut records = Vec::new();
    let mut current = Vec::new();
    for part in raw.split('\0') {
        if part == "\u{1}END" {
            records.push(std::mem::take(&mut current));
        } else {
            current.push(part.to_string());
        }
    }
    Run {
        records,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

/// A function per recorded command: its name, then its arguments, then an end mark.
fn recorder(name: &str, then: &str) -> String {
    format!("{name}() {{ printf '%s\\0' {name} \"$@\" $'\\001END' >>\"$REC\"; {then} }}\n")
}

/// The batch script run with srun, scontrol and export recorded (export then points the
/// folder into the sandbox).
fn run_script(script: &str) -> Run {
    let preamble = [
        recorder("export", "builtin export FLEET_DIR=\"$SANDBOX\";"),
        recorder("srun", "return 0;"),
        "scontrol() { echo n1; }\n".to_string(),
    ]
    .concat();
    run_recorded(
        script,
        &preamble,
        &[
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_JOB_ID", "1"),
            ("SLURM_JOB_NUM_NODES", "1"),
        ],
    )
}

/// The task's `run` with timeout recorded, python3 and uname answering, and no folder made
/// outside the sandbox.
fn run_task(run: &str) -> Run {
    let preamble = [
        recorder("timeout", "return 0;"),
        "uname() { echo x86_64; }\nmkdir() { :; }\ncd() { builtin cd \"$SANDBOX\"; }\n".to_string(),
    ]
    .concat();
    run_recorded(run, &preamble, &[("SKYPILOT_NODE_RANK", "0")])
}

/// The plain script's srun records (with the step text), computed once.
fn baseline_script() -> &'static (String, Run) {
    static BASE: OnceLock<(String, Run)> = OnceLock::new();
    BASE.get_or_init(|| {
        let script = fleet::slurm::script(
            &plan(Field::Model, MODEL),
            &allocation(Field::Model, MODEL),
            DIR,
        )
        .unwrap();
        let run = run_script(&script);
        (script, run)
    })
}

fn check_slurm(field: Field, value: &str) {
    let p = plan(field, value);
    let a = allocation(field, value);
    let d = dir(field, value);
    let script = match fleet::slurm::script(&p, &a, &d) {
        Ok(s) => {
            check_refusal(field, value, None);
            s
        }
        Err(e) => return check_refusal(field, value, Some(&e)),
    };
    assert!(bash_syntax_ok(&script), "bash -n refused:\n{script}");

    // Nothing else appears: the plain script with this value's text where the plain value's is.
    let (base, base_run) = baseline_script();
    let q = |v: &str| quote::shell("test", v).unwrap();
    let replacements: Vec<(String, String)> = match field {
        Field::Package => vec![(PACKAGE.to_string(), q(value))],
        Field::Model => vec![(MODEL.to_string(), q(value))],
        Field::Binary => vec![(format!("BIN={BINARY}\n"), format!("BIN={}\n", q(value)))],
        Field::Dir => vec![
            (
                format!("--output={DIR}/slurm"),
                format!("--output={value}/slurm"),
            ),
            (
                format!("--wait {DIR}/fleet.sbatch "),
                format!("--wait {} ", q(&format!("{value}/fleet.sbatch"))),
            ),
            (
                format!("fleet check {DIR})"),
                format!("fleet check {})", q(value)),
            ),
            (
                format!("FLEET_DIR={DIR}\n"),
                format!("FLEET_DIR={}\n", q(value)),
            ),
        ],
        Field::Partition => vec![(
            format!("--partition={PARTITION}\n"),
            format!("--partition={value}\n"),
        )],
        Field::Time => vec![(format!("--time={TIME}\n"), format!("--time={value}\n"))],
        _ => unreachable!(),
    };
    assert_eq!(script, expected_text(base, &replacements));
    // ... and each shell word reads back as the value (the comment's too: same text).
    match field {
        Field::Package | Field::Model | Field::Binary => assert_eq!(bash_word(&q(value)), value),
        Field::Dir => {
            assert_eq!(bash_word(&q(value)), value);
            let script_path = format!("{value}/fleet.sbatch");
            assert_eq!(bash_word(&q(&script_path)), script_path);
        }
        _ => {}
    }

    // sbatch reads exactly the directives, with the values as given.
    let expected = vec![
        "--job-name=iteragpu-fleet".to_string(),
        "--nodes=4".to_string(),
        "--ntasks-per-node=1".to_string(),
        "--exclusive".to_string(),
        "--no-requeue".to_string(),
        "--gpus-per-node=2".to_string(),
        format!("--partition={}", a.partition.as_deref().unwrap()),
        format!("--time={}", a.time.as_deref().unwrap()),
        format!("--output={d}/slurm-%j.out"),
    ];
    assert_eq!(sbatch_arguments(&script), expected);
    // The only file-name pattern Slurm sees in the output path is the script's own `%j`.
    assert!(!d.contains('%') && !d.contains('\\'));

    // Run: the recorded calls are exactly the expected ones, and nothing else is printed.
    let run = run_script(&script);
    assert_eq!(run.stderr, "", "{script}");
    assert_eq!(run.code, Some(0));
    assert_eq!(
        run.stdout,
        "iteragpu fleet: job 1 on 1 node(s): n1\n== environment\n== probe\n== measure\n"
    );
    assert_eq!(run.records.len(), 1 + p.checks.len(), "{:?}", run.records);
    assert_eq!(
        run.records[0],
        ["export".to_string(), format!("FLEET_DIR={d}")]
    );
    for (i, &check) in p.checks.iter().enumerate() {
        let got = &run.records[1 + i];
        let plain = &base_run.records[1 + i];
        // srun's own options and the step text are those of the plain script.
        assert_eq!(got[..9], plain[..9], "{got:?}");
        let mut want = vec![
            "fleet-step".to_string(),
            check.name().to_string(),
            p.step_seconds(check).to_string(),
            p.binary.clone(),
        ];
        want.extend(p.arguments(check));
        assert_eq!(got[9..], want[..]);
    }
}

/// The plain task documents (wheel and kit), computed once.
fn baseline_task(kit: bool) -> &'static (String, Yaml) {
    static WHEEL_TASK: OnceLock<(String, Yaml)> = OnceLock::new();
    static KIT_TASK: OnceLock<(String, Yaml)> = OnceLock::new();
    let cell = if kit { &KIT_TASK } else { &WHEEL_TASK };
    cell.get_or_init(|| {
        let text = fleet::skypilot::task(&plan(Field::Model, MODEL), &task(Field::Model, "", kit))
            .unwrap();
        let doc = YamlLoader::load_from_str(&text).unwrap().remove(0);
        (text, doc)
    })
}

fn set(doc: &mut Yaml, path: &[&str], value: Yaml) {
    let Yaml::Hash(map) = doc else {
        panic!("not a mapping")
    };
    // In place: a YAML mapping's order is part of the document (insert would move the key).
    let slot = map.get_mut(&Yaml::String(path[0].to_string())).unwrap();
    if path.len() == 1 {
        *slot = value;
    } else {
        set(slot, &path[1..], value);
    }
}

fn check_skypilot(field: Field, value: &str) {
    let kit = field == Field::Kit;
    let p = plan(field, value);
    let t = task(field, value, kit);
    let text = match fleet::skypilot::task(&p, &t) {
        Ok(y) => {
            check_refusal(field, value, None);
            y
        }
        Err(e) => return check_refusal(field, value, Some(&e)),
    };
    let (base_text, base_doc) = baseline_task(kit);
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(docs.len(), 1, "{text}");
    let doc = docs.remove(0);

    // The document is the plain one with this value where the plain value is.
    let mut want = base_doc.clone();
    let s = |v: &str| Yaml::String(v.to_string());
    match field {
        Field::Name => set(&mut want, &["name"], s(value)),
        Field::Results => set(
            &mut want,
            &["file_mounts", "/iteragpu-fleet", "source"],
            s(value),
        ),
        Field::Kit => set(&mut want, &["file_mounts", "~/iteragpu-kit"], s(value)),
        Field::Wheel => {
            let wheel = format!("{value}.whl");
            let name = wheel.rsplit('/').next().unwrap();
            let Yaml::Hash(map) = &mut want else { panic!() };
            let mut mounts = yaml_rust2::yaml::Hash::new();
            mounts.insert(s(&format!("~/iteragpu-dist/{name}")), s(&wheel));
            let Yaml::Hash(old) = &map[&s("file_mounts")] else {
                panic!()
            };
            for (k, v) in old.iter().skip(1) {
                mounts.insert(k.clone(), v.clone());
            }
            *map.get_mut(&s("file_mounts")).unwrap() = Yaml::Hash(mounts);
            // The setup unpacks that file by its name, shell-quoted.
            let setup = doc["setup"].as_str().unwrap();
            let unpacked = format!(
                "python3 -m zipfile -e ~/iteragpu-dist/{} ~/iteragpu-wheel",
                quote::shell("test", name).unwrap()
            );
            assert!(setup.contains(&unpacked), "{setup}");
            set(&mut want, &["setup"], doc["setup"].clone());
        }
        Field::Package => set(&mut want, &["run"], doc["run"].clone()),
        _ => {}
    }
    assert_eq!(doc, want, "{text}");

    // Comments: the plain text with this value's YAML text, which reads back as the value.
    let y = |v: &str| quote::yaml("test", v).unwrap();
    let comments = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    let mut want_comments = comments(base_text);
    if matches!(field, Field::Package | Field::Model) {
        let plain = if field == Field::Package {
            PACKAGE
        } else {
            MODEL
        };
        want_comments[0] = want_comments[0].replace(&y(plain), &y(value));
        assert_eq!(yaml_scalar(&y(value)), value);
    }
    assert_eq!(comments(&text), want_comments);
    assert_eq!(text.lines().count(), base_text.lines().count());
    if field == Field::Model {
        assert_eq!(text, base_text.replacen(&y(MODEL), &y(value), 1));
    }

    // The run: bash reads it, and the checks get exactly their arguments.
    let run_text = doc["run"].as_str().unwrap();
    assert!(bash_syntax_ok(run_text), "{run_text}");
    assert!(bash_syntax_ok(doc["setup"].as_str().unwrap()));
    let run = run_task(run_text);
    assert_eq!(
        (run.stdout.as_str(), run.stderr.as_str()),
        ("", ""),
        "{run_text}"
    );
    assert_eq!(run.code, Some(0));
    assert_eq!(run.records.len(), p.checks.len());
    for (i, &check) in p.checks.iter().enumerate() {
        let mut want = vec![
            "timeout".to_string(),
            "--kill-after=10".to_string(),
            p.step_seconds(check).to_string(),
        ];
        let got = &run.records[i];
        if kit {
            assert!(
                got[3].ends_with("/iteragpu-kit/bin/x86_64-unknown-linux-gnu/iteragpu"),
                "{got:?}"
            );
            want.push(got[3].clone());
        } else {
            assert!(got[3].ends_with("/iteragpu-bin/iteragpu"), "{got:?}");
            want.push(got[3].clone());
        }
        want.extend(p.arguments(check));
        assert_eq!(got, &want);
    }
}

/// Strings that look like attacks: metacharacters of bash, sbatch and YAML, line breaks of
/// every kind, controls, and words sbatch treats specially, in any order.
fn hostile() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "'",
        "\"",
        "\\",
        "$(id)",
        "`id`",
        "${HOME}",
        "\n",
        "\r",
        "\r\n",
        "\t",
        "\0",
        "\u{1b}[2J",
        "\u{85}",
        "\u{2028}",
        "\u{2029}",
        "\u{202e}",
        "\u{7f}",
        "#",
        "#SBATCH --uid=0",
        "%j",
        "%",
        ": ",
        "- ",
        "{a: b}",
        "[x]",
        "&a",
        "*a",
        "!tag",
        "|",
        ">",
        "~",
        "/",
        "..",
        " ",
        "hetjob",
        "PackJob",
        "é",
        "日本",
        "---",
        "...",
        "?",
        ";",
        "&&",
        "a",
        "7",
        ":",
        "-",
        "\u{feff}",
        "\u{a0}",
    ]);
    prop::collection::vec(pieces, 0..8).prop_map(|v| v.concat())
}

fn any_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => hostile(),
        2 => "[ -~]{0,24}",
        2 => any::<String>(),
        1 => "[0-9:-]{1,10}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 192,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_slurm_value_is_refused_or_read_back_unchanged(
        field in prop::sample::select(SLURM_FIELDS.to_vec()),
        value in any_value(),
    ) {
        check_slurm(field, &value);
    }

    #[test]
    fn every_skypilot_value_is_refused_or_read_back_unchanged(
        field in prop::sample::select(SKYPILOT_FIELDS.to_vec()),
        value in any_value(),
    ) {
        check_skypilot(field, &value);
    }
}

#[test]
fn the_reproductions_of_issue_32_are_refused() {
    let payload = "NVIDIA B200\ntouch /tmp/pwned\nenvs: {LD_PRELOAD: /tmp/x.so}";
    let e = fleet::slurm::script(
        &plan(Field::Model, payload),
        &allocation(Field::Model, ""),
        DIR,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("the catalogue's model name `NVIDIA B200\\u{a}touch /tmp/pwned\\u{a}envs")
    );
    let e = fleet::skypilot::task(&plan(Field::Model, payload), &task(Field::Model, "", false))
        .unwrap_err();
    assert!(e.to_string().contains("holds a line break"));
    // The same checks, for values every field accepts.
    for field in SLURM_FIELDS {
        check_slurm(field, "x");
    }
    for field in SKYPILOT_FIELDS {
        check_skypilot(field, "x");
    }
    check_slurm(Field::Model, "it's \"$(id)\" `id` #x %j");
    check_skypilot(Field::Model, "it's \"$(id)\" `id` #x: {a: b}");
    check_skypilot(Field::Kit, "/a b/'c'/$(id)");
    check_slurm(Field::Dir, "/a/$(id)/`id`");
}
