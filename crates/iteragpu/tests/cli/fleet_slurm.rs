//! `fleet slurm` against a real scheduler: a local Slurm cluster of four emulated nodes
//! (`scripts/slurm-local.sh`: munged, slurmctld, `slurmd -N n1..n4` on loopback) runs the
//! batch script the command writes, with `--device cpu` (the CPU reference device on every
//! node, so no GPU is needed), and every node's folder is read back.
//!
//! The cluster needs root and Debian's `slurm-wlm` and `munge`; without them the test says why
//! it skipped, except under CI (`CI` set), where it fails. The cluster is stopped by its PIDs
//! when the test ends, failed or not (a guard's `Drop`), and no process of it may be left.
//!
//! The failing node: a file planted at `DIR/n3/measure.json` before the job, which `measure`
//! refuses to overwrite (exit 2) on n3 only; the other nodes and checks must still exit 0.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::time::{Duration, Instant};

use assert_cmd::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Why the local cluster cannot run on this machine, if it cannot.
fn unavailable() -> Option<String> {
    let uid = Process::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not running as root (slurmd starts job steps as their user)".to_string());
    }
    for tool in [
        "munged",
        "mungekey",
        "slurmctld",
        "slurmd",
        "sbatch",
        "srun",
        "sinfo",
        "scontrol",
        "scancel",
        "squeue",
    ] {
        let found = Process::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "{tool} is not installed (apt-get install slurm-wlm munge)"
            ));
        }
    }
    None
}

/// Skips the test (returns true) where the cluster cannot run, except under CI.
/// One local cluster at a time: the test that checks no Slurm process outlives its cluster
/// counts every `slurm` process on the machine, so another test's cluster (started by a
/// parallel test thread) would be taken for a leak. Tests that start a cluster hold this.
static ONE_CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_cluster() -> std::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn skip() -> bool {
    match unavailable() {
        None => false,
        Some(why) if in_ci() => panic!("CI must run the local Slurm cluster: {why}"),
        Some(why) => {
            eprintln!("SKIPPED fleet_slurm: {why}");
            true
        }
    }
}

