//! Node identity, the per-node share of a package, and `fleet check` over several nodes'
//! documents (issue 25): real `--device cpu` runs under Slurm's variables, stub GPUs, and probe
//! documents doctored to be four nodes of two B200s.

use std::path::Path;

use predicates::prelude::*;
use serde_json::{Value, json};

use crate::stubs::{StubDir, iteragpu};

/// Slurm's variables for node `rank` of a 4-node job.
fn slurm(rank: u32) -> Vec<(&'static str, String)> {
    vec![
        ("SLURM_JOB_ID", "4242".to_string()),
        ("SLURM_NODEID", rank.to_string()),
        ("SLURM_JOB_NUM_NODES", "4".to_string()),
        ("SLURMD_NODENAME", format!("n{rank}")),
    ]
}

/// A B200 as CUDA sees one, `count` of them.
fn b200s(count: usize) -> Vec<(&'static str, String)> {
    vec![
        ("STUB_DEVICE_COUNT", count.to_string()),
        ("STUB_NAMES", vec!["NVIDIA B200"; count].join(",")),
        ("STUB_TOTAL_BYTES", "191503138816".to_string()),
        ("STUB_FREE_BYTES", "190000000000".to_string()),
        ("STUB_NVML_PCIE_MAX", "5x16".to_string()),
    ]
}

fn stub_gpus() -> StubDir {
    let libs = StubDir::new();
    libs.driver(&["WITH_V2"]).nvml().cublas("");
    libs
}

fn run_with(libs: &Path, args: &[&str], vars: &[(&str, String)]) -> assert_cmd::assert::Assert {
    let mut cmd = iteragpu(libs);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.args(args).assert()
}

fn json_of(a: &assert_cmd::assert::Assert) -> Value {
    serde_json::from_slice(&a.get_output().stdout).expect("one JSON document")
}

