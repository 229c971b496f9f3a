//! `MANIFEST.json` and `SHA256SUMS`: what the kit says about itself.
//!
//! The manifest lists every member, itself included, with its size, and the SHA-256 of every
//! member except itself (a file cannot contain its own hash; its `sha256` is `null` and
//! `notes.manifest` says why). It also carries the hash of `SHA256SUMS`, so `SHA256SUMS` cannot
//! carry the manifest's: it lists every member except itself and the manifest, and says so in
//! `notes.sha256sums`.
//!
//! Keys are sorted at every level by construction: the structs' fields are declared in
//! alphabetical order and serde writes them in declaration order, whatever features serde_json
//! is built with. Text is pretty-printed with LF line endings and ends with one newline.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::KitError;

/// File name of the manifest inside the top folder.
pub const MANIFEST_NAME: &str = "MANIFEST.json";
/// File name of the checksum list inside the top folder.
pub const SHA256SUMS_NAME: &str = "SHA256SUMS";
/// Schema identifier of manifests.
pub const MANIFEST_SCHEMA: &str = "iteragpu.kit-manifest/1";

/// The whole manifest. Field order is alphabetical on purpose (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Every member, sorted by path.
    pub files: Vec<ManifestEntry>,
    /// Why the manifest and `SHA256SUMS` do not hash themselves, and how the bytes were fixed.
    pub notes: BTreeMap<String, String>,
    /// The single top folder.
    pub root: String,
    /// Always [`MANIFEST_SCHEMA`].
    pub schema: String,
    /// The tool that built the kit.
    pub tool: ManifestTool,
    /// Number of members and their total size.
    pub totals: Totals,
}

/// One member of the kit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Path inside the top folder, `/`-separated.
    pub path: String,
    /// Lower-case hex SHA-256; `null` only for the manifest itself.
    pub sha256: Option<String>,
    /// Size in bytes.
    pub size: u64,
}

/// The build that wrote the kit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestTool {
    /// Source commit, when the build knew it.
    pub commit: Option<String>,
    /// Always `iteragpu`.
    pub name: String,
    /// The tool's version.
    pub version: String,
}

/// Totals over [`Manifest::files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Total bytes of all members, the manifest included.
    pub bytes: u64,
    /// Number of members, the manifest included.
    pub files: u64,
}

impl Manifest {
    /// The manifest of `content` (path and bytes of every member but the manifest, `SHA256SUMS`
    /// included), with the manifest's own size filled in. That size depends on the number of
    /// digits it is written with, so it is found by iterating to the fixed point.
    pub fn for_content(
        root: &str,
        tool: ManifestTool,
        content: &[(String, &[u8])],
    ) -> Result<(Manifest, String), KitError> {
        let mut files: Vec<ManifestEntry> = content
            .iter()
            .map(|(path, bytes)| ManifestEntry {
                path: path.clone(),
                sha256: Some(crate::hash::sha256_hex(bytes)),
                size: bytes.len() as u64,
            })
            .collect();
        files.push(ManifestEntry {
            path: MANIFEST_NAME.to_string(),
            sha256: None,
            size: 0,
        });
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut manifest = Manifest {
            files,
            notes: notes(root),
            root: root.to_string(),
            schema: MANIFEST_SCHEMA.to_string(),
            tool,
            totals: Totals { bytes: 0, files: 0 },
        };
        const ROUNDS: usize = 8;
        for _ in 0..ROUNDS {
            let text = manifest.render()?;
            let size = text.len() as u64;
            if manifest.own_size() == Some(size) {
                return Ok((manifest, text));
            }
            manifest.set_own_size(size);
        }
        Err(KitError::ManifestSize(ROUNDS))
    }

    /// The manifest as written in the kit: pretty JSON, LF endings, one final newline.
    pub fn render(&self) -> Result<String, KitError> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        Ok(text)
    }

    /// The size the manifest records for itself.
    pub fn own_size(&self) -> Option<u64> {
        self.files
            .iter()
            .find(|f| f.path == MANIFEST_NAME)
            .map(|f| f.size)
    }

    fn set_own_size(&mut self, size: u64) {
        for f in &mut self.files {
            if f.path == MANIFEST_NAME {
                f.size = size;
            }
        }
        self.totals = Totals {
            bytes: self.files.iter().map(|f| f.size).sum(),
            files: self.files.len() as u64,
        };
    }
}

