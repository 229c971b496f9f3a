//! The README's examples are real: every ```console block of README.md, of every guide in
//! `docs/` (fit.md, measure.md, fleet.md, ledger.md, kit.md, and any other page with such a
//! block), and of the kit's own README run inside an extracted kit, is run against the built
//! binary and must print what the block shows. README.md stays the front door: under 400 lines,
//! with a table of contents, and every relative link of it and of the guides resolves.
//!
//! A block is a terminal session: `$ command` lines, each followed by what it prints (stdout and
//! stderr together, as a terminal shows them). A command may continue on the next line after a
//! trailing `\`, or carry a here-document (`<<'EOF'` ... `EOF`). A line `...` stands for any
//! number of lines. All the blocks of one document run in order in one `bash`, in a new folder
//! (README.md's and each guide's with a copy of the checkout's `data/`, as from a checkout's root), so files and
//! variables carry over from block to block as in a real session. A command
//! whose expected output has an `iteragpu: error:` line must fail; any other must succeed.
//!
//! Before comparing, both sides are normalised (see [`normalise`]): times, hashes, commit ids
//! and run ids, the CPU model, and, in the output of `measure`, `sweep` and `report`, every
//! measured figure (decimals; memory sizes are kept, they are exact) and column padding.
//!
//! When an example drifts because the output really changed, rewrite the blocks from this
//! machine's output and review the diff:
//!
//! ```text
//! ITERAGPU_BLESS_README=1 cargo test --release --locked --test cli readme
//! ```
//!
//! The kit's README is run inside a kit built with the portable binaries of
//! `scripts/release.sh` (`ITERAGPU_RELEASE_DIR=dist`, as `.ci/run` sets it); without them the
//! test says it skipped, except under CI, where it must run.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;

/// The marker printed after every command, with its exit status.
const MARK: &str = "@@iteragpu-readme-exit@@";
/// Environment variable that rewrites drifted examples instead of failing.
const BLESS: &str = "ITERAGPU_BLESS_README";
/// Environment variable naming the folder of `scripts/release.sh`'s binaries.
const RELEASE_DIR: &str = "ITERAGPU_RELEASE_DIR";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One `$ command` and what the README says it prints.
#[derive(Debug, Clone)]
struct Example {
    /// 1-based line of the `$` in the document.
    line: usize,
    command: String,
    /// 0-based range of the expected output's lines in the document.
    output: std::ops::Range<usize>,
    expected: Vec<String>,
}

/// The examples of every ```console block, in order.
fn examples(text: &str) -> Vec<Example> {
    let lines: Vec<&str> = text.lines().collect();
    let heredoc = Regex::new(r#"<<-?\s*['"]?([A-Za-z_]+)['"]?"#).unwrap();
    let mut out: Vec<Example> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```console" {
            i += 1;
            continue;
        }
        i += 1;
        let mut current: Option<Example> = None;
        while i < lines.len() && lines[i].trim() != "```" {
            let line = lines[i];
            if let Some(first) = line.strip_prefix("$ ") {
                if let Some(done) = current.take() {
                    out.push(done);
                }
                let start = i;
                let mut command = first.to_string();
                while command.ends_with('\\') && i + 1 < lines.len() {
                    i += 1;
                    command.push('\n');
                    command.push_str(lines[i]);
                }
                if let Some(word) = heredoc.captures(&command).map(|c| c[1].to_string()) {
                    while i + 1 < lines.len() {
                        i += 1;
                        command.push('\n');
                        command.push_str(lines[i]);
                        if lines[i].trim() == word {
                            break;
                        }
                    }
                }
                current = Some(Example {
                    line: start + 1,
                    command,
                    output: i + 1..i + 1,
                    expected: Vec::new(),
                });
            } else {
                let example = current.as_mut().unwrap_or_else(|| {
                    panic!("line {}: a console block must start with `$ `", i + 1)
                });
                example.expected.push(line.to_string());
                example.output.end = i + 1;
            }
            i += 1;
        }
        if let Some(done) = current.take() {
            out.push(done);
        }
        i += 1;
    }
    out
}

/// What a command printed and how it ended.
#[derive(Debug)]
struct Ran {
    output: Vec<String>,
    status: i32,
}

