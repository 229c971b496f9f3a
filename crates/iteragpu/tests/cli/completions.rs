//! `iteragpu completions SHELL`: scripts the shells accept, naming every command and option.

use std::process::Command as Process;

use assert_cmd::Command;
use predicates::prelude::*;

fn completions(shell: &str) -> String {
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["completions", shell])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn bash_completion_is_valid_bash_that_knows_every_command() {
    let script = completions("bash");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iteragpu.bash");
    std::fs::write(&file, &script).unwrap();
    let check = Process::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // Sourcing it registers the completion function.
    let loaded = Process::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p iteragpu", file.display()))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&loaded.stdout).contains("iteragpu"),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    for word in [
        "measure",
        "sweep",
        "verify",
        "completions",
        "--accepted-results",
        "--with-binary",
    ] {
        assert!(script.contains(word), "{word} missing");
    }
}

#[test]
fn zsh_and_fish_completions_name_the_tool_and_its_commands() {
    let zsh = completions("zsh");
    assert!(zsh.starts_with("#compdef iteragpu"));
    let fish = completions("fish");
    assert!(fish.contains("complete -c iteragpu"));
    for script in [zsh, fish] {
        for word in ["measure", "price", "report", "reserve-gib"] {
            assert!(script.contains(word), "{word} missing");
        }
    }
}

#[test]
fn an_unknown_shell_is_a_one_line_usage_error() {
    Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["completions", "tcsh"])
        .assert()
        .code(2)
        .stdout("")
        .stderr(predicate::str::starts_with(
            "iteragpu: error: invalid value 'tcsh'",
        ))
        .stderr(predicate::str::contains("bash"))
        .stderr(predicate::function(|s: &str| s.lines().count() == 1));
}

/// Whether `program` runs here; under CI (where .ci/run installs it) its absence fails the test.
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
        eprintln!("SKIPPED {test}: no `{program}` on the PATH (apt-get install {program})");
    }
    found
}

/// Types `line` and then `tabs` presses of TAB in `shell` (started by `start`, with the generated
/// completion loaded by `load`) inside a private tmux server, and returns the pane once it shows
/// every word of `want` (or after 20 s, whatever it shows then).
fn complete_in_tmux(shell: &str, load: &str, line: &str, tabs: usize, want: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join(if shell == "zsh" {
        "_iteragpu"
    } else {
        "iteragpu.bash"
    });
    std::fs::write(&script, completions(shell)).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        bin.parent().unwrap().display()
    );
    let socket = dir.path().join("tmux.sock");
    let tmux = |args: &[&str]| {
        Process::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap()
    };
    let start = match shell {
        "zsh" => "zsh -f",
        _ => "bash --norc --noprofile",
    };
    let started = tmux(&[
        "new-session",
        "-d",
        "-x",
        "200",
        "-y",
        "50",
        &format!(
            "env -i PATH={path} HOME={} TERM=xterm {start}",
            dir.path().display()
        ),
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let load = load.replace("SCRIPT", &script.display().to_string());
    tmux(&["send-keys", "-t", "0", &load, "Enter"]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    tmux(&["send-keys", "-t", "0", "-l", line]);
    let mut pane = String::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    for _ in 0..tabs {
        std::thread::sleep(std::time::Duration::from_millis(300));
        tmux(&["send-keys", "-t", "0", "Tab"]);
    }
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        pane =
            String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "0"]).stdout).into_owned();
        let offered = pane.split(line.trim_end()).nth(1).unwrap_or("");
        if want
            .iter()
            .all(|w| offered.split_whitespace().any(|x| x == *w))
        {
            break;
        }
    }
    tmux(&["kill-server"]);
    pane
}

