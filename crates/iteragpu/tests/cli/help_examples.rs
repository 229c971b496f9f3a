//! Issue 36: every example of every `--help` runs as written.
//!
//! The `Examples:` block of each command's help (found by running `iteragpu --help` and, for
//! every command that has commands of its own, `iteragpu COMMAND --help`) is read as `--help`
//! prints it: one command per line, or a line that ends in `\` and goes on, indented, on the
//! next. A line that is neither (a long line wrapped by the help's layout) fails the test: it
//! would break when copied. Every example must be in [`EXAMPLES`] and every entry there must be
//! an example, so none is skipped without a word. They run in one `bash`, in the order of
//! [`EXAMPLES`], in a folder prepared as a renter's (a copy of `data/`, a model folder, a tariff
//! copy, CPU measurements, a probe and a sweep; see [`prepare`]), with `iteragpu` first on the
//! `PATH` and no NVIDIA library (stubs::StubDir, empty), each with the exit code its entry gives.
//!
//! What a test machine cannot have (a GPU, a Slurm cluster, a shared filesystem, the portable
//! binaries of scripts/release.sh) is named in the entry's `why`, with the code the example
//! gives here; where it can only run in part, `as_run` says what runs instead.

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use assert_cmd::Command;

use crate::stubs::{StubDir, system_has_driver};

/// What an example needs beyond this checkout.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Nothing,
    /// An NVIDIA GPU and its driver.
    Gpu,
    /// A `python3` on the PATH with PyTorch.
    Torch,
}

/// One `--help` example and what running it must give.
struct Example {
    /// The example as `--help` shows it, continuation lines joined with one space.
    example: &'static str,
    /// Exit code required here (no GPU, no cluster).
    exit: i32,
    /// Why it is not 0, or why `as_run` differs; empty when it runs as written and exits 0.
    why: &'static str,
    /// The command run instead of the example, when it can only run in part (None: as written).
    as_run: Option<&'static str>,
    /// A shell line run before it (cleaning what an earlier example wrote), or "".
    before: &'static str,
    /// What it needs that a test machine may lack; where this one has it, it must exit 0.
    needs: Need,
}

const fn ok(example: &'static str) -> Example {
    Example {
        example,
        exit: 0,
        why: "",
        as_run: None,
        before: "",
        needs: Need::Nothing,
    }
}

/// `exit` is 2 here: a GPU that is not there is refused input, and nothing is written.
const fn no_gpu(example: &'static str, exit: i32) -> Example {
    Example {
        example,
        exit,
        why: "needs an NVIDIA GPU: without one it stops at the device check",
        as_run: None,
        before: "",
        needs: Need::Gpu,
    }
}

const NO_RELEASE: &str = "needs the portable binaries of scripts/release.sh in dist/ (zig and \
                          two cross toolchains); here dist/ holds this machine's build, which needs \
                          a newer glibc than 2.28 and is refused";

const NO_CLUSTER: &str = "needs a Slurm cluster and a filesystem every node sees: it runs without \
                          --submit, into a folder here instead of /shared";