/// Runs the examples in order in one bash, in `dir`, with `path` as PATH and a new, empty
/// folder as HOME (what `scripts/install.sh` installs into ~/.local lands there).
fn run(examples: &[Example], dir: &Path, path: &str) -> Vec<Ran> {
    let mut script = String::from("exec 2>&1\n");
    for e in examples {
        script.push_str(&e.command);
        script.push_str(&format!("\nprintf '\\n{MARK} %d\\n' \"$?\"\n"));
    }
    // The script lives outside `dir`, which must hold only what the examples make; bash reads
    // it from a file so that no command can swallow the rest of it from stdin.
    let holder = tempfile::tempdir().unwrap();
    let file = holder.path().join("examples.sh");
    std::fs::write(&file, script).unwrap();
    let home = holder.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mut child = Process::new("bash")
        .arg("--noprofile")
        .arg("--norc")
        .arg(&file)
        .current_dir(dir)
        .env("PATH", path)
        .env("LC_ALL", "C.UTF-8")
        .env("TERM", "dumb")
        .env("HOME", &home)
        .env_remove("MANPATH")
        .env_remove("XDG_DATA_HOME")
        .env_remove("ITERAGPU")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("bash starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut s).ok();
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(600) {
            child.kill().ok();
            child.wait().ok();
            panic!("the examples did not finish within ten minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = reader.join().unwrap();
    let mut ran = Vec::new();
    let mut rest = text.as_str();
    for e in examples {
        let at = rest
            .find(&format!("\n{MARK} "))
            .unwrap_or_else(|| panic!("line {}: `{}` never finished", e.line, e.command));
        let output = &rest[..at];
        let after = &rest[at + 1 + MARK.len() + 1..];
        let end = after.find('\n').unwrap_or(after.len());
        let status = after[..end].trim().parse().unwrap();
        rest = after.get(end + 1..).unwrap_or("");
        let mut lines: Vec<String> = output.lines().map(|l| l.trim_end().to_string()).collect();
        while lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
        ran.push(Ran {
            output: lines,
            status,
        });
    }
    ran
}

/// Rules applied to both sides of a comparison, in order.
struct Normaliser {
    always: Vec<(Regex, &'static str)>,
    measured: Regex,
    kit: Regex,
    kit_sizes: Vec<(Regex, &'static str)>,
    decimal: Regex,
    html_bytes: Regex,
    spaces: Regex,
}

impl Normaliser {
    fn new() -> Normaliser {
        let r = |p: &str| Regex::new(p).unwrap();
        let mut always = vec![
            // UTC times.
            (r(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "[TIME]"),
            // The tool's commit, after its version or in JSON.
            (
                r(r"(iteragpu \d+\.\d+\.\d+) \([0-9a-f]{7,40}\)"),
                "$1 ([COMMIT])",
            ),
            (
                r(r#""commit": "[0-9a-f]{7,40}""#),
                r#""commit": "[COMMIT]""#,
            ),
            // A zip's size varies with the commit id compressed in its manifest.
            (r(r"\(\d+ bytes, SHA-256 "), "([N] bytes, SHA-256 "),
            // Run ids of the results grid.
            (r(r"\brun [0-9a-f]{12}\b"), "run [ID]"),
            // Hashes and their prefixes (any run of hex digits with a letter in it).
            (r(r"\b[0-9]*[a-f][0-9a-f]*\b"), "[HEX?]"),
            // The CPU's model name, where the CPU reference device names it.
            (r(r"(device cpu \().*?(\)\s+\|)"), "$1[CPU]$2"),
            // ... and the probe's device line (`cpu (AMD EPYC)  |  no datasheet row`).
            (r(r"^(cpu \().*?(\)\s+\|)"), "$1[CPU]$2"),
            (r(r"(device ).*?( \(cpu-reference)"), "$1[CPU]$2"),
            // The interpreter the torch engine ran, as Python names itself (an absolute path).
            (r(r"in \S*python\S* sees no GPU"), "in [PYTHON] sees no GPU"),
        ];
        // A kit built without the aarch64 binary (see [`release_binaries`]) has one member less.
        if skip_aarch64() || std::env::var_os(RELEASE_DIR).is_none() {
            always.push((r(r"\d+ members listed"), "[N] members listed"));
            always.push((r(r"\d+ sizes and \d+ SHA-256"), "[N] sizes and [N] SHA-256"));
        }
        Normaliser {
            always,
            measured: r(r"^(\S*/)?iteragpu (measure|sweep|report|probe)\b"),
            // `kit` ships this build's binary, whose size changes with every change of the code:
            // its size, the manifest's (which holds it) and the totals are left out.
            kit: r(r"^(\S*/)?iteragpu kit\b"),
            kit_sizes: vec![
                (
                    r(r"^\s*\d+(\s+(-|\[HEX\])\s+(bin/|MANIFEST\.json))"),
                    "[N]$1",
                ),
                (r(r"members, \d+ bytes"), "members, [N] bytes"),
            ],
            decimal: r(r"\d+\.\d+(e[-+]?\d+)?( (KiB|MiB|GiB|B\b))?"),
            html_bytes: r(r"\d+ bytes, self-contained"),
            spaces: r(r"\s+"),
        }
    }

    /// The comparable form of `lines` printed by `command`.
    fn normalise(&self, command: &str, lines: &[String]) -> Vec<String> {
        let measured = self.measured.is_match(command.trim());
        let kit = self.kit.is_match(command.trim());
        lines
            .iter()
            .map(|line| {
                let mut line = line.trim_end().to_string();
                for (re, with) in &self.always {
                    line = if *with == "[HEX?]" {
                        re.replace_all(&line, |c: &regex::Captures<'_>| {
                            let token = &c[0];
                            if token.len() >= 7 && token.len() <= 64 {
                                "[HEX]".to_string()
                            } else {
                                token.to_string()
                            }
                        })
                        .into_owned()
                    } else {
                        re.replace_all(&line, *with).into_owned()
                    };
                }
                if kit {
                    for (re, with) in &self.kit_sizes {
                        line = re.replace_all(&line, *with).into_owned();
                    }
                    line = line.trim_start().to_string();
                }
                if measured {
                    line = self
                        .decimal
                        .replace_all(&line, |c: &regex::Captures<'_>| {
                            if c.get(2).is_some() {
                                c[0].to_string()
                            } else {
                                "[N]".to_string()
                            }
                        })
                        .into_owned();
                    line = self
                        .html_bytes
                        .replace_all(&line, "[N] bytes, self-contained")
                        .into_owned();
                    line = self.spaces.replace_all(line.trim(), " ").into_owned();
                }
                line
            })
            .collect()
    }
}

/// Whether `actual` matches `expected`, where a `...` line in `expected` stands for any number
/// of lines.
fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(a, more)| a == first && matches(rest, more)),
    }
}

/// A line diff (longest common subsequence), `-` expected, `+` actual.
fn diff(expected: &[String], actual: &[String]) -> String {
    let (n, m) = (expected.len(), actual.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if expected[i] == actual[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < n || j < m {
        if i < n && j < m && expected[i] == actual[j] {
            out.push_str(&format!("   {}\n", expected[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push_str(&format!("  +{}\n", actual[j]));
            j += 1;
        } else {
            out.push_str(&format!("  -{}\n", expected[i]));
            i += 1;
        }
    }
    out
}

/// Whether a GPU is usable here: then the examples that show what happens without one cannot
/// be reproduced, and the commands that name `cuda:` are left out.
fn gpu_usable() -> bool {
    let out = Process::new(env!("CARGO_BIN_EXE_iteragpu"))
        .args(["environment", "--device", "cuda:0", "--json"])
        .output()
        .expect("iteragpu runs");
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .map(|v| v["usable"] == true)
        .unwrap_or(false)
}

/// Runs every console example of `document` in `dir`; an error holds a diff of each one that
/// drifted, each named `name:line` (under [`BLESS`] they are rewritten instead). `name` is how
/// the failures name the document (`README.md`, `docs/fit.md`).
fn check_document(document: &Path, name: &str, dir: &Path, path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(document).unwrap();
    let skip_gpu = gpu_usable();
    let all = examples(&text);
    assert!(!all.is_empty(), "{name} has no console example");
    // The torch engine's example needs the torch of `.cache/torch/venv` (which .ci/run installs):
    // without it, skipped with a line, except under CI.
    let torch = dir.join(TORCH_VENV).join("bin/python").is_file();
    if !torch && all.iter().any(|e| e.command.contains(TORCH_VENV)) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the torch engine's README example: .ci/run installs {TORCH_VENV}"
        );
    }
    let chosen: Vec<Example> = all
        .into_iter()
        .filter(|e| !(skip_gpu && e.command.contains("cuda:")))
        .filter(|e| {
            let runs = torch || !e.command.contains(TORCH_VENV);
            if !runs {
                eprintln!("{name}: `{}` skipped: no {TORCH_VENV} here", e.command);
            }
            runs
        })
        .collect();
    let ran = run(&chosen, dir, path);
    let norm = Normaliser::new();
    let mut failures = String::new();
    let mut blessed: Vec<(std::ops::Range<usize>, Vec<String>)> = Vec::new();
    for (e, r) in chosen.iter().zip(&ran) {
        let expected = norm.normalise(&e.command, &e.expected);
        let actual = norm.normalise(&e.command, &r.output);
        let wants_failure = e
            .expected
            .iter()
            .any(|l| l.starts_with("iteragpu: error:") || l.starts_with("{\"error\":"));
        let status_ok = (r.status != 0) == wants_failure;
        if matches(&expected, &actual) && status_ok {
            continue;
        }
        blessed.push((e.output.clone(), r.output.clone()));
        failures.push_str(&format!(
            "\n{name}:{}: `$ {}` (exit {}{}):\n{}",
            e.line,
            e.command,
            r.status,
            if status_ok {
                String::new()
            } else if wants_failure {
                ", but the example shows an error".to_string()
            } else {
                ", but the example shows success".to_string()
            },
            diff(&expected, &actual)
        ));
    }
    if failures.is_empty() {
        return Ok(());
    }
    if std::env::var_os(BLESS).is_some() {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for (range, output) in blessed.into_iter().rev() {
            lines.splice(range, output);
        }
        let mut new = lines.join("\n");
        new.push('\n');
        std::fs::write(document, new).unwrap();
        eprintln!("{name}: rewrote the drifted examples from this machine's output:{failures}");
        return Ok(());
    }
    Err(format!(
        "{name}: examples that print something else now (- the document, + this build; both \
         normalised):{failures}\nIf the new output is right: {BLESS}=1 cargo test --release \
         --locked --test cli readme, then review the diff of {name}."
    ))
}

fn path_with(dir: &Path) -> String {
    let mut parts = vec![dir.to_path_buf()];
    parts.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(parts)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Where the torch engine's examples find their torch, relative to the checkout (and to the
/// folder the examples run in, where it is linked when the checkout has one).
const TORCH_VENV: &str = ".cache/torch/venv";

/// A folder for one document's examples, as from a checkout's root: new, holding a copy of the
/// checkout's `data/` (the example model configurations) and, when the checkout has
/// `.cache/torch/venv`, a link to it; every file the examples write lands there.
fn checkout_like_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo().join("data"), &dir.path().join("data"));
    let venv = repo().join(TORCH_VENV);
    if venv.join("bin/python").is_file() {
        std::fs::create_dir_all(dir.path().join(".cache/torch")).unwrap();
        std::os::unix::fs::symlink(&venv, dir.path().join(TORCH_VENV)).unwrap();
    }
    dir
}

/// The folder of the binary under test, first on the examples' PATH.
fn built_path() -> String {
    path_with(Path::new(env!("CARGO_BIN_EXE_iteragpu")).parent().unwrap())
}

#[test]
fn readme_console_examples_print_what_they_show() {
    let dir = checkout_like_folder();
    if let Err(failures) = check_document(
        &repo().join("README.md"),
        "README.md",
        dir.path(),
        &built_path(),
    ) {
        panic!("{failures}");
    }
}

/// The guides README.md sends a reader to, one per area; each must hold examples.
const GUIDES: &[&str] = &["fit.md", "measure.md", "fleet.md", "ledger.md", "kit.md"];

/// Documents of `docs/` whose console examples another test runs, in a set-up of its own.
const RUN_ELSEWHERE: &[(&str, &str)] = &[(
    "quality-protocol.md",
    "ledger.rs, the_quality_protocol_example_runs_as_written (its protocol file comes from the page)",
)];

/// Every Markdown file of `docs/`, by name.
fn docs_markdown() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    names
}

/// Every ```console block of every guide in `docs/` runs as README.md's do, each guide in a
/// folder of its own (its blocks in order, as one session), and the failures of all of them are
/// reported together, each as `docs/<guide>:<line>`.
#[test]
fn guide_console_examples_print_what_they_show() {
    let names = docs_markdown();
    for guide in GUIDES {
        assert!(names.iter().any(|n| n == guide), "docs/{guide} is missing");
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for name in &names {
        let file = repo().join("docs").join(name);
        let text = std::fs::read_to_string(&file).unwrap();
        let count = examples(&text).len();
        if GUIDES.contains(&name.as_str()) {
            assert!(count > 0, "docs/{name} is a guide with no console example");
        }
        if count == 0 {
            continue;
        }
        if let Some((_, by)) = RUN_ELSEWHERE.iter().find(|(n, _)| n == name) {
            eprintln!("docs/{name}: its examples are run by {by}");
            continue;
        }
        let dir = checkout_like_folder();
        let shown = format!("docs/{name}");
        if let Err(f) = check_document(&file, &shown, dir.path(), &built_path()) {
            failures.push(f);
        }
        ran += 1;
    }
    assert!(ran >= GUIDES.len(), "only {ran} guides ran");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, each space a
/// `-`; a repeated anchor gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.push(unique);
    }
    seen
}

/// The links of `markdown` outside fenced blocks and code spans, with their 1-based lines.
fn links(markdown: &str) -> Vec<(usize, String)> {
    let link = Regex::new(r"\[[^\]]*\]\(([^)\s]+)\)").unwrap();
    let code = Regex::new(r"`[^`]*`").unwrap();
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let plain = code.replace_all(line, "");
        for c in link.captures_iter(&plain) {
            out.push((i + 1, c[1].to_string()));
        }
    }
    out
}

/// Why `target`, linked from `from`, does not resolve: a relative link must name a file of the
/// checkout, and an anchor a heading of its Markdown file.
fn unresolved(from: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://") || target.starts_with("https://") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let path = if file.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().unwrap().join(file)
    };
    if !path.exists() {
        return Some(format!("{} does not exist", path.display()));
    }
    match anchor {
        Some(a) if path.extension().is_some_and(|e| e == "md") => {
            let text = std::fs::read_to_string(&path).unwrap();
            (!anchors(&text).iter().any(|h| h == a))
                .then(|| format!("no heading of {} has the anchor #{a}", path.display()))
        }
        _ => None,
    }
}

/// README.md is the front door: under 400 lines, with a table of contents (a `## Contents`
/// list) that links every other `##` section, each link to a heading that exists.
#[test]
fn readme_is_short_with_a_table_of_contents() {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines < 400,
        "README.md has {lines} lines: the detail belongs in docs/"
    );
    let all: Vec<&str> = text.lines().collect();
    let at = all
        .iter()
        .position(|l| *l == "## Contents")
        .expect("README.md has a `## Contents` section");
    let entry = Regex::new(r"^\s*[-*] \[[^\]]+\]\(#([^)]+)\)").unwrap();
    let listed: Vec<String> = all[at + 1..]
        .iter()
        .take_while(|l| !l.starts_with("## "))
        .filter_map(|l| entry.captures(l).map(|c| c[1].to_string()))
        .collect();
    let headings = anchors(&text);
    for a in &listed {
        assert!(
            headings.contains(a),
            "the contents link #{a}, which no heading has"
        );
    }
    let sections: Vec<String> = all
        .iter()
        .filter(|l| l.starts_with("## ") && **l != "## Contents")
        .map(|l| anchors(l).remove(0))
        .collect();
    assert!(sections.len() >= 5, "{sections:?}");
    for s in &sections {
        assert!(
            listed.contains(s),
            "the contents do not list the section #{s}"
        );
    }
}