fn notes(root: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "manifest".to_string(),
            format!(
                "{MANIFEST_NAME} lists its own size but not its own SHA-256 (null): a file \
                 cannot contain its own hash."
            ),
        ),
        (
            "sha256sums".to_string(),
            format!(
                "{SHA256SUMS_NAME} lists every member except itself and {MANIFEST_NAME} (which \
                 holds its hash); inside {root}/ run: sha256sum -c --strict {SHA256SUMS_NAME}"
            ),
        ),
        (
            "reproducible".to_string(),
            "Members are sorted, dated 1980-01-01 00:00, 0644 (0755 for folders and the \
             binary), with no extra fields: the same inputs give the same bytes."
                .to_string(),
        ),
    ])
}

/// The `SHA256SUMS` text for `content` (every member but the manifest and itself), in the
/// format `sha256sum` writes and `sha256sum -c --strict` accepts: hash, two spaces, path, LF.
pub fn sha256sums(content: &[(String, &[u8])]) -> String {
    let mut lines: Vec<(&str, String)> = content
        .iter()
        .map(|(path, bytes)| (path.as_str(), crate::hash::sha256_hex(bytes)))
        .collect();
    lines.sort();
    lines
        .into_iter()
        .map(|(path, hash)| format!("{hash}  {path}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> ManifestTool {
        ManifestTool {
            commit: None,
            name: "iteragpu".into(),
            version: "0.1.0".into(),
        }
    }

    /// Keys of every object, in document order, read with a visitor that keeps the order the
    /// text has (a `serde_json::Value` may sort them, which would hide the fault).
    fn keys_in_order(text: &str) -> Vec<Vec<String>> {
        use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
        struct Collect<'a>(&'a mut Vec<Vec<String>>);
        impl<'de> serde::de::DeserializeSeed<'de> for Collect<'_> {
            type Value = ();
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
                d.deserialize_any(self)
            }
        }
        impl<'de> Visitor<'de> for Collect<'_> {
            type Value = ();
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("json")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
                let slot = self.0.len();
                self.0.push(Vec::new());
                while let Some(key) = map.next_key::<String>()? {
                    self.0[slot].push(key);
                    map.next_value_seed(Collect(self.0))?;
                }
                Ok(())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
                while seq.next_element_seed(Collect(self.0))?.is_some() {}
                Ok(())
            }
            fn visit_str<E>(self, _: &str) -> Result<(), E> {
                Ok(())
            }
            fn visit_u64<E>(self, _: u64) -> Result<(), E> {
                Ok(())
            }
            fn visit_unit<E>(self) -> Result<(), E> {
                Ok(())
            }
            fn visit_none<E>(self) -> Result<(), E> {
                Ok(())
            }
        }
        let mut out = Vec::new();
        let mut de = serde_json::Deserializer::from_str(text);
        serde::de::DeserializeSeed::deserialize(Collect(&mut out), &mut de).unwrap();
        out
    }

    #[test]
    fn manifest_states_its_own_size_and_sorted_keys() {
        let content = vec![
            ("b.txt".to_string(), &b"bb"[..]),
            ("a.txt".to_string(), &b"a"[..]),
        ];
        let (manifest, text) = Manifest::for_content("root", tool(), &content).unwrap();
        assert_eq!(manifest.own_size(), Some(text.len() as u64));
        assert_eq!(manifest.totals.files, 3);
        assert_eq!(manifest.totals.bytes, 3 + text.len() as u64);
        let paths: Vec<_> = manifest.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["MANIFEST.json", "a.txt", "b.txt"]);
        assert!(text.ends_with("}\n") && !text.contains('\r'));
        let objects = keys_in_order(&text);
        assert!(objects.len() > 3);
        for keys in objects {
            let mut sorted = keys.clone();
            sorted.sort();
            assert_eq!(keys, sorted);
        }
        let back: Manifest = serde_json::from_str(&text).unwrap();
        assert_eq!(back, manifest);
    }

    #[test]
    fn sha256sums_format() {
        let content = vec![
            ("z".to_string(), &b""[..]),
            ("a b".to_string(), &b"abc"[..]),
        ];
        assert_eq!(
            sha256sums(&content),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a b\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  z\n"
        );
    }
}