/// Every example of every `--help`, in the order they run.
const EXAMPLES: &[Example] = &[
    // environment
    ok("iteragpu environment"),
    ok("iteragpu environment --device all"),
    ok("iteragpu environment --device cuda:0,1 --json"),
    ok("iteragpu environment --package b200:7:1"),
    ok("iteragpu environment --package b200:7:4 --node n1 # one node of four"),
    Example {
        example: "iteragpu environment --engine torch --package mi300x:7:1 # an AMD lot, through PyTorch",
        exit: 2,
        why: "needs a python3 with PyTorch on the PATH (the tests' machine has none): refused \
              without one",
        as_run: None,
        before: "",
        needs: Need::Torch,
    },
    // estimate
    ok("iteragpu estimate --parameters 7000000000 --bits 16 --reserve-gib 4"),
    ok("iteragpu estimate --parameters 70B --bits 4"),
    ok("iteragpu estimate --parameters 1.5T --bits 8 --json"),
    ok("iteragpu estimate --model data/models/llama-3.1-8b --context 8192 --batch 4"),
    ok("iteragpu estimate --model path/to/model-folder # reads safetensors headers only"),
    ok("iteragpu estimate --model data/models/qwen2.5-7b --bits 4 --group-size 128"),
    ok("iteragpu estimate --model data/models/gpt-oss-20b # its MXFP4 layout, from config.json"),
    ok("iteragpu estimate --model data/models/deepseek-v3 --context 32768 # latent KV cache"),
    ok("iteragpu estimate --model data/models/llama-3.2-3b --training adam"),
    // price
    ok("iteragpu price --gpu b200 --days 7 --lots 2"),
    ok("iteragpu price --gpu h100-sxm --days 30 --lots 1 --accepted-results 1200"),
    ok("iteragpu price --list"),
    ok("iteragpu price --gpu l40s --days 3 --lots 4 --catalogue my-tariffs.csv --json"),
    // fit
    ok("iteragpu fit --model data/models/llama-3.1-8b --context 8192"),
    ok(
        "iteragpu fit --model data/models/llama-3.1-8b --context 16384 --gpu-memory-utilization 0.95 --max-num-seqs 256",
    ),
    ok(
        "iteragpu fit --model data/models/qwen3-8b --context 32768 --serve sglang --kv-cache-dtype fp8",
    ),
    ok("iteragpu fit --model data/models/llama-3.1-8b --context 8192 --serve none --reserve-gib 2"),
    ok("iteragpu fit --model data/models/mixtral-8x7b-v0.1 --context 32768 --batch 8 --days 7"),
    ok("iteragpu fit --model data/models/llama-3.1-8b --context 8192 --fits-only --limit 5"),
    ok("iteragpu fit --model data/models/llama-3.1-8b --gpu h100-sxm,l40s --sort price-per-mtok"),
    Example {
        example: "iteragpu fit --model data/models/llama-3.1-8b --context 8192 --probe probe.json",
        exit: 2,
        why: "needs a probe of a GPU (iteragpu probe --device cuda:0): here probe.json is the CPU's, \
              which is refused",
        as_run: None,
        before: "",
        needs: Need::Gpu,
    },
    ok("iteragpu fit --parameters 70B --bits 16 --max-gpus 8 --json"),
    ok(
        "iteragpu fit --model path/to/model-folder --bits 4 --group-size 128 --serve none --reserve-gib 4",
    ),
    // measure
    no_gpu(
        "iteragpu measure --device cuda:0 --batch 1 --context 16 --width 64 --dtype float32 --warmup 1 --repeats 2 --output small-run.json",
        2,
    ),
    no_gpu(
        "iteragpu measure --device cuda:0 --batch 2 --context 128 --width 1024 --dtype bfloat16 --warmup 3 --repeats 5 --output run.json",
        2,
    ),
    ok(
        "iteragpu measure --device cpu --batch 1 --context 16 --width 64 --output cpu-reference.json",
    ),
    ok(
        "iteragpu measure --device cpu --batch 2 --context 128 --width 1024 --threads 2 --max-memory 2GiB --output cpu-2-threads.json",
    ),
    ok(
        "iteragpu measure --plan --device cuda --compute-capability 9.0 --batch 8 --context 4096 --width 8192 --dtype bfloat16",
    ),
    // kit, verify
    ok("iteragpu kit --output iteragpu-lab-v1.zip"),
    Example {
        example: "iteragpu kit --output iteragpu-lab-v1.zip --release-dir dist",
        exit: 2,
        why: NO_RELEASE,
        as_run: None,
        before: "rm iteragpu-lab-v1.zip iteragpu-lab-v1.tar.gz; \
                 mkdir dist/x86_64-unknown-linux-gnu; \
                 cp \"$(command -v iteragpu)\" dist/x86_64-unknown-linux-gnu/",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu kit --output iteragpu-lab-v1.zip --binary dist/x86_64-unknown-linux-gnu/iteragpu --binary dist/aarch64-unknown-linux-gnu/iteragpu",
        exit: 2,
        why: "needs both portable binaries of scripts/release.sh; dist/ here holds no aarch64 one",
        as_run: None,
        before: "",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu verify iteragpu-lab-v1.zip",
        exit: 0,
        why: "",
        as_run: None,
        before: "rm -r dist/x86_64-unknown-linux-gnu; \
                 iteragpu kit --output iteragpu-lab-v1.zip >/dev/null 2>&1",
        needs: Need::Nothing,
    },
    ok("iteragpu verify iteragpu-lab-v1.tar.gz"),
    Example {
        example: "iteragpu verify ./iteragpu-lab-v1/",
        exit: 0,
        why: "",
        as_run: None,
        before: "tar -xzf iteragpu-lab-v1.tar.gz",
        needs: Need::Nothing,
    },
    ok("iteragpu verify iteragpu-lab-v1.zip --json"),
    // protocol ($EDITOR fills every field in, as a renter would)
    ok("iteragpu protocol init protocol.txt"),
    ok("$EDITOR protocol.txt"),
    ok("iteragpu protocol lock protocol.txt"),
    // record, cost
    Example {
        example: "iteragpu record --results data/resultats-bruts.csv --protocol protocol.txt --measurement m.json --rental h200-sept-a --package h200:7:1 --submitted 500 --accepted 473",
        exit: 2,
        why: "needs a measurement made on an H200: here m.json is a CPU run, which is refused",
        as_run: None,
        before: "",
        needs: Need::Gpu,
    },
    Example {
        example: "iteragpu record --results data/resultats-bruts.csv --protocol protocol.txt --measurement m2.json --rental h200-sept-a --package h200:7:1 --submitted 500 --accepted 468 --notes \"rerun, same corpus\"",
        exit: 2,
        why: "needs a measurement made on an H200: here m2.json is a CPU run, which is refused",
        as_run: None,
        before: "",
        needs: Need::Gpu,
    },
    ok(
        "iteragpu record --results rehearsal.csv --protocol protocol.txt --measurement cpu.json --rental rehearsal --package h200:7:1 --submitted 10 --accepted 10 --allow-device-mismatch",
    ),
    ok("iteragpu cost --results data/resultats-bruts.csv"),
    ok("iteragpu cost --results data/resultats-bruts.csv --catalogue my-tariffs.csv --json"),
    // sweep
    no_gpu(
        "iteragpu sweep --device cuda:0 --batch 2 --context 128 --width 64..8192:x2 --dtype bfloat16 --warmup 1 --repeats 3 --output-dir runs/width",
        2,
    ),
    ok("iteragpu sweep --device cpu --batch 1,2,4,8 --width 256 --output-dir runs/batch"),
    no_gpu(
        "iteragpu sweep --device cuda:0 --context 128..2048:+128 --max-memory 6GiB --output-dir runs/ctx",
        2,
    ),
    // fleet
    Example {
        example: "iteragpu fleet slurm --package b200:7:4 --nodes 4 --output /shared/fleet",
        exit: 0,
        why: NO_CLUSTER,
        as_run: Some("iteragpu fleet slurm --package b200:7:4 --nodes 4 --output shared/fleet"),
        before: "mkdir -p shared",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu fleet slurm --package b200:7:4 --nodes 2 --partition gpu --submit --output /shared/fleet",
        exit: 0,
        why: NO_CLUSTER,
        as_run: Some(
            "iteragpu fleet slurm --package b200:7:4 --nodes 2 --partition gpu --output shared/fleet-2",
        ),
        before: "",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu fleet slurm --package b200:7:4 --nodes 4 --device cpu --submit --output /shared/try",
        exit: 0,
        why: NO_CLUSTER,
        as_run: Some(
            "iteragpu fleet slurm --package b200:7:4 --nodes 4 --device cpu --output shared/try",
        ),
        before: "",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu fleet slurm --package b200:7:4 --nodes 4 --checks environment,collective --output /shared/net",
        exit: 0,
        why: NO_CLUSTER,
        as_run: Some(
            "iteragpu fleet slurm --package b200:7:4 --nodes 4 --checks environment,collective --output shared/net",
        ),
        before: "",
        needs: Need::Nothing,
    },
    ok(
        "iteragpu fleet skypilot --package b200:7:4 --nodes 4 --wheel dist/iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl --output fleet.yaml",
    ),
    Example {
        example: "iteragpu fleet skypilot --package b200:7:4 --nodes 2 --kit kit/ --results s3://my-bucket/fleet --output fleet.yaml",
        exit: 0,
        why: "",
        as_run: None,
        before: "rm fleet.yaml fleet.plan.json",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu fleet check /shared/fleet",
        exit: 1,
        why: "needs the nodes' results of a Slurm run: the plan alone (written above, in a folder \
              here instead of /shared) fails with every node missing",
        as_run: Some("iteragpu fleet check shared/fleet"),
        before: "",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu fleet check /shared/fleet --package b200:7:4 --nodes 4 --json",
        exit: 1,
        why: "needs the nodes' results of a Slurm run: the plan alone (written above, in a folder \
              here instead of /shared) fails with every node missing",
        as_run: Some("iteragpu fleet check shared/fleet --package b200:7:4 --nodes 4 --json"),
        before: "",
        needs: Need::Nothing,
    },
    Example {
        example: "iteragpu fleet check /shared/net --expect-busbw 45",
        exit: 1,
        why: "needs the nodes' results of a Slurm run: the plan alone (written above, in a folder \
              here instead of /shared) fails with every node missing",
        as_run: Some("iteragpu fleet check shared/net --expect-busbw 45"),
        before: "",
        needs: Need::Nothing,
    },
    // collective
    Example {
        example: "iteragpu collective --output collective-%t.json # one rank per GPU, under srun or torchrun",
        exit: 2,
        why: "needs a rendezvous (srun, torchrun or SkyPilot set it) and a python3 with PyTorch on \
              the PATH: run here as the one rank of a gloo world, refused where no python3 has \
              PyTorch",
        as_run: Some(
            "RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 iteragpu collective \
             --backend gloo --max-bytes 64KiB --output collective-%t.json",
        ),
        before: "",
        needs: Need::Torch,
    },
    Example {
        example: "iteragpu collective --backend gloo --max-bytes 16MiB # CPUs: a quick test of the program",
        exit: 2,
        why: "needs a rendezvous (srun, torchrun or SkyPilot set it) and a python3 with PyTorch on \
              the PATH: run here as the one rank of a gloo world, refused where no python3 has \
              PyTorch",
        as_run: Some(
            "RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29518 iteragpu collective \
             --backend gloo --max-bytes 64KiB",
        ),
        before: "",
        needs: Need::Torch,
    },
    // report
    ok("iteragpu report runs/batch --output report.html"),
    ok("iteragpu report h100/run.json a100/run.json sweeps/width --output compare.html"),
    Example {
        example: "iteragpu report run.json probe.json --output with-probe.html",
        exit: 0,
        why: "",
        as_run: None,
        // run.json is the GPU measurement above, which needs a GPU: a CPU run stands in.
        before: "[ -e run.json ] || cp cpu.json run.json",
        needs: Need::Nothing,
    },
    ok(
        "iteragpu price --gpu h100-sxm --days 7 --lots 1 --accepted-results 500 --json > price.json",
    ),
    ok("iteragpu report sweeps/width price.json --output with-cost.html"),
    // probe
    Example {
        example: "iteragpu probe --device all --output probe.json",
        exit: 2,
        why: "needs an NVIDIA GPU: without one it stops at the device check",
        as_run: None,
        before: "rm probe.json",
        needs: Need::Gpu,
    },
    no_gpu(
        "iteragpu probe --device all --package b200:7:1 --seconds 30 --output lot.json",
        2,
    ),
    no_gpu(
        "iteragpu probe --device cuda:0,1 --concurrent --output pair.json",
        2,
    ),
    ok("iteragpu probe --device cpu --seconds 2 --output host.json"),
    // completions, man
    ok("iteragpu completions bash > ~/.local/share/bash-completion/completions/iteragpu"),
    ok("iteragpu completions zsh > ~/.zfunc/_iteragpu # with fpath+=~/.zfunc before compinit"),
    ok("iteragpu completions fish > ~/.config/fish/completions/iteragpu.fish"),
    ok("iteragpu man | man -l -"),
    ok("iteragpu man measure | man -l -"),
    ok("iteragpu man --output-dir ~/.local/share/man/man1 && man iteragpu-measure"),
];

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("iteragpu")
}