/// Every relative link of README.md and of the guides in docs/ names a file of the checkout,
/// and every anchor a heading of its page.
#[test]
fn every_relative_link_in_readme_and_guides_resolves() {
    let mut files = vec!["README.md".to_string()];
    files.extend(docs_markdown().iter().map(|n| format!("docs/{n}")));
    let mut bad = Vec::new();
    let mut checked = 0;
    for name in &files {
        let file = repo().join(name);
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, target) in links(&text) {
            checked += 1;
            if let Some(why) = unresolved(&file, &target) {
                bad.push(format!("{name}:{line}: ({target}) {why}"));
            }
        }
    }
    assert!(checked > 20, "only {checked} links found");
    assert!(
        bad.is_empty(),
        "links that do not resolve:\n{}",
        bad.join("\n")
    );
}

fn skip_aarch64() -> bool {
    std::env::var_os("ITERAGPU_RELEASE_SKIP_AARCH64").is_some_and(|v| v == "1")
}

/// The portable binaries of `scripts/release.sh` in `dir`, one per target.
/// `ITERAGPU_RELEASE_SKIP_AARCH64=1` is set by .ci/run only when rustup could not download the
/// aarch64 target on the CI machine (it says so loudly there); the kit then carries x86_64 only.
fn release_binaries(dir: &Path) -> Vec<PathBuf> {
    ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]
        .iter()
        .filter(|t| !(skip_aarch64() && t.starts_with("aarch64")))
        .map(|t| dir.join(t).join("iteragpu"))
        .collect()
}

