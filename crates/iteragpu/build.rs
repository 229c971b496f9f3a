//! Records the source commit for `ToolInfo` (`ITERAGPU_COMMIT`), when git and a checkout are
//! there; a build from a tarball simply has no commit.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ITERAGPU_COMMIT");
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()));
    if let Some(commit) = commit {
        println!("cargo:rustc-env=ITERAGPU_COMMIT={commit}");
    }
    // Rebuild when HEAD moves, where the checkout has the files.
    if let Ok(out) = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .output()
        && out.status.success()
        && let Ok(dir) = String::from_utf8(out.stdout)
    {
        let dir = dir.trim();
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/refs/heads");
    }
}