fn schema_errors(schema: &str, doc: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn codes(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn one_node_of_four_expects_its_share_of_the_package() {
    let libs = stub_gpus();
    for rank in [0, 1] {
        let mut vars = slurm(rank);
        vars.extend(b200s(2));
        let args = ["environment", "--device", "all", "--package", "b200:7:4"];
        let a = run_with(libs.path(), &[&args[..], &["--json"]].concat(), &vars).success();
        let v = json_of(&a);
        assert_eq!(v["package"]["gpus"], 8, "{v:#}");
        assert_eq!(
            v["package"]["share"],
            json!({"node_rank": rank, "nodes": 4, "gpus": 2})
        );
        assert_eq!(v["node"]["source"], "slurm");
        assert_eq!(v["node"]["name"], format!("n{rank}"));
        assert_eq!(v["node"]["rank"], rank);
        assert_eq!(v["node"]["count"], 4);
        assert_eq!(v["node"]["job_id"], "4242");
        assert!(!codes(&v).contains(&"gpu_missing".to_string()), "{v:#}");
        let k = rank + 1;
        run_with(libs.path(), &args, &vars)
            .success()
            .stdout(predicate::str::contains(format!(
                "node: n{rank} (node {k} of 4, slurm job 4242)"
            )))
            .stdout(predicate::str::contains(format!(
                "share: node {k} of 4 expects 2 of them (8 / 4 nodes)"
            )))
            .stdout(predicate::str::contains("promises 8 GPU(s)").not());
    }
    // One GPU on node 1 of 4: one missing from this node's share, not seven from the package.
    let mut vars = slurm(0);
    vars.extend(b200s(1));
    let a = run_with(
        libs.path(),
        &["environment", "--package", "b200:7:4", "--json"],
        &vars,
    )
    .success();
    let v = json_of(&a);
    let f = &v["findings"][0];
    assert_eq!(f["code"], "gpu_missing");
    assert_eq!(f["figures"]["expected_gpus"], 2);
    assert!(
        f["message"].as_str().unwrap().contains(
            "this is node 1 of 4, whose share is 2; the driver sees 1: 1 missing from this node"
        ),
        "{f:#}"
    );
    // A package of 2 GPUs does not split over 4 nodes: refused with a sentence.
    run_with(
        libs.path(),
        &["environment", "--package", "b200:7:1"],
        &vars,
    )
    .code(2)
    .stderr(predicate::str::contains(
        "promises 2 GPU(s), which do not split evenly over the job's 4 nodes",
    ));
}

#[test]
fn node_names_by_hand_and_none_outside_a_scheduler() {
    let libs = StubDir::new();
    let a = run_with(
        libs.path(),
        &["environment", "--device", "cpu", "--json"],
        &[],
    )
    .success();
    assert!(json_of(&a).get("node").is_none());
    let a = run_with(
        libs.path(),
        &[
            "environment",
            "--device",
            "cpu",
            "--node",
            "rack2-a",
            "--json",
        ],
        &[],
    )
    .success();
    let v = json_of(&a);
    assert_eq!(v["node"]["source"], "manual");
    assert_eq!(v["node"]["name"], "rack2-a");
    run_with(
        libs.path(),
        &["environment", "--device", "cpu", "--node", "a/b"],
        &[],
    )
    .code(2)
    .stderr(predicate::str::contains("is not a node name"));
}

/// A real `probe --device cpu` document of node `rank`, doctored into a probe of two B200s
/// whose device copies ran at `d2d` GB/s.
fn doctored_probe(libs: &Path, dir: &Path, rank: u32, d2d: [f64; 2]) -> Value {
    let out = dir.join(format!("cpu-probe-{rank}.json"));
    run_with(
        libs,
        &[
            "probe",
            "--device",
            "cpu",
            "--seconds",
            "0.2",
            "--copy-bytes",
            "1MiB",
            "--output",
            out.to_str().unwrap(),
        ],
        &slurm(rank),
    )
    .success();
    let mut v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(v["node"]["rank"], rank);
    let cpu = v["devices"][0].clone();
    let devices: Vec<Value> = (0..2)
        .map(|i| {
            let mut d = cpu.clone();
            let name = format!("cuda:{i}");
            d["device"] = json!(name);
            d["environment"]["requested_device"] = json!(name);
            d["environment"]["backend"] = json!("cuda");
            d["environment"]["reference_device"] = json!(false);
            d["environment"]["details"] = json!({"nvml": {"driver_version": "580.65.06"}});
            d["facts"] = json!({
                "device": name,
                "name": "NVIDIA B200",
                "uuid": format!("GPU-{rank}{i}000000-0000-0000-0000-000000000000"),
                "compute_capability": "10.0",
                "total_memory_bytes": 191_503_138_816u64,
                "nvml_matched": true,
            });
            d["copies"][0]["kind"] = json!("d2d");
            d["copies"][0]["from"] = json!(name);
            d["copies"][0]["to"] = json!(name);
            d["copies"][0]["gb_per_s"] = json!(d2d[i]);
            d
        })
        .collect();
    v["devices"] = json!(devices);
    v["requested_device"] = json!("all");
    v["reference_device"] = json!(false);
    v["visible_devices"] = json!(2);
    v
}

/// Four nodes' folders as the batch script leaves them: a real `environment --device cpu` and a
/// doctored two-GPU probe each, with exit 0; `d2d` gives each node's GPUs' copy rates.
fn fleet(libs: &Path, dir: &Path, d2d: [[f64; 2]; 4]) {
    for rank in 0..4u32 {
        let node = dir.join(format!("n{rank}"));
        std::fs::create_dir_all(&node).unwrap();
        let a = run_with(
            libs,
            &["environment", "--device", "cpu", "--json"],
            &slurm(rank),
        )
        .success();
        std::fs::write(node.join("environment.json"), &a.get_output().stdout).unwrap();
        std::fs::write(node.join("environment.exit"), "0\n").unwrap();
        std::fs::write(node.join("environment.err"), "").unwrap();
        let probe = doctored_probe(libs, dir, rank, d2d[rank as usize]);
        std::fs::write(
            node.join("probe.json"),
            serde_json::to_vec_pretty(&probe).unwrap(),
        )
        .unwrap();
        std::fs::write(node.join("probe.exit"), "0\n").unwrap();
        std::fs::write(node.join("probe.err"), "").unwrap();
    }
}

const EVEN: [[f64; 2]; 4] = [
    [2000.0, 2010.0],
    [1990.0, 2005.0],
    [2002.0, 1998.0],
    [2001.0, 1995.0],
];

fn check(libs: &Path, dir: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    run_with(
        libs,
        &[&["fleet", "check", dir.to_str().unwrap()][..], extra].concat(),
        &[],
    )
}

#[test]
fn four_healthy_nodes_make_one_table_and_exit_0() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    let a = check(libs.path(), &dir, &["--package", "b200:7:4"]).success();
    let text = String::from_utf8_lossy(&a.get_output().stdout).to_string();
    for rank in 0..4 {
        assert!(
            text.contains(&format!(
                "node n{rank} [n{rank} (node {} of 4, slurm job 4242)]: environment ok, probe ok",
                rank + 1
            )),
            "{text}"
        );
    }
    assert!(text.contains("4 node(s) of 4 expected, 8 GPU(s)"), "{text}");
    assert!(text.contains("verdict: OK"), "{text}");
    // One row per GPU of every node, with its model, UUID, memory, driver and figure.
    let rows = text
        .lines()
        .filter(|l| l.contains("NVIDIA B200") && l.contains("580.65.06"))
        .count();
    assert_eq!(rows, 8, "{text}");
    let a = check(libs.path(), &dir, &["--package", "b200:7:4", "--json"]).success();
    let v = json_of(&a);
    assert_eq!(v["schema"], "iteragpu.fleet-verdict/2");
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 4);
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(v["gpus"][7]["figures"][0]["figure"], "d2d");
    // The whole package over the fleet: 5 lots are 10 GPUs, not the 8 found.
    let a = check(libs.path(), &dir, &["--package", "b200:7:5", "--json"]).code(1);
    let v = json_of(&a);
    assert_eq!(codes(&v), ["gpu_missing"]);
    assert!(
        v["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("the driver sees 8: 2 missing from the fleet's 4 node(s)"),
        "{v:#}"
    );
}

#[test]
fn a_failed_node_is_named_with_its_exit_code_and_error() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    let n2 = dir.join("n2");
    std::fs::remove_file(n2.join("probe.json")).unwrap();
    std::fs::write(n2.join("probe.exit"), "1\n").unwrap();
    std::fs::write(
        n2.join("probe.err"),
        "iteragpu: error: the probe on all: cuInit failed (CUDA_ERROR_NO_DEVICE)\nsecond line\n",
    )
    .unwrap();
    check(libs.path(), &dir, &[])
        .code(1)
        .stdout(predicate::str::contains(
            "FAIL node_failed: node n2: probe failed with exit code 1: iteragpu: error: the probe on all: cuInit failed (CUDA_ERROR_NO_DEVICE)",
        ))
        .stdout(predicate::str::contains("second line").not())
        .stdout(predicate::str::starts_with("verdict: FAILED: 1 finding(s) fail the fleet (node_failed) (exit 1)"));
    // A node folder lost altogether: the job counts 4 nodes.
    std::fs::remove_dir_all(dir.join("n3")).unwrap();
    let a = check(libs.path(), &dir, &["--json"]).code(1);
    let v = json_of(&a);
    let missing = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "node_missing")
        .expect("a missing node");
    assert!(
        missing["message"]
            .as_str()
            .unwrap()
            .contains("1 node(s) left nothing (rank 3)"),
        "{missing:#}"
    );
}