/// The kit built with the release's binaries verifies, and its README's examples run inside the
/// extracted kit, in a folder that holds nothing else, with no `iteragpu` on the PATH but the
/// kit's own (installed by the kit's scripts/install.sh into the examples' new HOME). Without
/// the release (`ITERAGPU_RELEASE_DIR`), the kit carries this build, as `kit` does by itself;
/// under CI the release must be there.
#[test]
fn kit_readme_examples_run_inside_the_extracted_kit() {
    let release = std::env::var_os(RELEASE_DIR).map(PathBuf::from);
    if release.is_none() && std::env::var_os("CI").is_some() {
        panic!("CI is set but {RELEASE_DIR} is not: .ci/run builds the release first");
    }
    let work = tempfile::tempdir().unwrap();
    let zip = work.path().join("kit.zip");
    let mut kit = Process::new(env!("CARGO_BIN_EXE_iteragpu"));
    // In a new folder: no dist/ there, so without --binary the kit carries this build.
    kit.current_dir(work.path())
        .arg("kit")
        .arg("--output")
        .arg(&zip);
    if let Some(release) = release {
        let release = if release.is_absolute() {
            release
        } else {
            repo().join(release)
        };
        let binaries = release_binaries(&release);
        for b in &binaries {
            assert!(
                b.is_file(),
                "{} is missing: run scripts/release.sh",
                b.display()
            );
            kit.arg("--binary").arg(b);
        }
    } else {
        eprintln!(
            "kit_readme_examples_run_inside_the_extracted_kit: the kit carries this build; set \
             {RELEASE_DIR} to the output of scripts/release.sh for its portable binaries (CI does)"
        );
    }
    let made = kit.output().unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let land = work.path().join("landed");
    std::fs::create_dir(&land).unwrap();
    super::kit::extract(&zip, &land);
    let top = land.join(kit::ROOT);
    // Only the system's PATH: the kit's README must bring its own binary.
    let system = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|p| !p.join("iteragpu").exists())
        .collect::<Vec<_>>();
    let path = std::env::join_paths(system)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // The README is run from the kit's own copy, and compared with the repository's.
    let readme = top.join("README.md");
    assert_eq!(
        std::fs::read(&readme).unwrap(),
        std::fs::read(repo().join("README-kit.md")).unwrap()
    );
    let copy = work.path().join("README-kit.md");
    std::fs::copy(&readme, &copy).unwrap();
    if let Err(failures) = check_document(&copy, "README-kit.md", &top, &path) {
        panic!("{failures}");
    }
    if std::env::var_os(BLESS).is_some() {
        std::fs::copy(&copy, repo().join("README-kit.md")).unwrap();
    }
}

