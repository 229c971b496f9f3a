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
    // Rebuild when HEAD moves, where the checkout has the files. In a linked worktree the branch
    // refs live in the common git folder, not beside the worktree's own HEAD; a path that does
    // not exist would make cargo rerun this script, and relink the binary, on every build.
    for (arg, files) in [
        ("--git-dir", &["HEAD"][..]),
        ("--git-common-dir", &["refs/heads", "packed-refs"][..]),
    ] {
        let Some(dir) = git_path(arg) else { continue };
        for file in files {
            let path = format!("{dir}/{file}");
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}

/// `git rev-parse ARG`, when git and a checkout are there.
fn git_path(arg: &str) -> Option<String> {
    let out = Command::new("git").args(["rev-parse", arg]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?;
    Some(dir.trim().to_string()).filter(|d| !d.is_empty())
}