#[test]
fn a_node_20_percent_slower_is_the_fleet_outlier() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let mut d2d = EVEN;
    d2d[3][1] = 1600.0;
    fleet(libs.path(), &dir, d2d);
    let a = check(libs.path(), &dir, &["--json"]).code(1);
    let v = json_of(&a);
    assert_eq!(
        v["outliers"].as_array().unwrap().len(),
        1,
        "{:#}",
        v["outliers"]
    );
    assert_eq!(v["outliers"][0]["node"], "n3");
    assert_eq!(v["outliers"][0]["device"], "cuda:1");
    assert_eq!(v["outliers"][0]["figure"], "d2d");
    assert_eq!(codes(&v), ["fleet_outlier"]);
    assert_eq!(v["findings"][0]["node"], "n3");
    assert_eq!(v["findings"][0]["gpu"], "cuda:1");
    assert_eq!(v["findings"][0]["effect"], "fails");
    check(libs.path(), &dir, &[])
        .code(1)
        .stdout(predicate::str::contains(
            "node n3 cuda:1 is the fleet's outlier, more than 10% below the other GPUs of every node on 1 figure(s): d2d 1600.000, 20% below",
        ))
        .stdout(predicate::str::contains("1600.0 LOW"));
    // `report DIR` draws the figure on one axis with every GPU of every node, the outlier named.
    let page = tmp.path().join("fleet.html");
    run_with(
        libs.path(),
        &[
            "report",
            dir.to_str().unwrap(),
            "--output",
            page.to_str().unwrap(),
        ],
        &[],
    )
    .success()
    .stdout(predicate::str::contains("0 run(s), 0 sweep(s), 4 probe(s)"));
    let html = std::fs::read_to_string(&page).unwrap();
    // The page leads with the fleet's verdict and its findings.
    let verdict = html
        .find("<section id=\"verdict\">")
        .expect("a verdict section");
    assert!(verdict < html.find("<section id=\"probes\">").unwrap());
    assert!(
        html.contains("verdict: FAILED: 1 finding(s) fail the fleet (fleet_outlier)"),
        "{html}"
    );
    assert!(
        html.contains("FAIL fleet_outlier: node n3 cuda:1 is the fleet&#39;s outlier"),
        "{html}"
    );
    assert_eq!(html.matches("data-chart=\"fleet-figure\"").count(), 1);
    for rank in 0..4 {
        for gpu in 0..2 {
            assert!(
                html.contains(&format!("n{rank}/cuda:{gpu}")),
                "n{rank}/cuda:{gpu}"
            );
        }
    }
    assert!(
        html.contains("outlier: n3/cuda:1 d2d: 1600.0 GB/s, 20% below the others&#39; median"),
        "{html}"
    );
}