#[cfg(test)]
mod harness {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn blocks_commands_continuations_and_heredocs_are_parsed() {
        let text = "intro\n```console\n$ a --x\nout 1\nout 2\n$ b \\\n  --y\n$ cat > f <<'EOF'\nk = v\nEOF\ndone\n```\n```sh\n$ not run\n```\n";
        let ex = examples(text);
        assert_eq!(ex.len(), 3);
        assert_eq!((ex[0].line, ex[0].command.as_str()), (3, "a --x"));
        assert_eq!(ex[0].expected, strings(&["out 1", "out 2"]));
        assert_eq!(ex[0].output, 3..5);
        assert_eq!(ex[1].command, "b \\\n  --y");
        assert!(ex[1].expected.is_empty());
        assert_eq!(ex[1].output, 7..7);
        assert_eq!(ex[2].command, "cat > f <<'EOF'\nk = v\nEOF");
        assert_eq!(ex[2].expected, strings(&["done"]));
    }

    #[test]
    fn ellipsis_stands_for_any_lines() {
        let e = strings(&["a", "...", "z"]);
        assert!(matches(&e, &strings(&["a", "z"])));
        assert!(matches(&e, &strings(&["a", "b", "c", "z"])));
        assert!(!matches(&e, &strings(&["a", "b"])));
        assert!(!matches(&strings(&["a"]), &strings(&["a", "b"])));
    }

