//! Building the zip and the `.tar.gz`, each byte for byte the same for the same inputs, both
//! holding the same members under the same names, the same MANIFEST.json and SHA256SUMS.

use std::collections::BTreeMap;
use std::io::{Cursor, Write};
use std::path::Path;

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use crate::binary::Binary;
use crate::error::KitError;
use crate::manifest::{MANIFEST_NAME, Manifest, ManifestTool, SHA256SUMS_NAME, sha256sums};
use crate::members::{MEMBERS, ROOT};

/// Permissions of regular members.
const FILE_MODE: u32 = 0o644;
/// Permissions of folders and of the binary.
const EXEC_MODE: u32 = 0o755;
/// Deflate level: fixed, so the compressed bytes are too.
const LEVEL: i64 = 6;

/// What varies between kits.
#[derive(Debug, Clone)]
pub struct KitOptions {
    /// The tool recorded in the manifest.
    pub tool: ManifestTool,
    /// The executables to ship, each as `bin/<target>/iteragpu`; at most one per target.
    pub binaries: Vec<Binary>,
}

/// A built kit, in memory.
#[derive(Debug, Clone)]
pub struct Kit {
    /// The zip file's bytes.
    pub bytes: Vec<u8>,
    /// The same members as a gzip-compressed tar archive, for machines without `unzip` or
    /// `python3`: `tar -xzf` unpacks it with nothing but tar and gzip.
    pub tar_gz: Vec<u8>,
    /// Its manifest.
    pub manifest: Manifest,
}

enum Entry<'a> {
    Folder,
    File { bytes: &'a [u8], mode: u32 },
}

/// Builds the kit from the embedded members (and the binary, if given).
pub fn build(options: &KitOptions) -> Result<Kit, KitError> {
    let mut content: Vec<(String, &[u8], u32)> = MEMBERS
        .iter()
        .map(|m| (m.path.to_string(), m.bytes, FILE_MODE))
        .collect();
    for (i, binary) in options.binaries.iter().enumerate() {
        if options.binaries[..i]
            .iter()
            .any(|b| b.target == binary.target)
        {
            return Err(KitError::DuplicateTarget(binary.target.clone()));
        }
        content.push((binary.path(), binary.bytes.as_slice(), EXEC_MODE));
    }
    let hashed: Vec<(String, &[u8])> = content.iter().map(|(p, b, _)| (p.clone(), *b)).collect();
    let sums = sha256sums(&hashed);

    let mut listed = hashed;
    listed.push((SHA256SUMS_NAME.to_string(), sums.as_bytes()));
    let (manifest, manifest_text) = Manifest::for_content(ROOT, options.tool.clone(), &listed)?;

    let mut entries: BTreeMap<String, Entry<'_>> = BTreeMap::new();
    entries.insert(format!("{ROOT}/"), Entry::Folder);
    let files = content.iter().map(|(p, b, m)| (p.as_str(), *b, *m)).chain([
        (SHA256SUMS_NAME, sums.as_bytes(), FILE_MODE),
        (MANIFEST_NAME, manifest_text.as_bytes(), FILE_MODE),
    ]);
    for (path, bytes, mode) in files {
        let mut folder = String::new();
        for part in path
            .split('/')
            .rev()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            folder.push_str(part);
            folder.push('/');
            entries.insert(format!("{ROOT}/{folder}"), Entry::Folder);
        }
        entries.insert(format!("{ROOT}/{path}"), Entry::File { bytes, mode });
    }

    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let base = SimpleFileOptions::default()
        .last_modified_time(DateTime::default())
        .system(zip::System::Unix)
        .large_file(false);
    for (name, entry) in &entries {
        match entry {
            Entry::Folder => {
                zip.add_directory(
                    name.as_str(),
                    base.compression_method(CompressionMethod::Stored)
                        .unix_permissions(EXEC_MODE),
                )?;
            }
            Entry::File { bytes, mode } => {
                zip.start_file(
                    name.as_str(),
                    base.compression_method(CompressionMethod::Deflated)
                        .compression_level(Some(LEVEL))
                        .unix_permissions(*mode),
                )?;
                zip.write_all(bytes).map_err(zip::result::ZipError::Io)?;
            }
        }
    }
    let bytes = zip.finish()?.into_inner();
    let tar_gz = tar_gz(&entries).map_err(KitError::Tar)?;
    Ok(Kit {
        bytes,
        tar_gz,
        manifest,
    })
}