#[test]
fn a_planted_secret_appears_in_no_document() {
    const SECRET: &str = "s3cr3t-planted-7731";
    let mut vars = slurm(1);
    vars.extend([
        ("ITERAGPU_PLANTED_SECRET", SECRET.to_string()),
        ("HOSTNAME", format!("{SECRET}-host")),
        ("USER", format!("{SECRET}-user")),
        ("LOGNAME", format!("{SECRET}-user")),
        ("SLURM_JOB_ACCOUNT", SECRET.to_string()),
        ("SLURM_SUBMIT_HOST", SECRET.to_string()),
        ("SLURM_JOB_NAME", SECRET.to_string()),
        ("SKYPILOT_NODE_IPS", SECRET.to_string()),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let node = tmp.path().join("fleet/n1");
    std::fs::create_dir_all(&node).unwrap();
    let mut seen: Vec<(String, Vec<u8>)> = Vec::new();
    // The CPU device's documents, and the stub GPUs' lot report.
    let cpu = StubDir::new();
    let a = run_with(
        cpu.path(),
        &["environment", "--device", "cpu", "--json"],
        &vars,
    )
    .success();
    std::fs::write(node.join("environment.json"), &a.get_output().stdout).unwrap();
    seen.push(("environment".into(), a.get_output().stdout.clone()));
    let gpus = stub_gpus();
    let mut gpu_vars = vars.clone();
    gpu_vars.extend(b200s(2));
    let a = run_with(
        gpus.path(),
        &[
            "environment",
            "--device",
            "all",
            "--package",
            "b200:7:4",
            "--json",
        ],
        &gpu_vars,
    )
    .success();
    assert_eq!(json_of(&a)["node"]["name"], "n1");
    seen.push(("lot".into(), a.get_output().stdout.clone()));
    let probe = node.join("probe.json");
    let a = run_with(
        cpu.path(),
        &[
            "probe",
            "--device",
            "cpu",
            "--seconds",
            "0.2",
            "--copy-bytes",
            "1MiB",
            "--output",
            probe.to_str().unwrap(),
        ],
        &vars,
    )
    .success();
    seen.push(("probe stdout".into(), a.get_output().stdout.clone()));
    seen.push(("probe.json".into(), std::fs::read(&probe).unwrap()));
    let measure = node.join("measure.json");
    let a = run_with(
        cpu.path(),
        &[
            "measure",
            "--device",
            "cpu",
            "--batch",
            "1",
            "--context",
            "16",
            "--width",
            "64",
            "--warmup",
            "1",
            "--repeats",
            "2",
            "--output",
            measure.to_str().unwrap(),
        ],
        &vars,
    )
    .success();
    seen.push(("measure stdout".into(), a.get_output().stdout.clone()));
    let doc = std::fs::read(&measure).unwrap();
    let v: Value = serde_json::from_slice(&doc).unwrap();
    assert_eq!(v["node"]["rank"], 1);
    assert_eq!(v["node"]["job_id"], "4242");
    // Both documents with their node still follow their schemas.
    assert_eq!(
        schema_errors(include_str!("../../../../docs/measurement.schema.json"), &v),
        Vec::<String>::new()
    );
    let p: Value = serde_json::from_slice(&std::fs::read(&probe).unwrap()).unwrap();
    assert_eq!(p["node"]["name"], "n1");
    assert_eq!(
        schema_errors(include_str!("../../../../docs/probe.schema.json"), &p),
        Vec::<String>::new()
    );
    seen.push(("measure.json".into(), doc));
    let a = run_with(
        cpu.path(),
        &[
            "fleet",
            "check",
            tmp.path().join("fleet").to_str().unwrap(),
            "--json",
        ],
        &vars,
    );
    seen.push(("fleet check".into(), a.get_output().stdout.clone()));
    for (what, bytes) in &seen {
        let text = String::from_utf8_lossy(bytes);
        assert!(!text.is_empty(), "{what} is empty");
        assert!(
            !text.contains(SECRET),
            "{what} holds the planted secret:\n{text}"
        );
    }
}

/// The plan `fleet slurm` writes for the doctored fleet: 4 nodes of b200:7:4, environment and
/// probe, beside the node folders.
fn plan_for(libs: &Path, dir: &Path) {
    let bin = assert_cmd::cargo::cargo_bin("iteragpu");
    run_with(
        libs,
        &[
            "fleet",
            "slurm",
            "--package",
            "b200:7:4",
            "--nodes",
            "4",
            "--checks",
            "environment,probe",
            "--binary",
            bin.to_str().unwrap(),
            "--output",
            dir.to_str().unwrap(),
        ],
        &[],
    )
    .success();
}

fn edit_probe(dir: &Path, node: &str, edit: impl FnOnce(&mut Value)) {
    let path = dir.join(node).join("probe.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn text_of(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stdout).to_string()
}

#[test]
fn empty_node_folders_fail_and_are_named() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    std::fs::create_dir_all(dir.join("n1")).unwrap();
    std::fs::create_dir_all(dir.join("n2")).unwrap();
    let text = text_of(&check(libs.path(), &dir, &[]).code(1));
    assert!(text.starts_with("verdict: FAILED"), "{text}");
    assert!(text.contains("FAIL nothing_ran"), "{text}");
    for n in ["n1", "n2"] {
        assert!(
            text.contains(&format!(
                "FAIL node_empty: node {n}: its folder holds no document"
            )),
            "{text}"
        );
    }
    assert!(!text.contains("verdict: OK"), "{text}");
    // No reader takes empty node folders for a run: `report` refuses them too.
    let page = tmp.path().join("empty.html");
    run_with(
        libs.path(),
        &[
            "report",
            dir.to_str().unwrap(),
            "--output",
            page.to_str().unwrap(),
        ],
        &[],
    )
    .failure();
    assert!(!page.exists());
    // The same under a plan: the planned node count and checks are named too.
    plan_for(libs.path(), &dir);
    let v = json_of(&check(libs.path(), &dir, &["--json"]).code(1));
    assert_eq!(v["ok"], false);
    assert_eq!(v["expected_nodes"], 4);
    assert_eq!(v["checks"], json!(["environment", "probe"]));
    assert!(codes(&v).contains(&"node_missing".to_string()), "{v:#}");
}

#[test]
fn without_a_plan_or_package_it_says_what_it_did_not_check() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    let text = text_of(&check(libs.path(), &dir, &[]).success());
    assert!(text.starts_with("verdict: OK:"), "{text}");
    assert!(!text.contains("the package matches"), "{text}");
    assert!(text.contains("not checked: the plan:"), "{text}");
    assert!(
        text.contains("not checked: the package: none given"),
        "{text}"
    );
}

#[test]
fn the_plan_holds_every_node_to_every_check_and_to_its_package() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    plan_for(libs.path(), &dir);
    fleet(libs.path(), &dir, EVEN);
    // NO first: n1's probe is partial, n3's probe was killed before its exit code.
    edit_probe(&dir, "n1", |v| v["complete"] = json!(false));
    std::fs::remove_file(dir.join("n3/probe.exit")).unwrap();
    let text = text_of(&check(libs.path(), &dir, &[]).code(1));
    assert!(
        text.contains("FAIL node_failed: node n1: probe failed with exit code 0: probe.json is partial (complete: false)"),
        "{text}"
    );
    assert!(
        text.contains(
            "FAIL node_failed: node n3: probe failed, the step did not finish: it left no exit code"
        ),
        "{text}"
    );
    // Then yes: the plan's package (b200:7:4) over all nodes, every planned check on each.
    let dir = tmp.path().join("good");
    plan_for(libs.path(), &dir);
    fleet(libs.path(), &dir, EVEN);
    let text = text_of(&check(libs.path(), &dir, &[]).success());
    assert!(
        text.starts_with("verdict: OK: every planned check (environment, probe) ran to a complete document with exit 0 on all 4 node(s) of job 4242, no failing finding, no outlier, the package matches (exit 0)"),
        "{text}"
    );
    assert!(
        text.contains("package: b200:7:4 promises 8 x NVIDIA B200"),
        "{text}"
    );
}

