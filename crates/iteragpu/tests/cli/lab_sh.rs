//! `scripts/lab.sh`, the README's first command after the build: a run folder of its own, even
//! when folders of the same second already exist, holding the estimate and the price it printed.

use std::path::Path;
use std::process::Command;

#[test]
fn lab_sh_claims_a_new_folder_and_keeps_estimate_and_price() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A copy of the script in a scratch tree: it works relative to its own folder.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("scripts")).unwrap();
    std::fs::copy(
        repo.join("scripts/lab.sh"),
        root.path().join("scripts/lab.sh"),
    )
    .unwrap();
    // Folders for this second and the next ten already hold someone's results.
    let runs = root.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let now = std::time::SystemTime::now();
    let mut taken = Vec::new();
    for s in 0..10 {
        let t = now + std::time::Duration::from_secs(s);
        let stamp = humantime::format_rfc3339_seconds(t)
            .to_string()
            .replace(['-', ':'], "");
        let dir = runs.join(&stamp);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("mesures.json"), "precious").unwrap();
        taken.push(dir);
    }
    let out = Command::new("bash")
        .arg(root.path().join("scripts/lab.sh"))
        .arg("cpu")
        .env("ITERAGPU", env!("CARGO_BIN_EXE_iteragpu"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for dir in &taken {
        assert_eq!(
            std::fs::read_to_string(dir.join("mesures.json")).unwrap(),
            "precious"
        );
        assert_eq!(
            std::fs::read_dir(dir).unwrap().count(),
            1,
            "{}",
            dir.display()
        );
    }
    let made: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !taken.contains(p))
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    let name = made[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.contains('-'), "a suffixed folder, not {name}");
    for file in [
        "environment.json",
        "estimate.json",
        "estimate.txt",
        "mesures-petit-essai.json",
        "mesures.json",
        "report.html",
        "price.json",
        "price.txt",
    ] {
        assert!(made[0].join(file).is_file(), "{file} missing in {name}");
    }
    let estimate: serde_json::Value =
        serde_json::from_slice(&std::fs::read(made[0].join("estimate.json")).unwrap()).unwrap();
    assert_eq!(estimate["weight_bytes"], 14_000_000_000u64);
    let price: serde_json::Value =
        serde_json::from_slice(&std::fs::read(made[0].join("price.json")).unwrap()).unwrap();
    assert_eq!(
        (&price["gpu"], &price["lots"]),
        (&serde_json::json!("b200"), &serde_json::json!(2))
    );
    assert!(stdout.contains(&format!("== results go to runs/{name}/")));
}