    #[test]
    fn normalising_keeps_exact_figures_and_drops_measured_ones() {
        let n = Normaliser::new();
        let price = n.normalise(
            "iteragpu price",
            &strings(&["total USD 3504.00 at 2026-11-29T20:28:30Z"]),
        );
        assert_eq!(price, strings(&["total USD 3504.00 at [TIME]"]));
        let hashes = n.normalise(
            "iteragpu kit",
            &strings(&[
                "  1082  25708ee374038741  LICENSE",
                "iteragpu 0.1.0 (887b704)",
                "recorded run 698464580012 in",
            ]),
        );
        assert_eq!(
            hashes,
            strings(&[
                "1082  [HEX]  LICENSE",
                "iteragpu 0.1.0 ([COMMIT])",
                "recorded run [ID] in"
            ])
        );
        // The kit's binary (and so the manifest and the totals) change size with the code.
        assert_eq!(
            n.normalise(
                "iteragpu kit --output k.zip",
                &strings(&[
                    "iteragpu-lab-v1/: 11 members, 13354921 bytes",
                    "  13285280  6a91d60cc8b8e3a7  bin/x86_64-unknown-linux-gnu/iteragpu",
                    "      2336  -                 MANIFEST.json  (its own size only)",
                    "       222  2631505e0974e510  data/resultats-bruts.csv",
                ])
            ),
            strings(&[
                "iteragpu-lab-v1/: 11 members, [N] bytes",
                "[N]  [HEX]  bin/x86_64-unknown-linux-gnu/iteragpu",
                "[N]  -                 MANIFEST.json  (its own size only)",
                "222  [HEX]  data/resultats-bruts.csv",
            ])
        );
        // A plain number is not a hash, even when long.
        assert_eq!(
            n.normalise("iteragpu estimate", &strings(&["14000000000"])),
            strings(&["14000000000"])
        );
        let measured = n.normalise(
            "iteragpu measure --device cpu",
            &strings(&[
                "device cpu (Intel(R) Xeon(R) Processor)  |  float32",
                "load   16.901  129.50 KiB   3.47e-7",
            ]),
        );
        assert_eq!(
            measured,
            strings(&["device cpu ([CPU]) | float32", "load [N] 129.50 KiB [N]"])
        );
    }