/// 1980-01-01 00:00 UTC, the zip's date (its format's earliest), as a Unix time.
const TAR_MTIME: u64 = 315_532_800;

/// The entries as a POSIX ustar archive (owner 0:0 with no names, the zip's dates and
/// permissions), gzip-compressed without a file name or time in its header.
fn tar_gz(entries: &BTreeMap<String, Entry<'_>>) -> std::io::Result<Vec<u8>> {
    let gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::new(LEVEL as u32));
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for (name, entry) in entries {
        let mut header = tar::Header::new_ustar();
        header.set_mtime(TAR_MTIME);
        header.set_uid(0);
        header.set_gid(0);
        let (kind, mode, bytes): (_, _, &[u8]) = match entry {
            Entry::Folder => (tar::EntryType::Directory, EXEC_MODE, &[]),
            Entry::File { bytes, mode } => (tar::EntryType::Regular, *mode, bytes),
        };
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(bytes.len() as u64);
        tar.append_data(&mut header, name, bytes)?;
    }
    tar.into_inner()?.finish()
}

/// Writes `bytes` to `path`, which must not exist yet. The bytes go to a temporary file in the
/// same folder first and are moved into place whole, so a failure never leaves half a kit.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<lab_io::files::Written, KitError> {
    lab_io::files::write_new(path, bytes).map_err(|e| match e {
        lab_io::files::OutputError::Exists(p) => KitError::OutputExists(p),
        other => KitError::Write(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn options(binaries: Vec<Binary>) -> KitOptions {
        KitOptions {
            tool: ManifestTool {
                commit: None,
                name: "iteragpu".into(),
                version: "0.1.0".into(),
            },
            binaries,
        }
    }

    fn arm(payload: &[u8]) -> Binary {
        let elf = crate::binary::test_elf(183, Some("/lib/ld-linux-aarch64.so.1"), payload);
        Binary::new("arm", elf).unwrap()
    }

    #[test]
    fn same_inputs_same_bytes() {
        let a = build(&options(vec![])).unwrap();
        let b = build(&options(vec![])).unwrap();
        assert_eq!(a.bytes, b.bytes);
        assert_eq!(a.tar_gz, b.tar_gz);
        let c = build(&options(vec![arm(b"one")])).unwrap();
        assert_ne!(a.bytes, c.bytes);
        let err = build(&options(vec![arm(b"one"), arm(b"two")])).unwrap_err();
        assert!(matches!(err, KitError::DuplicateTarget(_)), "{err}");
    }

    #[test]
    fn entries_are_sorted_dated_and_permissioned() {
        let shipped = arm(b"binary");
        let kit = build(&options(vec![shipped.clone()])).unwrap();
        let binary = "iteragpu-lab-v1/bin/aarch64-unknown-linux-gnu/iteragpu";
        let mut zip = zip::ZipArchive::new(Cursor::new(kit.bytes)).unwrap();
        let mut names = Vec::new();
        for i in 0..zip.len() {
            let mut f = zip.by_index(i).unwrap();
            let name = f.name().unwrap().to_string();
            assert!(name.starts_with("iteragpu-lab-v1/"), "{name}");
            let dt = f.last_modified().unwrap();
            assert_eq!((dt.year(), dt.month(), dt.day()), (1980, 1, 1));
            let mode = f.unix_mode().unwrap() & 0o7777;
            if f.is_dir() || name == binary {
                assert_eq!(mode, 0o755, "{name}");
            } else {
                assert_eq!(mode, 0o644, "{name}");
            }
            if name == binary {
                let mut bytes = Vec::new();
                f.read_to_end(&mut bytes).unwrap();
                assert_eq!(bytes, shipped.bytes);
            }
            names.push(name);
        }
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.contains(&"iteragpu-lab-v1/MANIFEST.json".to_string()));
        assert!(names.contains(&"iteragpu-lab-v1/SHA256SUMS".to_string()));
        assert!(names.contains(&"iteragpu-lab-v1/bin/".to_string()));
        assert!(names.contains(&"iteragpu-lab-v1/bin/aarch64-unknown-linux-gnu/".to_string()));
    }

    #[test]
    fn write_new_refuses_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.zip");
        let _ = write_new(&path, b"one").unwrap();
        let err = write_new(&path, b"two").unwrap_err();
        assert!(matches!(err, KitError::OutputExists(_)), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
    }
}