/// The catalogue's GPU ids, as `price --list --json` gives them.
fn catalogue_ids() -> Vec<String> {
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(["price", "--list", "--json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    let mut ids: Vec<String> = Vec::new();
    for id in regex::Regex::new(r#""gpu":\s*"([^"]+)""#)
        .unwrap()
        .captures_iter(&text)
        .map(|c| c[1].to_string())
    {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    assert!(ids.len() >= 10, "{text}");
    ids
}

/// Issue 26, item 3: `iteragpu price --gpu <TAB><TAB>` in bash lists the catalogue's GPU ids.
#[test]
fn bash_completes_the_catalogues_gpu_ids_under_tmux() {
    if !have("tmux", "bash_completes_the_catalogues_gpu_ids_under_tmux") {
        return;
    }
    let ids = catalogue_ids();
    let want: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pane = complete_in_tmux("bash", "source SCRIPT", "iteragpu price --gpu ", 2, &want);
    let offered = offered_after(&pane, "iteragpu price --gpu", &ids);
    for id in &ids {
        assert!(
            offered.split_whitespace().any(|w| w == id),
            "{id} not offered:\n{pane}"
        );
    }
    // A value that is not a GPU id is not offered (it lists ids, not file names).
    assert!(!offered.contains("iteragpu.bash"), "{pane}");
}

/// Issue 26, item 3: the same in zsh, through compinit.
#[test]
fn zsh_completes_the_catalogues_gpu_ids_under_tmux() {
    if !have("tmux", "zsh_completes_the_catalogues_gpu_ids_under_tmux")
        || !have("zsh", "zsh_completes_the_catalogues_gpu_ids_under_tmux")
    {
        return;
    }
    let ids = catalogue_ids();
    let want: Vec<&str> = ids.iter().map(String::as_str).collect();
    let pane = complete_in_tmux(
        "zsh",
        "autoload -Uz compinit && compinit -u -D && source SCRIPT",
        "iteragpu price --gpu ",
        1,
        &want,
    );
    let offered = offered_after(&pane, "iteragpu price --gpu", &ids);
    for id in &ids {
        assert!(
            offered.split_whitespace().any(|w| w == id),
            "{id} not offered:\n{pane}"
        );
    }
}

/// The values with a fixed list are in the scripts: durations, devices, data types, packages,
/// and the commands `iteragpu man` takes.
#[test]
fn the_scripts_hold_the_option_values() {
    let bash = completions("bash");
    for values in [
        "\"3 7 30\"",
        "\"all cpu cuda:0 cuda:1",
        "\"cpu cuda:0 cuda:1",
        "\"float32 float16 bfloat16\"",
        "b200:7:1",
    ] {
        assert!(bash.contains(values), "{values} missing");
    }
    let zsh = completions("zsh");
    assert!(zsh.contains("b200\\:7\\:1"));
    assert!(zsh.contains("(all cpu cuda\\:0"));
    assert!(zsh.contains(":(environment estimate price fit"));
}

/// Runs `command` (a shell line) in bash on a tmux terminal of its own, with `TERM=term`, in
/// `dir`, and returns the pane once it shows `until` (or after 60 s). `None` where tmux is not
/// installed (and not under CI). The progress tests use it: their stderr must be a terminal.
pub(crate) fn run_on_a_terminal(
    dir: &std::path::Path,
    term: &str,
    command: &str,
    until: &str,
) -> Option<String> {
    if !have("tmux", "a test on a terminal") {
        return None;
    }
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    let path = format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        bin.parent().unwrap().display()
    );
    let holder = tempfile::tempdir().unwrap();
    let socket = holder.path().join("tmux.sock");
    let script = holder.path().join("run.sh");
    std::fs::write(
        &script,
        format!(
            "cd '{}' && {command}; echo \"DONE $?\"; sleep 600\n",
            dir.display()
        ),
    )
    .unwrap();
    let tmux = |args: &[&str]| {
        Process::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap()
    };
    let started = tmux(&[
        "new-session",
        "-d",
        "-x",
        "220",
        "-y",
        "60",
        &format!(
            "env -i PATH={path} HOME={} TERM={term} bash --norc --noprofile {}",
            holder.path().display(),
            script.display()
        ),
    ]);
    assert!(started.status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut pane = String::new();
    while std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(250));
        pane = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", "0", "-S", "-"]).stdout)
            .into_owned();
        if pane.contains(until) {
            break;
        }
    }
    tmux(&["kill-server"]);
    Some(pane)
}

/// What the shell listed after the command line: of the texts that follow each echo of
/// `command` (keys typed before the shell was ready echo once more, and bash redraws the line
/// below its list), the one that holds the most of `ids`.
fn offered_after<'a>(pane: &'a str, command: &str, ids: &[String]) -> &'a str {
    pane.split(command)
        .skip(1)
        .max_by_key(|seg| {
            ids.iter()
                .filter(|id| seg.split_whitespace().any(|w| w == id.as_str()))
                .count()
        })
        .unwrap_or("")
}
