//! `iteragpu collective` on CPUs: several local ranks over gloo (started as torchrun would, with
//! RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT), every size checked on every rank, and the
//! refusals (world sizes that disagree, a rendezvous that times out, a backend that is missing).
//! The torch is `ITERAGPU_TEST_TORCH_PYTHON`, else the repository's `.cache/torch/venv`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use lab_torch::collective::{CollectiveDocument, judge, parse};

pub(crate) fn torch_python() -> Option<PathBuf> {
    let explicit = std::env::var_os("ITERAGPU_TEST_TORCH_PYTHON").map(PathBuf::from);
    let cached = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/torch/venv/bin/python");
    let found = explicit.or_else(|| cached.is_file().then_some(cached));
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the collective program: .ci/run installs torch into .cache/torch/venv"
        );
        eprintln!("no torch here (set ITERAGPU_TEST_TORCH_PYTHON): not run");
    }
    found
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rank(python: &Path, dir: &Path, rank: u32, world: u32, port: u16, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_iteragpu"))
        .current_dir(dir)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .args(["collective", "--python"])
        .arg(python)
        .args(["--backend", "gloo", "--warmup", "1", "--iters", "2"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn last_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn ranks_that_disagree_on_the_world_size_are_refused() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let timeout = ["--rendezvous-timeout", "20", "--max-bytes", "64"];
    let a = rank(&python, dir.path(), 0, 2, port, &timeout);
    let b = rank(&python, dir.path(), 1, 3, port, &timeout);
    for (out, want) in [
        (a.wait_with_output().unwrap(), "rank 0 has 2, rank 1 has 3"),
        (b.wait_with_output().unwrap(), "rank 1 has 3, rank 0 has 2"),
    ] {
        assert_eq!(out.status.code(), Some(2), "{}", last_line(&out));
        let line = last_line(&out);
        assert!(
            line.starts_with("iteragpu: error: the ranks disagree on the world size: ")
                && line.contains(want),
            "{line}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_rendezvous_that_times_out_is_refused_and_names_the_missing_rank() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let timeout = ["--rendezvous-timeout", "2", "--max-bytes", "64"];
    let out = rank(&python, dir.path(), 0, 3, free_port(), &timeout)
        .wait_with_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        last_line(&out),
        "iteragpu: error: the rendezvous timed out after 2 s: rank(s) 1, 2 of 3 never joined"
    );
    let out = rank(&python, dir.path(), 1, 2, free_port(), &timeout)
        .wait_with_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        last_line(&out).contains("did not answer within 2 s") && last_line(&out).contains("rank 1"),
        "{}",
        last_line(&out)
    );
}

#[test]
fn nccl_without_a_gpu_is_refused() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_iteragpu"))
        .current_dir(dir.path())
        .env("RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("MASTER_PORT", free_port().to_string())
        .args(["collective", "--backend", "nccl", "--python"])
        .arg(&python)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let line = last_line(&out);
    assert!(
        line.starts_with("iteragpu: error: --backend nccl: torch ")
            && (line.contains("has no NCCL") || line.contains("sees no GPU")),
        "{line}"
    );
}

#[test]
fn no_rendezvous_is_refused() {
    let Some(python) = torch_python() else { return };
    let out = Command::new(env!("CARGO_BIN_EXE_iteragpu"))
        .env_remove("RANK")
        .env_remove("SLURM_PROCID")
        .env_remove("SKYPILOT_NODE_RANK")
        .args(["collective", "--backend", "gloo", "--python"])
        .arg(&python)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(last_line(&out).contains("no rendezvous: set RANK, WORLD_SIZE"));
}

#[test]
fn three_ranks_over_gloo_measure_every_size_and_check_every_result() {
    let Some(python) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = ["--max-bytes", "64KiB", "--output", "rank-%t.json"];
    let children: Vec<Child> = (0..3)
        .map(|r| rank(&python, dir.path(), r, 3, port, &extra))
        .collect();
    let mut docs: Vec<CollectiveDocument> = Vec::new();
    for (r, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", last_line(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.starts_with(&format!("collective: rank {r} of 3 (gloo, torch ")));
        assert!(text.contains("busbw (GB/s)"));
        let bytes = std::fs::read(dir.path().join(format!("rank-{r}.json"))).unwrap();
        docs.push(parse(&bytes).unwrap());
    }
    for d in &docs {
        assert_eq!(d.world_size, 3);
        assert_eq!(d.backend, "gloo");
        assert_eq!(d.fabric.transport, "gloo TCP");
        let reduce: Vec<u64> = d
            .results
            .iter()
            .filter(|r| r.op == "all_reduce")
            .map(|r| r.bytes)
            .collect();
        // 8 B to 64 KiB doubling: 14 sizes.
        assert_eq!(reduce, (3..=16).map(|s| 1u64 << s).collect::<Vec<_>>());
        let gather = d.results.iter().filter(|r| r.op == "all_gather").count();
        assert!(gather >= 12, "{gather}");
        for r in &d.results {
            assert!(r.correct && r.wrong_ranks == 0, "{r:?}");
            assert!(r.time_us > 0.0);
            let factor = lab_torch::collective::bus_factor(&r.op, 3).unwrap();
            assert!((r.busbw_gb_s - r.algbw_gb_s * factor).abs() <= 1e-9 * r.algbw_gb_s.max(1.0));
            assert!((r.algbw_gb_s - r.bytes as f64 / r.time_us / 1e3).abs() <= 1e-6 * r.algbw_gb_s);
        }
        assert!(d.tool.is_some());
    }
    // Every rank is present and correct, yet gloo is never judged against a fabric.
    let j = judge(&docs, Some(400.0));
    assert_eq!(j.verdict, "not checked", "{j:?}");
    assert!(
        j.not_checked[0].contains("gloo is the CPU test path"),
        "{j:?}"
    );
    // A rank that left nothing fails the run.
    assert_eq!(judge(&docs[..2], Some(400.0)).verdict, "failed");
}

/// One rank whose rendezvous comes from the scheduler's variables alone.
fn scheduler_rank(python: &Path, vars: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_iteragpu"));
    for v in [
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
        "SLURM_STEP_NODELIST",
    ] {
        cmd.env_remove(v);
    }
    cmd.current_dir(dir.path())
        .envs(vars.iter().copied())
        .args([
            "collective",
            "--backend",
            "gloo",
            "--max-bytes",
            "64",
            "--json",
        ])
        .args(["--iters", "1", "--rendezvous-timeout", "20", "--port"])
        .arg(free_port().to_string())
        .arg("--python")
        .arg(python)
        .output()
        .unwrap()
}

#[test]
fn slurm_and_skypilot_variables_give_the_rendezvous() {
    let Some(python) = torch_python() else { return };
    let slurm = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
        ("SLURM_JOB_NODELIST", "localhost,n[2-4]"),
    ];
    let out = scheduler_rank(&python, &slurm);
    assert_eq!(out.status.code(), Some(0), "{}", last_line(&out));
    let doc: CollectiveDocument = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((doc.rendezvous.as_str(), doc.world_size), ("slurm", 1));
    let sky = [
        ("SKYPILOT_NODE_RANK", "0"),
        ("SKYPILOT_NODE_IPS", "127.0.0.1"),
        ("SKYPILOT_NUM_NODES", "1"),
    ];
    let out = scheduler_rank(&python, &sky);
    assert_eq!(out.status.code(), Some(0), "{}", last_line(&out));
    let doc: CollectiveDocument = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((doc.rendezvous.as_str(), doc.world_size), ("skypilot", 1));
    // No address or host name is copied into the document.
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("127.0.0.1") && !text.contains("localhost"));
}