#[test]
fn copied_nodes_and_another_jobs_documents_fail() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    // n1's GPUs carry n0's UUIDs; n2's probe is another job's.
    edit_probe(&dir, "n1", |v| {
        for i in 0..2 {
            v["devices"][i]["facts"]["uuid"] =
                json!(format!("GPU-0{i}000000-0000-0000-0000-000000000000"));
        }
    });
    edit_probe(&dir, "n2", |v| v["node"]["job_id"] = json!("999"));
    let v = json_of(&check(libs.path(), &dir, &["--json"]).code(1));
    let text = serde_json::to_string(&v["findings"]).unwrap();
    assert!(
        text.contains("GPU UUID GPU-00000000-0000-0000-0000-000000000000 appears 2 times, in n0/cuda:0, n1/cuda:0"),
        "{text}"
    );
    assert!(
        text.contains("node n2: probe.json comes from job 999, not 4242"),
        "{text}"
    );
    // Two folders of one node: the same name and rank twice.
    let copy = dir.join("n9");
    std::fs::create_dir_all(&copy).unwrap();
    for f in [
        "environment.json",
        "environment.exit",
        "probe.json",
        "probe.exit",
    ] {
        std::fs::copy(dir.join("n3").join(f), copy.join(f)).unwrap();
    }
    let v = json_of(&check(libs.path(), &dir, &["--json"]).code(1));
    let text = serde_json::to_string(&v["findings"]).unwrap();
    assert!(
        text.contains("node name n3 appears 2 times, in n3, n9"),
        "{text}"
    );
    assert!(
        text.contains("node n9: environment.json was written on node n3, not n9"),
        "{text}"
    );
}