fn help(args: &[&str]) -> String {
    let out = Command::cargo_bin("iteragpu")
        .unwrap()
        .args(args)
        .arg("--help")
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    assert!(out.status.success(), "iteragpu {args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The commands listed under `Commands:` (without `help`).
fn commands(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line == "Commands:" {
            inside = true;
        } else if inside && line.is_empty() {
            break;
        } else if inside && line.starts_with("  ") && !line.starts_with("   ") {
            let name = line.split_whitespace().next().unwrap();
            if name != "help" {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// The examples of one help text, continuations joined; a stray line is an error.
fn examples(help: &str) -> Result<Vec<String>, String> {
    let mut found: Vec<String> = Vec::new();
    let mut inside = false;
    let mut continuing = false;
    for line in help.lines() {
        if line == "Examples:" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.trim().is_empty() {
            break;
        }
        let text = line.trim();
        if continuing {
            found.last_mut().unwrap().push(' ');
        } else if text.starts_with("iteragpu ") || text.starts_with("$EDITOR ") {
            found.push(String::new());
        } else {
            return Err(format!(
                "a line that is neither a command nor a continuation: {line:?}"
            ));
        }
        let (body, goes_on) = match text.strip_suffix('\\') {
            Some(head) => (head.trim_end(), true),
            None => (text, false),
        };
        found.last_mut().unwrap().push_str(body);
        continuing = goes_on;
    }
    if continuing {
        return Err("the last example ends with `\\`".to_string());
    }
    // Runs of spaces (before a `# comment`, after a joined `\`) are one space.
    Ok(found
        .into_iter()
        .map(|e| e.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect())
}

/// Every example of every command's help, with the command it is under.
fn collect() -> (Vec<(String, String)>, Vec<String>) {
    let mut all = Vec::new();
    let mut problems = Vec::new();
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = queue.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        match examples(&text) {
            Ok(found) => all.extend(found.into_iter().map(|e| (path.join(" "), e))),
            Err(e) => problems.push(format!("iteragpu {} --help: {e}", path.join(" "))),
        }
        for name in commands(&text) {
            let mut sub = path.clone();
            sub.push(name);
            queue.push(sub);
        }
    }
    (all, problems)
}

/// The renter's folder: data/, a model folder, a tariff copy, CPU documents standing in for
/// GPU ones (h100/run.json, a100/run.json, run.json, m.json, m2.json), a CPU probe, a CPU sweep
/// (sweeps/width), a wheel-shaped zip and an unpacked kit for the SkyPilot examples, the
/// folders the completions go to, and an $EDITOR that fills the protocol in.
fn prepare(dir: &Path, home: &Path, fixtures: &Path) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let copy = |from: &Path, to: &Path| {
        let ok = Process::new("cp")
            .arg("-r")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(ok.success());
    };
    copy(&repo.join("data"), &dir.join("data"));
    std::fs::create_dir_all(dir.join("path/to")).unwrap();
    copy(
        &repo.join("data/models/llama-3.1-8b"),
        &dir.join("path/to/model-folder"),
    );
    copy(
        &repo.join("data/tarifs-forfaits.csv"),
        &dir.join("my-tariffs.csv"),
    );
    let run = |args: &[&str]| {
        Command::cargo_bin("iteragpu")
            .unwrap()
            .current_dir(dir)
            .env("LD_LIBRARY_PATH", fixtures)
            .args(args)
            .assert()
            .success();
    };
    run(&[
        "measure",
        "--device",
        "cpu",
        "--batch",
        "1",
        "--context",
        "16",
        "--width",
        "64",
        "--output",
        "cpu.json",
    ]);
    for name in ["m.json", "m2.json", "h100/run.json", "a100/run.json"] {
        let to = dir.join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(dir.join("cpu.json"), to).unwrap();
    }
    run(&[
        "probe",
        "--device",
        "cpu",
        "--seconds",
        "1",
        "--output",
        "probe.json",
    ]);
    run(&[
        "sweep",
        "--device",
        "cpu",
        "--batch",
        "1",
        "--context",
        "16",
        "--width",
        "64,128",
        "--output-dir",
        "sweeps/width",
    ]);
    std::fs::create_dir_all(dir.join("dist")).unwrap();
    crate::fleet_skypilot::wheel(
        &dir.join("dist/iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl"),
        Some(&bin()),
    );
    run(&["kit", "--output", fixtures.join("k.zip").to_str().unwrap()]);
    let ok = Process::new("tar")
        .arg("-xzf")
        .arg(fixtures.join("k.tar.gz"))
        .arg("-C")
        .arg(fixtures)
        .status()
        .unwrap();
    assert!(ok.success());
    std::fs::rename(fixtures.join("iteragpu-lab-v1"), dir.join("kit")).unwrap();
    for folder in [
        ".local/share/bash-completion/completions",
        ".zfunc",
        ".config/fish/completions",
        ".local/bin",
    ] {
        std::fs::create_dir_all(home.join(folder)).unwrap();
    }
    // The protocol a renter fills in, as $EDITOR leaves it.
    let template = fixtures.join("template.txt");
    run(&["protocol", "init", template.to_str().unwrap()]);
    let mut text = std::fs::read_to_string(&template).unwrap();
    for (key, value) in crate::ledger::FILLED {
        text = text.replace(&format!("\n{key} =\n"), &format!("\n{key} = {value}\n"));
    }
    std::fs::write(fixtures.join("filled.txt"), text).unwrap();
    let editor = fixtures.join("editor");
    std::fs::write(
        &editor,
        format!(
            "#!/bin/sh\ncp '{}' \"$1\"\n",
            fixtures.join("filled.txt").display()
        ),
    )
    .unwrap();
    let ok = Process::new("chmod")
        .arg("755")
        .arg(&editor)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn every_help_example_runs_as_written() {
    let (collected, mut problems) = collect();
    for (command, example) in &collected {
        if !EXAMPLES.iter().any(|e| e.example == example) {
            problems.push(format!(
                "iteragpu {command} --help: not in EXAMPLES: {example}"
            ));
        }
    }
    for e in EXAMPLES {
        if !collected.iter().any(|(_, c)| c == e.example) {
            problems.push(format!("in EXAMPLES but in no --help: {}", e.example));
        }
        if (e.exit != 0 || e.as_run.is_some()) && e.why.is_empty() {
            problems.push(format!("no reason given for {}", e.example));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    let libs = StubDir::new();
    let fixtures = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    prepare(dir.path(), &home, fixtures.path());
    let gpu = system_has_driver();
    let torch = Process::new("python3")
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    let path = format!(
        "{}:{}:{}",
        bin().parent().unwrap().display(),
        home.join(".local/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    for e in EXAMPLES {
        let command = e.as_run.unwrap_or(e.example);
        let script = format!("set -e\n{}\n{command}\n", e.before);
        let out = Process::new("timeout")
            .args(["300", "bash", "-c", &script])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("HOME", &home)
            .env("EDITOR", fixtures.path().join("editor"))
            .env("LD_LIBRARY_PATH", libs.path())
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("VIRTUAL_ENV")
            .env_remove("ITERAGPU_RELEASE_DIR")
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        let has = match e.needs {
            Need::Nothing => false,
            Need::Gpu => gpu,
            Need::Torch => torch,
        };
        let expected = if has { 0 } else { e.exit };
        if code != expected {
            let stderr = String::from_utf8_lossy(&out.stderr);
            failures.push(format!(
                "exit {code}, expected {expected}: {command}\n    {}",
                stderr.lines().take(3).collect::<Vec<_>>().join("\n    ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The reader of `Examples:` blocks joins `\` continuations and refuses what a copy would
/// break: a line wrapped by the layout, a last line that goes on to nothing.
#[test]
fn a_wrapped_example_is_refused_and_a_continued_one_joined() {
    let joined = "Usage: x\n\nExamples:\n  iteragpu a --b 1 \\\n      --c 2   # note\n  $EDITOR f\n\nMore.\n";
    assert_eq!(
        examples(joined).unwrap(),
        ["iteragpu a --b 1 --c 2 # note", "$EDITOR f"]
    );
    let wrapped =
        "Examples:\n  iteragpu fit --model m --gpu-memory-utilization 0.95\n  --max-num-seqs 256\n";
    assert!(
        examples(wrapped)
            .unwrap_err()
            .contains("--max-num-seqs 256")
    );
    let open = "Examples:\n  iteragpu a \\\n";
    assert!(examples(open).unwrap_err().contains("ends with"));
    assert_eq!(
        commands("Commands:\n  slurm  Write\n         more\n  help   Print\n\nOptions:\n"),
        ["slurm"]
    );
}