    #[test]
    fn anchors_and_links_follow_github() {
        let page = "# IteraGPU Lab\n## The whole lot: `environment --device all`\n```\n# not a heading\n```\n## One node of several: the package's share\n## Exit codes\n## Exit codes\n";
        assert_eq!(
            anchors(page),
            strings(&[
                "iteragpu-lab",
                "the-whole-lot-environment---device-all",
                "one-node-of-several-the-packages-share",
                "exit-codes",
                "exit-codes-1",
            ])
        );
        let text = "see [fit](docs/fit.md#fit) and `[not](a-link.md)`\n```\n[no](x.md)\n```\n![pic](docs/p.png)\n";
        assert_eq!(
            links(text),
            vec![
                (1, "docs/fit.md#fit".to_string()),
                (5, "docs/p.png".to_string())
            ]
        );
        let readme = repo().join("README.md");
        assert!(unresolved(&readme, "docs/no-such-guide.md").is_some());
        assert!(unresolved(&readme, "#no-such-heading").is_some());
        assert!(unresolved(&readme, "LICENSE").is_none());
        assert!(unresolved(&readme, "https://example.org/x").is_none());
    }

    #[test]
    fn a_diff_marks_what_changed() {
        let d = diff(&strings(&["a", "b", "c"]), &strings(&["a", "x", "c"]));
        assert_eq!(d, "   a\n  +x\n  -b\n   c\n");
    }
}