#[test]
fn a_nodes_own_gpu_warnings_fail_the_fleet_with_node_and_gpu() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    let finding = |code: &str, severity: &str, device: &str, message: &str| json!({"code": code, "severity": severity, "device": device, "message": message, "figures": {}});
    // A note only warns: the verdict stays OK.
    edit_probe(&dir, "n0", |v| {
        v["findings"] = json!([finding(
            "persistence_off",
            "note",
            "cuda:0",
            "cuda:0 has persistence mode off"
        )]);
    });
    let text = text_of(&check(libs.path(), &dir, &[]).success());
    assert!(
        text.contains("warn persistence_off: node n0: cuda:0 has persistence mode off"),
        "{text}"
    );
    // ECC errors, thermal throttling and a GPU at 45% of its datasheet each fail, named.
    edit_probe(&dir, "n1", |v| {
        v["findings"] = json!([
            finding(
                "ecc_uncorrected_errors",
                "warning",
                "cuda:1",
                "cuda:1 has had 3 uncorrected ECC error(s) since the driver loaded"
            ),
            finding(
                "clock_throttled",
                "warning",
                "cuda:0",
                "cuda:0 is slowing its clocks (hw_thermal_slowdown)"
            ),
        ]);
        v["warnings"] = json!(2);
    });
    edit_probe(&dir, "n2", |v| {
        v["findings"] = json!([finding(
            "gemm_below_datasheet",
            "warning",
            "cuda:0",
            "cuda:0 bfloat16 at 45% of its datasheet"
        )]);
    });
    let a = check(libs.path(), &dir, &["--json"]).code(1);
    let v = json_of(&a);
    let got: Vec<(String, String, String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_string(),
                f["node"].as_str().unwrap_or("-").to_string(),
                f["gpu"].as_str().unwrap_or("-").to_string(),
                f["effect"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = |c: &str, n: &str, g: &str, e: &str| {
        (c.to_string(), n.to_string(), g.to_string(), e.to_string())
    };
    assert_eq!(
        got,
        [
            want("ecc_uncorrected_errors", "n1", "cuda:1", "fails"),
            want("clock_throttled", "n1", "cuda:0", "fails"),
            want("gemm_below_datasheet", "n2", "cuda:0", "fails"),
            want("persistence_off", "n0", "cuda:0", "warns"),
        ]
    );
    assert!(
        v["findings"][0]["why"]
            .as_str()
            .unwrap()
            .contains("corrupt"),
        "{v:#}"
    );
}

#[test]
fn a_hardware_xid_fails_the_fleet_and_an_unread_kernel_log_is_not_checked() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    let finding = |code: &str, severity: &str, message: &str| json!({"code": code, "severity": severity, "device": "cuda:1", "message": message, "figures": {}});
    // Past faults unknown (the kernel log closed to the check): said as not checked.
    edit_probe(&dir, "n0", |v| {
        for d in v["devices"].as_array_mut().unwrap() {
            d["facts"]["xid_not_checked"] =
                json!("the kernel log is not readable here (/dev/kmsg: Permission denied)");
        }
    });
    let text = text_of(&check(libs.path(), &dir, &[]).success());
    assert!(
        text.contains(
            "XID errors since boot on 1 node(s) (n0): the kernel log is not readable here"
        ),
        "{text}"
    );
    // XID 79 (fallen off the bus) on n2: the fleet fails, naming n2 and the GPU.
    edit_probe(&dir, "n2", |v| {
        v["findings"] = json!([finding(
            "xid_hardware",
            "warning",
            "cuda:1's driver logged XID 79 x1 since boot, among them a fault of the GPU itself"
        )]);
        v["warnings"] = json!(1);
    });
    let v = json_of(&check(libs.path(), &dir, &["--json"]).code(1));
    let first = &v["findings"][0];
    assert_eq!(
        (
            &first["code"],
            &first["node"],
            &first["gpu"],
            &first["effect"]
        ),
        (
            &json!("xid_hardware"),
            &json!("n2"),
            &json!("cuda:1"),
            &json!("fails")
        ),
        "{v:#}"
    );
}