/// The PIDs of processes whose command line holds `pattern`.
fn pgrep(args: &[&str]) -> BTreeSet<String> {
    Process::new("pgrep")
        .args(args)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A running local cluster; dropping it cancels its jobs and stops every daemon by its PID.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    port_base: u16,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        // Ports of their own per run and per cluster of the run (the tests run in parallel):
        // base + 17 (slurmctld), base + 101..104 (slurmd).
        static STARTED: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let k = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2;
        let port_base = 20000 + ((std::process::id() % 150) as u16 * 2 + k) * 128;
        let cluster = Cluster {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
            port_base,
        };
        let out = Process::new(repo().join("scripts/slurm-local.sh"))
            .arg("start")
            .arg(dir)
            .env("SLURM_LOCAL_PORT_BASE", port_base.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the local cluster did not start (ports {port_base}+):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    fn client(&self, tool: &str) -> Process {
        let mut p = Process::new(tool);
        p.env("SLURM_CONF", &self.conf);
        p
    }

    /// `fleet slurm --submit` of `checks` on the four nodes, its nodes running `binary`, with
    /// extra options and variables (the job inherits them).
    fn fleet_with(
        &self,
        output: &Path,
        binary: &Path,
        checks: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Process {
        let mut c = Process::new(env!("CARGO_BIN_EXE_iteragpu"));
        c.env("SLURM_CONF", &self.conf)
            .args([
                "fleet",
                "slurm",
                "--package",
                "b200:7:4",
                "--nodes",
                "4",
                "--checks",
                checks,
                "--device",
                "cpu",
                "--probe-seconds",
                "1",
                "--submit",
            ])
            .args(extra)
            .arg("--binary")
            .arg(binary)
            .arg("--output")
            .arg(output);
        for (k, v) in vars {
            c.env(k, v);
        }
        c
    }

    fn fleet(&self, output: &Path) -> Command {
        let mut c = Command::cargo_bin("iteragpu").unwrap();
        c.env("SLURM_CONF", &self.conf)
            .args([
                "fleet",
                "slurm",
                "--package",
                "b200:7:4",
                "--nodes",
                "4",
                "--checks",
                "environment,probe,measure",
                "--device",
                "cpu",
                "--probe-seconds",
                "1",
                "--time",
                "10",
                "--submit",
                "--output",
            ])
            .arg(output)
            .timeout(Duration::from_secs(600));
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first, so that no slurmstepd outlives its slurmd.
        let _ = self.client("scancel").args(["--user", "root"]).status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let q = self.client("squeue").args(["-h", "-o", "%i"]).output();
            if q.is_err() || q.is_ok_and(|o| o.stdout.is_empty() || !o.status.success()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let _ = Process::new(repo().join("scripts/slurm-local.sh"))
            .arg("stop")
            .arg(&self.dir)
            .env("SLURM_LOCAL_PORT_BASE", self.port_base.to_string())
            .status();
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every node's exit code of `check`, by node.
fn exits(dir: &Path, check: &str) -> Vec<(String, String)> {
    ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|n| {
            let code = std::fs::read_to_string(dir.join(n).join(format!("{check}.exit")))
                .map(|t| t.trim().to_string())
                .unwrap_or_else(|_| "missing".to_string());
            (n.to_string(), code)
        })
        .collect()
}

#[test]
fn every_node_runs_every_check_once_and_a_failing_node_shows() {
    if skip() {
        return;
    }
    let _alone = one_cluster();
    let slurm_before = pgrep(&["slurm"]);
    let tmp = tempfile::tempdir().unwrap();
    let cluster_dir = tmp.path().join("cluster");
    let cluster_text = cluster_dir.to_string_lossy().into_owned();
    {
        let cluster = Cluster::start(&cluster_dir);

        // All four nodes, three checks each, every exit code 0.
        let good = tmp.path().join("good");
        let assert = cluster.fleet(&good).assert();
        let out = assert.get_output();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let log = std::fs::read_dir(&good)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
            .map(|e| read(&e.path()))
            .collect::<String>();
        assert_eq!(
            out.status.code(),
            Some(0),
            "stdout:\n{stdout}\nstderr:\n{stderr}\njob log:\n{log}"
        );
        assert!(stdout.contains("CPU REFERENCE DEVICE"), "{stdout}");
        assert!(stdout.contains("Submitted batch job"), "{stdout}");
        assert!(
            stdout.contains("every node ran every check with exit 0"),
            "{stdout}"
        );
        assert_eq!(read(&good.join("nodes.txt")), "n1\nn2\nn3\nn4\n");
        let script = read(&good.join("fleet.sbatch"));
        assert!(script.contains("#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n"));
        for check in ["environment", "probe", "measure"] {
            assert!(
                exits(&good, check).iter().all(|(_, code)| code == "0"),
                "{check}: {:?}\n{stdout}\n{log}",
                exits(&good, check)
            );
            for node in ["n1", "n2", "n3", "n4"] {
                let file = good.join(node).join(format!("{check}.json"));
                let doc: serde_json::Value = serde_json::from_str(&read(&file))
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                assert!(
                    doc.to_string().contains("cpu"),
                    "{} does not name the CPU device",
                    file.display()
                );
                assert!(!good.join(node).join(format!("{check}.err")).exists());
            }
        }
        // One task per node: four node folders, no other.
        let folders: Vec<String> = std::fs::read_dir(&good)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(folders, ["n1", "n2", "n3", "n4"]);

        // n3's measure cannot write its document: exit 2 there, 0 everywhere else.
        let bad = tmp.path().join("bad");
        std::fs::create_dir_all(bad.join("n3")).unwrap();
        std::fs::write(bad.join("n3/measure.json"), "planted\n").unwrap();
        let assert = cluster.fleet(&bad).assert().code(1);
        let stdout = String::from_utf8_lossy(&assert.get_output().stdout).into_owned();
        assert_eq!(
            exits(&bad, "measure"),
            [("n1", "0"), ("n2", "0"), ("n3", "2"), ("n4", "0")]
                .map(|(n, c)| (n.to_string(), c.to_string()))
        );
        for check in ["environment", "probe"] {
            assert!(exits(&bad, check).iter().all(|(_, code)| code == "0"));
        }
        let err = read(&bad.join("n3/measure.err"));
        assert!(
            err.starts_with("iteragpu: error:") && err.contains("exists"),
            "{err}"
        );
        assert!(
            stdout.contains("n3               exit 0      exit 0      exit 2"),
            "{stdout}"
        );
        assert!(stdout.contains("n3/measure: iteragpu: error:"), "{stdout}");
        assert!(
            stdout.contains("FAILED: a node's check failed or did not run"),
            "{stdout}"
        );
        assert_eq!(read(&bad.join("n3/measure.json")), "planted\n");
    }
    // The guard has stopped the cluster: nothing of it is left.
    let start = Instant::now();
    while !pgrep(&["-f", &cluster_text]).is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        pgrep(&["-f", &cluster_text]).is_empty(),
        "processes of the cluster are left"
    );
    let left: Vec<String> = pgrep(&["slurm"])
        .difference(&slurm_before)
        .cloned()
        .collect();
    assert!(left.is_empty(), "slurm processes are left: {left:?}");
}

fn iteragpu() -> Command {
    Command::cargo_bin("iteragpu").unwrap()
}

/// A binary for the nodes that is the real one, except that the probe on the node named by
/// `FLEET_TEST_HANG` sleeps for five minutes first: a node that hangs, as a real one can.
fn hanging_binary(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let real = std::fs::canonicalize(env!("CARGO_BIN_EXE_iteragpu")).unwrap();
    let path = dir.join("iteragpu-hangs.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncase \"$1:$SLURMD_NODENAME\" in \"probe:${{FLEET_TEST_HANG:-none}}\") sleep 300 ;; esac\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The verdict's findings that fail the fleet, as (code, node) pairs.
fn failing(v: &serde_json::Value) -> Vec<(String, Option<String>)> {
    findings(&v["verdict"], |f| f["effect"] == "fails")
}

/// The findings of a verdict that `keep` keeps, as (code, node) pairs.
fn findings(
    verdict: &serde_json::Value,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> Vec<(String, Option<String>)> {
    verdict["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| keep(f))
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_string(),
                f["node"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn scancel_a_time_limit_and_a_dead_node_each_fail_naming_the_node_and_cause() {
    if skip() {
        return;
    }
    let _alone = one_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let cluster_dir = tmp.path().join("cluster");
    let cluster = Cluster::start(&cluster_dir);
    let bin = hanging_binary(tmp.path());

    // scancel while n3's probe hangs (the others' probes have ended).
    let dir = tmp.path().join("cancelled");
    let child = {
        let mut c = cluster.fleet_with(
            &dir,
            &bin,
            "environment,probe",
            &["--json"],
            &[("FLEET_TEST_HANG", "n3")],
        );
        c.stdout(std::process::Stdio::piped()).spawn().unwrap()
    };
    wait_for("three nodes' probes", Duration::from_secs(120), || {
        ["n1", "n2", "n4"]
            .iter()
            .all(|n| dir.join(n).join("probe.exit").exists())
            && dir.join("fleet.job").exists()
    });
    std::thread::sleep(Duration::from_secs(2));
    let job = read(&dir.join("fleet.job")).trim().to_string();
    assert!(
        cluster
            .client("scancel")
            .arg(&job)
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"]["ok"], false);
    let fails = failing(&v);
    let text = v["verdict"]["findings"].to_string();
    assert!(
        fails.contains(&("node_failed".to_string(), Some("n3".to_string()))),
        "{fails:?}\n{text}"
    );
    assert!(
        text.contains("ended by Slurm with SIGTERM") || text.contains("CANCELLED"),
        "{text}"
    );
    assert!(
        fails.iter().any(|(c, _)| c == "slurm_job_state"),
        "{fails:?}"
    );
    assert_eq!(read(&dir.join("n3/probe.exit")).trim(), "143");
    for healthy in ["n1", "n2", "n4"] {
        assert!(
            !fails.iter().any(|(_, n)| n.as_deref() == Some(healthy)),
            "{healthy} is blamed: {fails:?}\n{text}"
        );
    }

    // The job's time limit (1 minute) ends n2's hanging probe.
    let dir = tmp.path().join("timed-out");
    let a = cluster
        .fleet_with(
            &dir,
            &bin,
            "environment,probe",
            &["--json", "--time", "1"],
            &[("FLEET_TEST_HANG", "n2")],
        )
        .output()
        .unwrap();
    assert_eq!(
        a.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let fails = failing(&v);
    let text = v["verdict"]["findings"].to_string();
    assert!(
        fails.contains(&("node_failed".to_string(), Some("n2".to_string()))),
        "{fails:?}\n{text}"
    );
    assert!(
        text.contains("TIME LIMIT") || text.contains("TIMEOUT"),
        "{text}"
    );
    for healthy in ["n1", "n3", "n4"] {
        assert!(
            !fails.iter().any(|(_, n)| n.as_deref() == Some(healthy)),
            "{healthy} is blamed: {fails:?}\n{text}"
        );
    }

    // n4's slurmd stopped at submission: the job is not requeued into the folder, n4 is named
    // with Slurm's reason, the three healthy nodes pass their checks.
    let pid = read(&cluster_dir.join("slurmd.n4.pid")).trim().to_string();
    assert!(Process::new("kill").arg(&pid).status().unwrap().success());
    let dir = tmp.path().join("dead");
    let a = cluster
        .fleet_with(&dir, &bin, "environment,probe", &["--json"], &[])
        .output()
        .unwrap();
    assert_eq!(
        a.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&a.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let fails = failing(&v);
    let text = v["verdict"]["findings"].to_string();
    assert!(
        fails.contains(&("node_missing".to_string(), Some("n4".to_string()))),
        "{fails:?}\n{text}"
    );
    assert!(
        fails.contains(&("slurm_node_down".to_string(), Some("n4".to_string()))),
        "{fails:?}\n{text}"
    );
    assert!(text.contains("Not responding"), "{text}");
    for healthy in ["n1", "n2", "n3"] {
        assert!(
            !fails.iter().any(|(_, n)| n.as_deref() == Some(healthy)),
            "{healthy} is blamed: {fails:?}\n{text}"
        );
        assert_eq!(read(&dir.join(healthy).join("probe.exit")).trim(), "0");
    }
    assert!(read(&dir.join("fleet.sbatch")).contains("#SBATCH --no-requeue\n"));
    drop(cluster);
}

#[test]
fn requeue_and_an_unknown_partition_are_refused_before_a_folder_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("f");
    iteragpu()
        .args([
            "fleet",
            "slurm",
            "--package",
            "b200:7:4",
            "--nodes",
            "4",
            "--requeue",
            "--output",
        ])
        .arg(&dir)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "--requeue is refused: a requeued job runs again into the same folder",
        ));
    assert!(!dir.exists());
    iteragpu()
        .args([
            "fleet",
            "slurm",
            "--package",
            "b200:7:4",
            "--nodes",
            "4",
            "--time",
            "1h",
            "--output",
        ])
        .arg(&dir)
        .assert()
        .code(2);
    assert!(!dir.exists(), "a refused --time left its folder");
}

#[test]
fn the_script_is_written_without_a_scheduler_and_never_over_another() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let args = ["fleet", "slurm", "--package", "b200:7:4", "--nodes", "2"];
    iteragpu()
        .args(args)
        .arg("--output")
        .arg(&dir)
        .assert()
        .success()
        .stdout(predicates::str::contains(
            "environment, probe, measure on 2 node(s), one task per node (8 x NVIDIA B200, 4 per node)",
        ));
    let script = read(&dir.join("fleet.sbatch"));
    assert!(script.contains("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"));
    assert!(script.contains("#SBATCH --gpus-per-node=4\n"));
    let binary = std::fs::canonicalize(env!("CARGO_BIN_EXE_iteragpu")).unwrap();
    assert!(
        script.contains(&format!("BIN={}\n", binary.display())),
        "the nodes run this binary by its absolute path:\n{script}"
    );
    let plan: serde_json::Value = serde_json::from_str(&read(&dir.join("fleet.json"))).unwrap();
    assert_eq!(plan["gpus_per_node"], 4);
    assert!(script.contains("#SBATCH --no-requeue\n"), "{script}");
    // --json: the files written, one document.
    let other = tmp.path().join("json");
    let a = iteragpu()
        .args(args)
        .arg("--json")
        .arg("--output")
        .arg(&other)
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert_eq!(v["schema"], "iteragpu.fleet-slurm/1");
    assert_eq!(v["submitted"], false);
    assert!(v["script"].as_str().unwrap().ends_with("fleet.sbatch"));
    // The same folder again: refused, the script untouched.
    iteragpu()
        .args(args)
        .arg("--output")
        .arg(&dir)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("choose a new --output"));
    assert_eq!(read(&dir.join("fleet.sbatch")), script);
}

#[test]
fn gpus_that_do_not_share_out_over_the_nodes_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    iteragpu()
        .args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "3"])
        .arg("--output")
        .arg(tmp.path().join("f"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "8 GPU(s), which 3 nodes cannot hold evenly",
        ));
    iteragpu()
        .args(["fleet", "slurm", "--package", "b200:7:4", "--nodes", "4"])
        .args(["--checks", "environment,nccl", "--output"])
        .arg(tmp.path().join("g"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("`nccl` is not a check"));
}

#[test]
fn the_skypilot_task_asks_for_the_share_of_gpus_per_node() {
    let tmp = tempfile::tempdir().unwrap();
    let wheel = tmp
        .path()
        .join("iteragpu-0.1.0-py3-none-manylinux_2_28_x86_64.whl");
    std::fs::write(&wheel, b"").unwrap();
    let yaml = tmp.path().join("fleet.yaml");
    iteragpu()
        .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "4"])
        .arg("--wheel")
        .arg(&wheel)
        .arg("--output")
        .arg(&yaml)
        .assert()
        .success()
        .stdout(predicates::str::contains("4 node(s) of B200:2"));
    let text = read(&yaml);
    assert!(text.contains("num_nodes: 4\nresources:\n  accelerators: \"B200:2\"\n"));
    assert!(text.contains("out=~/iteragpu-fleet/$SKYPILOT_NODE_RANK\n"));
    // --json: one document that says the same.
    let json_yaml = tmp.path().join("fleet-json.yaml");
    let a = iteragpu()
        .args([
            "fleet",
            "skypilot",
            "--package",
            "b200:7:4",
            "--nodes",
            "4",
            "--json",
        ])
        .arg("--wheel")
        .arg(&wheel)
        .arg("--output")
        .arg(&json_yaml)
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert_eq!(v["schema"], "iteragpu.fleet-skypilot/1");
    assert_eq!(v["accelerators"], "B200:2");
    let plan: serde_json::Value =
        serde_json::from_str(&read(Path::new(v["plan"].as_str().unwrap()))).unwrap();
    assert_eq!(plan["gpus_per_node"], 2);
    assert!(json_yaml.is_file());
    assert!(tmp.path().join("fleet-json.plan.json").is_file());
    // The file exists now: refused.
    iteragpu()
        .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "4"])
        .arg("--wheel")
        .arg(&wheel)
        .arg("--output")
        .arg(&yaml)
        .assert()
        .code(2);
    iteragpu()
        .args(["fleet", "skypilot", "--package", "b200:7:4", "--nodes", "4"])
        .args(["--wheel", "no-such.whl", "--output"])
        .arg(tmp.path().join("other.yaml"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no such file"));
}

#[test]
fn fleet_check_refuses_what_is_not_a_fleet_folder() {
    let tmp = tempfile::tempdir().unwrap();
    iteragpu()
        .args(["fleet", "check"])
        .arg(tmp.path().join("missing"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("is not a folder"));
}

/// Sets the all-reduce bus bandwidth at the largest size in every pair document of the pair
/// `a`-`b` (both nodes, every rank): the doctoring of a slow link.
fn doctor_pair(dir: &Path, a: &str, b: &str, busbw: f64) {
    for node in [a, b] {
        let file = dir.join(node).join(format!("collective.pair-{a}-{b}.json"));
        let mut doc: serde_json::Value = serde_json::from_str(&read(&file)).unwrap();
        let rows = doc["results"].as_array_mut().unwrap();
        let largest = rows
            .iter()
            .filter(|r| r["op"] == "all_reduce")
            .filter_map(|r| r["bytes"].as_u64())
            .max()
            .unwrap();
        for r in rows
            .iter_mut()
            .filter(|r| r["op"] == "all_reduce" && r["bytes"] == largest)
        {
            r["busbw_gb_s"] = serde_json::json!(busbw);
        }
        std::fs::write(&file, serde_json::to_string(&doc).unwrap()).unwrap();
    }
}

fn fleet_check_json(dir: &Path) -> serde_json::Value {
    let out = iteragpu()
        .args(["fleet", "check", "--json"])
        .arg(dir)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "fleet check --json: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn codes_on(v: &serde_json::Value) -> Vec<(String, Option<String>)> {
    findings(v, |f| f["code"].as_str().unwrap().starts_with("collective"))
}

#[test]
fn the_collective_runs_on_every_node_and_the_pair_pass_names_a_slow_node() {
    if skip() {
        return;
    }
    let Some(python) = crate::collective::torch_python() else {
        return;
    };
    let _alone = one_cluster();
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(&tmp.path().join("cluster"));
    // The ranks find torch in the first python3 on the PATH the job inherits.
    let venv_bin = python.parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let net = tmp.path().join("net");
    let out = cluster
        .fleet_with(
            &net,
            Path::new(env!("CARGO_BIN_EXE_iteragpu")),
            "environment,probe,measure,collective",
            &["--time", "20"],
            &[("PATH", &path)],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let log: String = std::fs::read_dir(&net)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
        .map(|e| read(&e.path()))
        .collect();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}\njob log:\n{log}\nn1: {:?}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(net.join("n1/collective.stderr"))
    );
    assert!(
        exits(&net, "collective").iter().all(|(_, c)| c == "0"),
        "{:?}",
        exits(&net, "collective")
    );
    // One rank per node, gloo, every size from 8 B to 64 KiB of both operations, correct on
    // every rank.
    let nodes = ["n1", "n2", "n3", "n4"];
    let mut ranks = BTreeSet::new();
    for node in nodes {
        let doc =
            lab_torch::collective::parse(read(&net.join(node).join("collective.json")).as_bytes())
                .unwrap();
        assert_eq!((doc.backend.as_str(), doc.world_size), ("gloo", 4));
        assert_eq!(doc.rendezvous, "slurm");
        ranks.insert(doc.rank);
        for op in ["all_reduce", "all_gather"] {
            let sizes: Vec<u64> = doc
                .results
                .iter()
                .filter(|r| r.op == op)
                .map(|r| r.bytes)
                .collect();
            // An all-gather's result holds a 4-byte element of every rank: from 16 B on 4.
            let from = if op == "all_reduce" { 3 } else { 4 };
            assert_eq!(
                sizes,
                (from..=16).map(|p| 1u64 << p).collect::<Vec<_>>(),
                "{op}"
            );
        }
        assert!(doc.results.iter().all(|r| r.correct && r.wrong_ranks == 0));
    }
    assert_eq!(ranks, BTreeSet::from([0, 1, 2, 3]));
    // The pair pass, round the ring: each node ran the pairs it is in, as one of two ranks.
    let ring = [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n1")];
    for (a, b) in ring {
        for node in [a, b] {
            let doc = lab_torch::collective::parse(
                read(&net.join(node).join(format!("collective.pair-{a}-{b}.json"))).as_bytes(),
            )
            .unwrap();
            assert_eq!(doc.world_size, 2, "{a}-{b} on {node}");
            assert!(doc.results.iter().all(|r| r.correct));
        }
    }
    // `fleet check` reads them: the curve, the pairs, and on gloo never `passed`.
    let v = fleet_check_json(&net);
    assert_eq!(v["collective"]["verdict"], "not checked", "{v:#}");
    assert_eq!(v["collective"]["documents"], 4);
    assert_eq!(v["collective"]["curve"].as_array().unwrap().len(), 14 + 13);
    assert_eq!(v["collective"]["pairs"].as_array().unwrap().len(), 4);
    assert!(
        v["not_checked"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("gloo is the CPU test path")),
        "{v:#}"
    );

    // Doctored: every pair at 1 GB/s, then the two pairs of n3 at 0.01 GB/s: n3 is named.
    let slow = tmp.path().join("slow");
    let copied = Process::new("cp")
        .arg("-a")
        .arg(&net)
        .arg(&slow)
        .status()
        .unwrap();
    assert!(copied.success());
    for (a, b) in ring {
        doctor_pair(&slow, a, b, 1.0);
    }
    let even = fleet_check_json(&slow);
    assert!(codes_on(&even).is_empty(), "{:?}", codes_on(&even));
    doctor_pair(&slow, "n2", "n3", 0.01);
    doctor_pair(&slow, "n3", "n4", 0.01);
    let v = fleet_check_json(&slow);
    let codes = codes_on(&v);
    assert!(
        codes.contains(&("collective_slow_node".to_string(), Some("n3".to_string()))),
        "{codes:?}"
    );
    assert_eq!(
        codes
            .iter()
            .filter(|(c, _)| c == "collective_slow_pair")
            .count(),
        2,
        "{codes:?}"
    );
    let text = iteragpu()
        .args(["fleet", "check"])
        .arg(&slow)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("the pair n2-n3 is slow")
            && text.contains("the node n3 is in every slow pair"),
        "{text}"
    );
    assert!(text.contains("busbw (GB/s)"), "{text}");
    // The report leads with the fleet's verdict, the collective's curve and pairs in it.
    let page = tmp.path().join("net.html");
    iteragpu()
        .arg("report")
        .arg(&slow)
        .arg("--output")
        .arg(&page)
        .assert()
        .success();
    let html = read(&page);
    for want in [
        "collective: not checked: 4 rank(s) over gloo",
        "collective all_reduce 65536 B:",
        "collective pair n2-n3: busbw 0.010 GB/s",
        "the node n3 is in every slow pair",
    ] {
        assert!(html.contains(want), "{want} is not in the report");
    }
}
