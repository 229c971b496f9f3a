//! What goes in the kit: one table, so adding a file is one line.
//!
//! Every member is embedded in the binary at build time (`include_bytes!` of the repository's
//! file), so `iteragpu kit` works from an installed binary with no checkout around it. The path
//! inside the kit is the path in the repository.

/// The single top folder of the archive.
pub const ROOT: &str = "iteragpu-lab-v1";

/// Where binaries go inside [`ROOT`]: `bin/<target>/iteragpu`, one per target.
pub const BINARY_FOLDER: &str = "bin";

/// One embedded member.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    /// Path inside [`ROOT`], `/`-separated.
    pub path: &'static str,
    /// The file's bytes, as they were in the repository when the binary was built.
    pub bytes: &'static [u8],
}

/// A repository file, embedded, under the same path in the kit (or under another one).
macro_rules! repo_file {
    ($path:literal) => {
        repo_file!($path, $path)
    };
    ($kit_path:literal, $repo_path:literal) => {
        Member {
            path: $kit_path,
            bytes: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../", $repo_path)),
        }
    };
}

/// The documents and data of the kit (the manifest, `SHA256SUMS` and the optional binaries are
/// added when the archive is built). Order does not matter: the archive sorts its members.
/// The kit has a README of its own, `README-kit.md` in the repository: the repository's README
/// is about building and developing the tool, the kit's about using it where it lands.
pub const MEMBERS: &[Member] = &[
    repo_file!("README.md", "README-kit.md"),
    repo_file!("LICENSE"),
    repo_file!("docs/quality-protocol.md"),
    repo_file!("docs/catalogue.md"),
    repo_file!("docs/sources.md"),
    repo_file!("data/resultats-bruts.csv"),
    repo_file!("data/tarifs-forfaits.csv"),
    repo_file!("notebooks/iteragpu-lab.ipynb"),
    repo_file!("scripts/install.sh"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_unique_relative_and_clean() {
        let mut seen = std::collections::BTreeSet::new();
        for m in MEMBERS {
            assert!(seen.insert(m.path), "duplicate member {}", m.path);
            assert!(!m.path.starts_with('/') && !m.path.contains('\\'));
            assert!(
                m.path
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != "..")
            );
            assert_ne!(m.path.split('/').next(), Some(BINARY_FOLDER));
        }
    }

    #[test]
    fn the_empty_grid_is_only_a_header() {
        let grid = MEMBERS
            .iter()
            .find(|m| m.path == "data/resultats-bruts.csv")
            .expect("the results grid is a member");
        let text = std::str::from_utf8(grid.bytes).unwrap();
        assert_eq!(text.lines().count(), 1, "the shipped grid must be empty");
        assert!(text.starts_with("run_id,date_utc,"));
    }

    #[test]
    fn the_notebook_ships_without_outputs() {
        let nb = MEMBERS
            .iter()
            .find(|m| m.path == "notebooks/iteragpu-lab.ipynb")
            .expect("the notebook is a member");
        let doc: serde_json::Value = serde_json::from_slice(nb.bytes).unwrap();
        assert_eq!(doc["nbformat"], 4);
        let cells = doc["cells"].as_array().unwrap();
        assert!(cells.iter().any(|c| c["cell_type"] == "code"));
        for c in cells.iter().filter(|c| c["cell_type"] == "code") {
            assert_eq!(c["outputs"], serde_json::json!([]));
            assert!(c["execution_count"].is_null());
        }
    }
}
