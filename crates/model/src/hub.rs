//! A model named by its Hub id (`org/name`) found offline in the local Hugging Face cache, the
//! way `transformers` and `huggingface_hub` find it with `HF_HUB_OFFLINE=1`: nothing is
//! downloaded.
//!
//! The cache folder is `HF_HUB_CACHE` when set, else `HF_HOME/hub`, else
//! `XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; a model lives in
//! `models--org--name/snapshots/<revision>`, the revision being the commit `refs/main` names
//! (or the only snapshot when there is no `refs/main`).

use std::path::{Path, PathBuf};

/// Why a Hub id did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    /// Not in the cache: where it looked.
    #[error(
        "`{id}` is not a path and is not in the local Hugging Face cache (looked in {}); \
         nothing is downloaded: fetch it first (`hf download {id} config.json`) or pass a \
         folder",
        looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotCached {
        /// The id as given.
        id: String,
        /// The folders looked at.
        looked: Vec<PathBuf>,
    },
    /// Several snapshots and no `refs/main` to choose among them.
    #[error(
        "`{id}` has {count} snapshots in {} and no refs/main naming one; pass the snapshot \
         folder itself",
        folder.display()
    )]
    Ambiguous {
        /// The id.
        id: String,
        /// Its snapshots folder.
        folder: PathBuf,
        /// How many snapshots.
        count: usize,
    },
}

/// Whether `text` reads as a Hub id: `org/name`, both parts of letters, digits, `-`, `_`, `.`,
/// neither starting with a dot.
pub fn is_hub_id(text: &str) -> bool {
    let mut parts = text.split('/');
    let (Some(org), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    };
    ok(org) && ok(name)
}

/// The cache folders to look in, from the environment (`get` reads a variable), first first.
pub fn cache_dirs(get: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let set = |k: &str| get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = set("HF_HUB_CACHE") {
        return vec![p];
    }
    if let Some(p) = set("HF_HOME") {
        return vec![p.join("hub")];
    }
    if let Some(p) = set("XDG_CACHE_HOME") {
        return vec![p.join("huggingface").join("hub")];
    }
    set("HOME")
        .map(|h| vec![h.join(".cache").join("huggingface").join("hub")])
        .unwrap_or_default()
}

/// The snapshot folder of `id` in the first of `dirs` that holds it.
pub fn resolve(id: &str, dirs: &[PathBuf]) -> Result<PathBuf, HubError> {
    let folder = format!("models--{}", id.replace('/', "--"));
    let mut looked = Vec::new();
    for dir in dirs {
        let repo = dir.join(&folder);
        looked.push(repo.clone());
        let snapshots = repo.join("snapshots");
        if !snapshots.is_dir() {
            continue;
        }
        if let Ok(rev) = std::fs::read_to_string(repo.join("refs").join("main")) {
            let snap = snapshots.join(rev.trim());
            if !rev.trim().is_empty() && !rev.contains('/') && snap.is_dir() {
                return Ok(snap);
            }
        }
        let all: Vec<PathBuf> = std::fs::read_dir(&snapshots)
            .map(|r| {
                r.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        match all.as_slice() {
            [one] => return Ok(one.clone()),
            [] => continue,
            _ => {
                return Err(HubError::Ambiguous {
                    id: id.to_string(),
                    folder: snapshots,
                    count: all.len(),
                });
            }
        }
    }
    Err(HubError::NotCached {
        id: id.to_string(),
        looked,
    })
}

/// `path` itself when it exists or is not a Hub id, else its snapshot in the cache the
/// environment names.
pub fn locate(path: &Path) -> Result<PathBuf, HubError> {
    let text = path.to_string_lossy();
    if path.exists() || !is_hub_id(&text) {
        return Ok(path.to_path_buf());
    }
    let dirs = cache_dirs(&|k| std::env::var(k).ok());
    resolve(&text, &dirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_paths() {
        assert!(is_hub_id("meta-llama/Llama-3.1-8B"));
        assert!(is_hub_id("Qwen/Qwen2.5-7B-Instruct"));
        assert!(!is_hub_id("data/models/llama-3.1-8b"));
        assert!(!is_hub_id("./x"));
        assert!(!is_hub_id("../x"));
        assert!(!is_hub_id("/abs"));
        assert!(!is_hub_id("x"));
    }

    #[test]
    fn the_environment_orders_the_cache() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let all = env(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h"), ("HOME", "/u")]);
        assert_eq!(cache_dirs(&all), vec![PathBuf::from("/c")]);
        let home = env(&[("HF_HOME", "/h"), ("HOME", "/u")]);
        assert_eq!(cache_dirs(&home), vec![PathBuf::from("/h/hub")]);
        let user = env(&[("HOME", "/u")]);
        assert_eq!(
            cache_dirs(&user),
            vec![PathBuf::from("/u/.cache/huggingface/hub")]
        );
    }

    #[test]
    fn refs_main_names_the_snapshot_and_a_miss_says_where() {
        let dir = tempfile::tempdir().unwrap();
        let hub = dir.path().to_path_buf();
        let miss = resolve("org/name", std::slice::from_ref(&hub)).unwrap_err();
        assert!(miss.to_string().contains("models--org--name"), "{miss}");
        let repo = hub.join("models--org--name");
        std::fs::create_dir_all(repo.join("snapshots/aaa")).unwrap();
        std::fs::create_dir_all(repo.join("snapshots/bbb")).unwrap();
        assert!(matches!(
            resolve("org/name", std::slice::from_ref(&hub)),
            Err(HubError::Ambiguous { count: 2, .. })
        ));
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "bbb\n").unwrap();
        assert_eq!(
            resolve("org/name", std::slice::from_ref(&hub)).unwrap(),
            repo.join("snapshots/bbb")
        );
    }
}