#[test]
fn a_large_fleets_page_shows_the_outliers_node_and_summarises_the_rest() {
    let libs = StubDir::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    fleet(libs.path(), &dir, EVEN);
    // 40 nodes of 2 GPUs: n3's probe copied under new names, the last one 20% slow on cuda:1.
    let big = tmp.path().join("big");
    for i in 0..40 {
        let node = big.join(format!("m{i:02}"));
        std::fs::create_dir_all(&node).unwrap();
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(dir.join("n3/probe.json")).unwrap()).unwrap();
        v["node"]["name"] = json!(format!("m{i:02}"));
        if i == 39 {
            for c in v["devices"][1]["copies"].as_array_mut().unwrap() {
                if c["kind"] == "d2d" {
                    c["gb_per_s"] = json!(1600.0);
                }
            }
        }
        std::fs::write(node.join("probe.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let page = tmp.path().join("big.html");
    let mut cmd = iteragpu(libs.path());
    cmd.arg("report").arg(&big).arg("--output").arg(&page);
    cmd.assert().success();
    let html = std::fs::read_to_string(&page).unwrap();
    let cards = html.match_indices("<article class=\"card probe\">").count();
    assert_eq!(cards, 16, "{cards} probe cards");
    // The outlier's node is the first card; the other 24 are summarised in one sentence.
    let first_card = html.find("<article class=\"card probe\">").unwrap();
    let m39 = html[first_card..].find("m39").expect("m39's card");
    assert!(html[first_card..][..m39].matches("<article").count() == 1);
    assert!(
        html.contains("16 of 40 probes shown (those with an outlier, a warning or an error first); the other 24 are in the charts above, summarised."),
        "{html}"
    );
    // 80 GPUs on the chart: the 64 lowest drawn, outlier first, the distribution said.
    assert!(
        html.contains("the 64 lowest of 80 devices, outliers first"),
        "{html}"
    );
    assert!(
        html.contains("outlier: m39/cuda:1 d2d: 1600.0 GB/s, 20% below"),
        "{html}"
    );
}
