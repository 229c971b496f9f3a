//! Checking a kit — a zip, a `.tar.gz` or an extracted folder — against its own `MANIFEST.json`.
//!
//! Nothing is ever written to disk: zip and tar members stream from the decompressor into a
//! hasher, and a folder is walked without following links. Two verdicts are kept apart:
//! *complete* (every listed member is there, nothing else is, no path could escape the folder)
//! and *valid* (every member has the listed size and, sizes first, the listed SHA-256).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::hash::HashingSink;
use crate::manifest::{MANIFEST_NAME, Manifest};

/// The largest manifest read (a real one is a few KiB): a bound against a hostile archive.
const MANIFEST_LIMIT: u64 = 16 << 20;

/// What was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A zip archive, read in place.
    Zip,
    /// A gzip-compressed tar archive, read in one pass.
    TarGz,
    /// An extracted folder.
    Folder,
}

/// One thing wrong with a kit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    /// No `MANIFEST.json` where one was looked for: nothing else can be judged.
    ManifestMissing {
        /// Where it was looked for.
        looked_for: String,
    },
    /// The manifest is there but cannot be used.
    ManifestInvalid {
        /// Why.
        reason: String,
    },
    /// Listed in the manifest, absent from the kit.
    Missing {
        /// Path inside the top folder.
        path: String,
    },
    /// Present in the kit, not listed in the manifest.
    Unexpected {
        /// Path as found (inside the top folder when it is under it).
        path: String,
    },
    /// The same name appears more than once in the archive.
    Duplicate {
        /// The name, or a note when the zip reader only says that there are duplicates.
        path: String,
    },
    /// A name that could write outside the folder if extracted (`..`, an absolute path, a link),
    /// or to another path than it says (a `.` component, an empty segment, a backslash).
    UnsafePath {
        /// The name as stored.
        path: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// The member's size differs from the manifest's.
    SizeMismatch {
        /// Path inside the top folder.
        path: String,
        /// Size in the manifest.
        expected: u64,
        /// Size found.
        actual: u64,
    },
    /// The member's SHA-256 differs from the manifest's.
    HashMismatch {
        /// Path inside the top folder.
        path: String,
        /// SHA-256 in the manifest.
        expected: String,
        /// SHA-256 of the bytes found.
        actual: String,
    },
    /// The member could not be read (a corrupt zip entry fails its CRC here).
    Unreadable {
        /// Path inside the top folder.
        path: String,
        /// The reader's error.
        reason: String,
    },
    /// The archive's layout is not what it claims: in a zip, a local header that differs from
    /// its central entry, or bytes before, between or after the entries (see
    /// [`crate::structure`]); in a tar.gz, data after the archive's end or a cut or corrupt
    /// stream.
    Structure {
        /// What is wrong.
        reason: String,
    },
    /// Two names that are one file once extracted: extractors drop `.` components and empty
    /// segments (`a/./b`, `a//b`), Windows reads `\` as `/`, drops trailing dots and spaces and
    /// ignores case, and a filesystem may normalise Unicode. One would overwrite the other.
    Collision {
        /// One name.
        path: String,
        /// The other.
        other: String,
    },
}

impl Failure {
    /// True for failures of completeness (what is there), false for failures of validity (what
    /// the bytes are).
    pub fn is_completeness(&self) -> bool {
        matches!(
            self,
            Failure::ManifestMissing { .. }
                | Failure::ManifestInvalid { .. }
                | Failure::Missing { .. }
                | Failure::Unexpected { .. }
                | Failure::Duplicate { .. }
                | Failure::UnsafePath { .. }
                | Failure::Structure { .. }
                | Failure::Collision { .. }
        )
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::ManifestMissing { looked_for } => write!(
                f,
                "missing manifest: no {looked_for}, so nothing else can be checked"
            ),
            Failure::ManifestInvalid { reason } => write!(f, "invalid manifest: {reason}"),
            Failure::Missing { path } => {
                write!(f, "missing: {path} is listed in {MANIFEST_NAME} but absent")
            }
            Failure::Unexpected { path } => {
                write!(f, "unexpected: {path} is not listed in {MANIFEST_NAME}")
            }
            Failure::Duplicate { path } => write!(f, "duplicate: {path}"),
            Failure::UnsafePath { path, reason } => write!(f, "unsafe path: {path} ({reason})"),
            Failure::SizeMismatch {
                path,
                expected,
                actual,
            } => write!(
                f,
                "size mismatch: {path} is {actual} bytes, {MANIFEST_NAME} says {expected}"
            ),
            Failure::HashMismatch {
                path,
                expected,
                actual,
            } => write!(
                f,
                "hash mismatch: {path} has SHA-256 {actual}, {MANIFEST_NAME} says {expected}"
            ),
            Failure::Unreadable { path, reason } => write!(f, "unreadable: {path}: {reason}"),
            Failure::Structure { reason } => write!(f, "archive structure: {reason}"),
            Failure::Collision { path, other } if fold(path) == fold(other) => write!(
                f,
                "name collision: {path} and {other} are one name on a filesystem that ignores \
                 case or normalises Unicode"
            ),
            Failure::Collision { path, other } => write!(
                f,
                "name collision: {path} and {other} are extracted to one file (extractors drop \
                 `.` components and empty segments; Windows also reads `\\` as `/`, drops \
                 trailing dots and spaces, replaces the characters it forbids and ignores case), \
                 so one would overwrite the other"
            ),
        }
    }
}

/// One failure with its sentence, as `--json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The failure.
    #[serde(flatten)]
    pub failure: Failure,
    /// `completeness` or `validity`.
    pub verdict: &'static str,
    /// The failure in one sentence.
    pub message: String,
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The path given.
    pub path: String,
    /// Zip or folder.
    pub source: Source,
    /// The top folder the manifest was found in (inside the zip, or on disk).
    pub root: Option<String>,
    /// Nothing missing, nothing unexpected, no unsafe path, a usable manifest.
    pub complete: bool,
    /// Every member present has the listed size and SHA-256 (false when no manifest could be
    /// read: nothing could be shown valid).
    pub valid: bool,
    /// Members the manifest lists.
    pub listed: usize,
    /// Members whose size matched.
    pub sizes_matched: usize,
    /// Members whose SHA-256 matched.
    pub hashes_matched: usize,
    /// Everything wrong, completeness first, each in its own words.
    pub failures: Vec<Finding>,
}

impl Report {
    fn new(path: &Path, source: Source) -> Report {
        Report {
            path: path.display().to_string(),
            source,
            root: None,
            complete: false,
            valid: false,
            listed: 0,
            sizes_matched: 0,
            hashes_matched: 0,
            failures: Vec::new(),
        }
    }

    fn fail(&mut self, failure: Failure) {
        self.failures.push(Finding {
            verdict: if failure.is_completeness() {
                "completeness"
            } else {
                "validity"
            },
            message: failure.to_string(),
            failure,
        });
    }

    fn conclude(mut self, manifest_usable: bool) -> Report {
        self.failures.sort_by_key(|f| !f.failure.is_completeness());
        self.complete =
            manifest_usable && self.failures.iter().all(|f| !f.failure.is_completeness());
        self.valid = manifest_usable && self.failures.iter().all(|f| f.failure.is_completeness());
        self
    }

    /// True when the kit is complete and valid.
    pub fn ok(&self) -> bool {
        self.complete && self.valid
    }
}

/// A kit could not be opened at all.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The path does not exist or cannot be read.
    #[error("cannot read {}: {reason}", path.display())]
    Open {
        /// The path given.
        path: PathBuf,
        /// The OS error, once.
        reason: String,
        /// Its kind: a path that is not there is refused input (exit 2), not a broken kit.
        kind: std::io::ErrorKind,
    },
    /// A file that is not a zip archive (nor a gzip file).
    #[error("{} is not a readable zip archive ({reason}); give a .zip, a .tar.gz or an extracted folder", path.display())]
    NotZip {
        /// The path given.
        path: PathBuf,
        /// The zip reader's error.
        reason: String,
    },
    /// A gzip file whose first tar header cannot be read.
    #[error("{} is not a readable tar.gz archive ({reason}); give a .zip, a .tar.gz or an extracted folder", path.display())]
    NotTarGz {
        /// The path given.
        path: PathBuf,
        /// The gzip or tar reader's error.
        reason: String,
    },
}

/// Why a stored name is unsafe to extract, if it is.
pub fn unsafe_reason(name: &str) -> Option<&'static str> {
    let bytes = name.as_bytes();
    if name.contains('\0') {
        Some("a NUL byte in the name")
    } else if name.starts_with('/') || name.starts_with('\\') {
        Some("an absolute path")
    } else if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        Some("an absolute path with a drive letter")
    } else if name.split(['/', '\\']).any(|c| c == "..") {
        Some("a `..` component that climbs out of the folder")
    } else {
        None
    }
}

/// Why a stored name is not the path an extractor writes it to, if it is not: a `.` component or
/// an empty segment (`a/./b`, `a//b`: unzip, bsdtar and Python's zipfile all write `a/b`), or a
/// backslash (a separator on Windows, and to unzip in an archive made there). The kit writer
/// writes none of these; a folder entry's one trailing `/` is allowed.
pub fn non_canonical_reason(name: &str) -> Option<&'static str> {
    let path = name.strip_suffix('/').unwrap_or(name);
    if path.contains('\\') {
        Some("a backslash, which some extractors read as a folder separator")
    } else if path.split('/').any(|c| c.is_empty() || c == ".") {
        Some("a `.` component or an empty segment, which extractors drop")
    } else {
        None
    }
}

/// A name with case folded and Unicode normalised (NFKC, which also covers macOS's NFD).
fn fold(name: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    name.nfkc()
        .collect::<String>()
        .to_lowercase()
        .nfkc()
        .collect()
}

/// The file a name is extracted to, by the most lenient extractor on the most lenient
/// filesystem: case and Unicode folded, `\` read as `/`, `.` components and empty segments
/// dropped, each component's trailing dots and spaces dropped and the characters Windows forbids
/// replaced by `_` (as Python's zipfile does there). Two names with one key are one file.
fn extracted_key(name: &str) -> String {
    fold(name)
        .split(['/', '\\'])
        .map(|c| c.trim_end_matches(['.', ' ']))
        .filter(|c| !c.is_empty())
        .map(|c| c.replace([':', '<', '>', '|', '"', '?', '*'], "_"))
        .collect::<Vec<_>>()
        .join("/")
}

/// Checks the kit at `path`: a zip archive, an extracted top folder, or a folder holding one.
pub fn verify(path: &Path) -> Result<Report, VerifyError> {
    let meta = std::fs::metadata(path).map_err(|e| VerifyError::Open {
        path: path.to_path_buf(),
        reason: lab_io::files::os_message(&e),
        kind: e.kind(),
    })?;
    if meta.is_dir() {
        return Ok(verify_folder(path));
    }
    // gzip's magic number: a .tar.gz whatever its name; anything else is read as a zip.
    let mut magic = [0u8; 2];
    let is_gzip = lab_io::files::open_input(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == [0x1f, 0x8b];
    if is_gzip {
        verify_tar_gz(path)
    } else {
        verify_zip(path)
    }
}

/// Where a member's bytes are.
enum Location {
    Zip(usize),
    Disk(PathBuf),
    /// A tar member, hashed as it streamed past: its SHA-256 and byte count, or why it could
    /// not be read.
    Hashed(Result<(String, u64), String>),
}

/// A member found in the kit.
struct Found {
    size: u64,
    at: Location,
}

/// The manifest parsed and checked for sense; failures go to the report.
fn parse_manifest(bytes: &[u8], report: &mut Report) -> Option<Manifest> {
    let manifest: Manifest = match serde_json::from_slice(bytes) {
        Ok(m) => m,
        Err(e) => {
            report.fail(Failure::ManifestInvalid {
                reason: format!("{MANIFEST_NAME} is not a kit manifest: {e}"),
            });
            return None;
        }
    };
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut total = 0u64;
    for entry in &manifest.files {
        total = total.saturating_add(entry.size);
        if !seen.insert(entry.path.as_str()) {
            problems.push(format!("{} is listed twice", entry.path));
        }
        match &entry.sha256 {
            None if entry.path != MANIFEST_NAME => {
                problems.push(format!("{} has no SHA-256", entry.path));
            }
            Some(h) if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                problems.push(format!("{} has a malformed SHA-256 {h:?}", entry.path));
            }
            _ => {}
        }
    }
    if !seen.contains(MANIFEST_NAME) {
        problems.push(format!("it does not list itself ({MANIFEST_NAME})"));
    }
    if manifest.totals.files != manifest.files.len() as u64 || manifest.totals.bytes != total {
        problems.push(format!(
            "its totals ({} files, {} bytes) disagree with its list ({} files, {} bytes)",
            manifest.totals.files,
            manifest.totals.bytes,
            manifest.files.len(),
            total
        ));
    }
    if problems.is_empty() {
        Some(manifest)
    } else {
        report.fail(Failure::ManifestInvalid {
            reason: problems.join("; "),
        });
        None
    }
}

/// Compares what was found with what the manifest lists. `read` gives a member's SHA-256 and
/// byte count.
fn compare(
    manifest: &Manifest,
    manifest_len: u64,
    found: &BTreeMap<String, Found>,
    folders: &BTreeSet<String>,
    report: &mut Report,
    mut read: impl FnMut(&Location) -> std::io::Result<(String, u64)>,
) {
    report.listed = manifest.files.len();
    let mut listed_folders = BTreeSet::new();
    for entry in &manifest.files {
        if let Some(reason) = unsafe_reason(&entry.path) {
            report.fail(Failure::UnsafePath {
                path: entry.path.clone(),
                reason: format!("{reason}, listed in {MANIFEST_NAME}"),
            });
            continue;
        }
        let mut prefix = String::new();
        for part in entry
            .path
            .split('/')
            .rev()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            prefix.push_str(part);
            listed_folders.insert(prefix.clone());
            prefix.push('/');
        }
        let Some(member) = found.get(&entry.path) else {
            report.fail(Failure::Missing {
                path: entry.path.clone(),
            });
            continue;
        };
        let actual_size = if entry.path == MANIFEST_NAME {
            manifest_len
        } else {
            member.size
        };
        if actual_size != entry.size {
            report.fail(Failure::SizeMismatch {
                path: entry.path.clone(),
                expected: entry.size,
                actual: actual_size,
            });
            continue;
        }
        let Some(expected) = &entry.sha256 else {
            report.sizes_matched += 1;
            continue;
        };
        let (actual, bytes) = match read(&member.at) {
            Ok(hashed) => hashed,
            Err(e) => {
                report.fail(Failure::Unreadable {
                    path: entry.path.clone(),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        if bytes != entry.size {
            report.fail(Failure::SizeMismatch {
                path: entry.path.clone(),
                expected: entry.size,
                actual: bytes,
            });
            continue;
        }
        report.sizes_matched += 1;
        if actual.eq_ignore_ascii_case(expected) {
            report.hashes_matched += 1;
        } else {
            report.fail(Failure::HashMismatch {
                path: entry.path.clone(),
                expected: expected.clone(),
                actual,
            });
        }
    }
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    for path in found.keys() {
        if !listed.contains(path.as_str()) {
            report.fail(Failure::Unexpected { path: path.clone() });
        }
    }
    for folder in folders {
        if !listed_folders.contains(folder) {
            report.fail(Failure::Unexpected {
                path: format!("{folder}/"),
            });
        }
    }
}

/// Names that would be one file once extracted (see [`extracted_key`]): each pair once, in
/// sorted order.
fn collisions(names: impl IntoIterator<Item = String>, report: &mut Report) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut sorted: Vec<String> = names.into_iter().collect();
    sorted.sort();
    for name in sorted {
        let key = extracted_key(&name);
        match seen.get(&key) {
            Some(other) => report.fail(Failure::Collision {
                path: name.clone(),
                other: other.clone(),
            }),
            None => {
                seen.insert(key, name);
            }
        }
    }
}

fn verify_zip(path: &Path) -> Result<Report, VerifyError> {
    let open = || {
        lab_io::files::open_input(path).map_err(|e| VerifyError::Open {
            path: path.to_path_buf(),
            reason: lab_io::files::os_message(&e),
            kind: e.kind(),
        })
    };
    // The layout first, by this tool's own reading: bounded, and before the zip library reads
    // (and holds) every central entry.
    let mut raw = open()?;
    let len = raw
        .metadata()
        .map_err(|e| VerifyError::Open {
            path: path.to_path_buf(),
            reason: lab_io::files::os_message(&e),
            kind: e.kind(),
        })?
        .len();
    let layout = crate::structure::layout(&mut raw, len).map_err(|reason| VerifyError::NotZip {
        path: path.to_path_buf(),
        reason,
    })?;
    let file = open()?;
    let mut archive =
        zip::ZipArchive::new(BufReader::new(file)).map_err(|e| VerifyError::NotZip {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let mut report = Report::new(path, Source::Zip);
    for reason in layout.problems {
        report.fail(Failure::Structure { reason });
    }
    if archive.has_duplicate_names() {
        report.fail(Failure::Duplicate {
            path: "the archive stores at least one name twice".to_string(),
        });
    }

    // Names first, without decompressing anything.
    struct Raw {
        index: usize,
        name: String,
        dir: bool,
        size: u64,
    }
    let mut raws = Vec::new();
    for index in 0..archive.len() {
        let entry = match archive.by_index_raw(index) {
            Ok(e) => e,
            Err(e) => {
                report.fail(Failure::Unreadable {
                    path: format!("entry #{index}"),
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        if let Some(reason) = unsafe_reason(&name) {
            report.fail(Failure::UnsafePath {
                path: name,
                reason: reason.to_string(),
            });
            continue;
        }
        if entry.is_symlink() {
            report.fail(Failure::UnsafePath {
                path: name,
                reason: "a symbolic link".to_string(),
            });
            continue;
        }
        // Refused, but still compared: the name it collides with is named too.
        if let Some(reason) = non_canonical_reason(&name) {
            report.fail(Failure::UnsafePath {
                path: name.clone(),
                reason: reason.to_string(),
            });
        }
        raws.push(Raw {
            index,
            dir: entry.is_dir(),
            size: entry.size(),
            name,
        });
    }

    // The top folder is the one holding MANIFEST.json (or none, for a flat zip).
    let files = raws.iter().filter(|r| !r.dir).map(|r| r.name.as_str());
    let Some(prefix) = manifest_prefix(files) else {
        report.fail(Failure::ManifestMissing {
            looked_for: format!("TOP/{MANIFEST_NAME} in the archive"),
        });
        return Ok(report.conclude(false));
    };
    report.root = Some(prefix.clone());

    let mut found = BTreeMap::new();
    let mut folders = BTreeSet::new();
    for raw in &raws {
        let Some(rel) = raw.name.strip_prefix(&prefix) else {
            report.fail(Failure::Unexpected {
                path: raw.name.clone(),
            });
            continue;
        };
        if raw.dir {
            let rel = rel.trim_end_matches('/');
            if !rel.is_empty() {
                folders.insert(rel.to_string());
            }
            continue;
        }
        let previous = found.insert(
            rel.to_string(),
            Found {
                size: raw.size,
                at: Location::Zip(raw.index),
            },
        );
        if previous.is_some() {
            report.fail(Failure::Duplicate {
                path: rel.to_string(),
            });
        }
    }

    collisions(
        found.keys().cloned().chain(folders.iter().cloned()),
        &mut report,
    );
    let manifest_bytes = match found.get(MANIFEST_NAME).map(|f| &f.at) {
        Some(Location::Zip(index)) => {
            let mut bytes = Vec::new();
            let read = archive.by_index(*index).and_then(|entry| {
                entry
                    .take(MANIFEST_LIMIT)
                    .read_to_end(&mut bytes)
                    .map_err(zip::result::ZipError::Io)
            });
            match read {
                Ok(_) => bytes,
                Err(e) => {
                    report.fail(Failure::ManifestInvalid {
                        reason: format!("{MANIFEST_NAME} cannot be read: {e}"),
                    });
                    return Ok(report.conclude(false));
                }
            }
        }
        _ => Vec::new(),
    };
    let Some(manifest) = parse_manifest(&manifest_bytes, &mut report) else {
        return Ok(report.conclude(false));
    };
    compare(
        &manifest,
        manifest_bytes.len() as u64,
        &found,
        &folders,
        &mut report,
        |at| match at {
            Location::Zip(index) => {
                let mut entry = archive.by_index(*index).map_err(std::io::Error::other)?;
                let mut sink = HashingSink::default();
                std::io::copy(&mut entry, &mut sink)?;
                Ok(sink.finish())
            }
            _ => Err(std::io::Error::other("not a zip member")),
        },
    );
    Ok(report.conclude(true))
}

/// A `.tar.gz`, read in one pass through a real tar reader: every name is screened as a zip's
/// are (unsafe, non-canonical, duplicate, colliding), links and special files are refused, every
/// regular member is hashed as it streams past and the manifest kept (bounded); then the gzip
/// stream is read to its end, so its CRC is checked and nothing can hide after the archive.
fn verify_tar_gz(path: &Path) -> Result<Report, VerifyError> {
    let file = lab_io::files::open_input(path).map_err(|e| VerifyError::Open {
        path: path.to_path_buf(),
        reason: lab_io::files::os_message(&e),
        kind: e.kind(),
    })?;
    let mut report = Report::new(path, Source::TarGz);
    let not_tar = |reason: String| VerifyError::NotTarGz {
        path: path.to_path_buf(),
        reason,
    };
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(file)));
    let entries = archive.entries().map_err(|e| not_tar(e.to_string()))?;

    struct Member {
        name: String,
        dir: bool,
        size: u64,
        hashed: Result<(String, u64), String>,
    }
    let mut members = Vec::new();
    let mut manifest_bytes: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut broken = None;
    for (index, entry) in entries.enumerate() {
        let mut entry = match entry {
            Ok(e) => e,
            Err(e) if index == 0 => return Err(not_tar(e.to_string())),
            Err(e) => {
                broken = Some(e.to_string());
                break;
            }
        };
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if let Some(reason) = unsafe_reason(&name) {
            report.fail(Failure::UnsafePath {
                path: name,
                reason: reason.to_string(),
            });
            continue;
        }
        let kind = entry.header().entry_type();
        let dir = match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => false,
            tar::EntryType::Directory => true,
            tar::EntryType::Symlink | tar::EntryType::Link => {
                report.fail(Failure::UnsafePath {
                    path: name,
                    reason: if kind == tar::EntryType::Link {
                        "a hard link".to_string()
                    } else {
                        "a symbolic link".to_string()
                    },
                });
                continue;
            }
            _ => {
                report.fail(Failure::Unexpected { path: name });
                continue;
            }
        };
        if let Some(reason) = non_canonical_reason(&name) {
            report.fail(Failure::UnsafePath {
                path: name.clone(),
                reason: reason.to_string(),
            });
        }
        let size = entry.size();
        let is_manifest = !dir
            && (name == MANIFEST_NAME
                || name
                    .split_once('/')
                    .is_some_and(|(_, rest)| rest == MANIFEST_NAME));
        let mut sink = HashingSink::default();
        let hashed = if is_manifest {
            let mut bytes = Vec::new();
            let read = (&mut entry).take(MANIFEST_LIMIT).read_to_end(&mut bytes);
            std::io::Write::write_all(&mut sink, &bytes).ok();
            manifest_bytes.entry(name.clone()).or_insert(bytes);
            read.map(|_| sink.finish())
        } else {
            std::io::copy(&mut entry, &mut sink).map(|_| sink.finish())
        };
        let failed = hashed.is_err();
        members.push(Member {
            name,
            dir,
            size,
            hashed: hashed.map_err(|e| e.to_string()),
        });
        if failed {
            break;
        }
    }
    if broken.is_none() {
        // The end-of-archive blocks and gzip's trailer: only zeros may follow the last member.
        let mut rest = archive.into_inner();
        let mut buf = [0u8; 8192];
        loop {
            match rest.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if buf[..n].iter().all(|&b| b == 0) => {}
                Ok(_) => {
                    report.fail(Failure::Structure {
                        reason: "data after the tar archive's end".to_string(),
                    });
                    break;
                }
                Err(e) => {
                    broken = Some(e.to_string());
                    break;
                }
            }
        }
    }
    if let Some(reason) = broken {
        report.fail(Failure::Structure {
            reason: format!("the archive is cut short or corrupt: {reason}"),
        });
    }

    let files = members.iter().filter(|m| !m.dir).map(|m| m.name.as_str());
    let Some(prefix) = manifest_prefix(files) else {
        report.fail(Failure::ManifestMissing {
            looked_for: format!("TOP/{MANIFEST_NAME} in the archive"),
        });
        return Ok(report.conclude(false));
    };
    report.root = Some(prefix.clone());
    let mut found = BTreeMap::new();
    let mut folders = BTreeSet::new();
    for member in members {
        let Some(rel) = member.name.strip_prefix(&prefix) else {
            report.fail(Failure::Unexpected { path: member.name });
            continue;
        };
        if member.dir {
            let rel = rel.trim_end_matches('/');
            if !rel.is_empty() && !folders.insert(rel.to_string()) {
                report.fail(Failure::Duplicate {
                    path: format!("{rel}/"),
                });
            }
            continue;
        }
        let previous = found.insert(
            rel.to_string(),
            Found {
                size: member.size,
                at: Location::Hashed(member.hashed),
            },
        );
        if previous.is_some() {
            report.fail(Failure::Duplicate {
                path: rel.to_string(),
            });
        }
    }
    collisions(
        found.keys().cloned().chain(folders.iter().cloned()),
        &mut report,
    );
    let Some(bytes) = manifest_bytes.remove(&format!("{prefix}{MANIFEST_NAME}")) else {
        report.fail(Failure::ManifestInvalid {
            reason: format!("{MANIFEST_NAME} cannot be read"),
        });
        return Ok(report.conclude(false));
    };
    let Some(manifest) = parse_manifest(&bytes, &mut report) else {
        return Ok(report.conclude(false));
    };
    compare(
        &manifest,
        bytes.len() as u64,
        &found,
        &folders,
        &mut report,
        |at| match at {
            Location::Hashed(hashed) => hashed.clone().map_err(std::io::Error::other),
            _ => Err(std::io::Error::other("not a tar member")),
        },
    );
    Ok(report.conclude(true))
}

fn verify_folder(path: &Path) -> Report {
    let mut report = Report::new(path, Source::Folder);
    let root = if path.join(MANIFEST_NAME).is_file() {
        Some(path.to_path_buf())
    } else {
        let mut candidates: Vec<PathBuf> = std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join(MANIFEST_NAME).is_file())
            .collect();
        candidates.sort();
        (candidates.len() == 1).then(|| candidates.remove(0))
    };
    let Some(root) = root else {
        report.fail(Failure::ManifestMissing {
            looked_for: format!(
                "{MANIFEST_NAME} in {} or in exactly one folder inside it",
                path.display()
            ),
        });
        return report.conclude(false);
    };
    report.root = Some(root.display().to_string());

    let mut found = BTreeMap::new();
    let mut folders = BTreeSet::new();
    walk(&root, "", &mut found, &mut folders, &mut report);
    collisions(
        found.keys().cloned().chain(folders.iter().cloned()),
        &mut report,
    );

    let manifest_bytes = match found.get(MANIFEST_NAME) {
        Some(Found {
            at: Location::Disk(p),
            ..
        }) => match lab_io::files::open_input(p).and_then(|f| {
            let mut bytes = Vec::new();
            f.take(MANIFEST_LIMIT)
                .read_to_end(&mut bytes)
                .map(|_| bytes)
        }) {
            Ok(bytes) => bytes,
            Err(e) => {
                report.fail(Failure::ManifestInvalid {
                    reason: format!("{MANIFEST_NAME} cannot be read: {e}"),
                });
                return report.conclude(false);
            }
        },
        // A link in the manifest's place was reported as unsafe by the walk.
        _ => return report.conclude(false),
    };
    let Some(manifest) = parse_manifest(&manifest_bytes, &mut report) else {
        return report.conclude(false);
    };
    compare(
        &manifest,
        manifest_bytes.len() as u64,
        &found,
        &folders,
        &mut report,
        |at| match at {
            Location::Disk(p) => {
                let mut file = lab_io::files::open_input(p)?;
                let mut sink = HashingSink::default();
                std::io::copy(&mut file, &mut sink)?;
                Ok(sink.finish())
            }
            _ => Err(std::io::Error::other("not a file on disk")),
        },
    );
    report.conclude(true)
}

/// Lists `dir` recursively without following links; `rel` is its path inside the kit.
fn walk(
    dir: &Path,
    rel: &str,
    found: &mut BTreeMap<String, Found>,
    folders: &mut BTreeSet<String>,
    report: &mut Report,
) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            report.fail(Failure::Unreadable {
                path: if rel.is_empty() {
                    ".".into()
                } else {
                    rel.into()
                },
                reason: e.to_string(),
            });
            return;
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let meta = match entry.path().symlink_metadata() {
            Ok(m) => m,
            Err(e) => {
                report.fail(Failure::Unreadable {
                    path: child,
                    reason: e.to_string(),
                });
                continue;
            }
        };
        let kind = meta.file_type();
        if let Some(reason) = non_canonical_reason(&child) {
            report.fail(Failure::UnsafePath {
                path: child.clone(),
                reason: reason.to_string(),
            });
        }
        if kind.is_symlink() {
            report.fail(Failure::UnsafePath {
                path: child,
                reason: "a symbolic link".to_string(),
            });
        } else if kind.is_dir() {
            folders.insert(child.clone());
            walk(&entry.path(), &child, found, folders, report);
        } else if kind.is_file() {
            found.insert(
                child,
                Found {
                    size: meta.len(),
                    at: Location::Disk(entry.path()),
                },
            );
        } else {
            report.fail(Failure::Unexpected { path: child });
        }
    }
}

/// The archive's top folder as a name prefix (`iteragpu-lab-v1/`, or empty for a flat
/// archive): the one holding MANIFEST.json, the first by name if several do; `None` when no
/// file of `names` is a manifest. Zip and tar.gz archives are laid out alike.
fn manifest_prefix<'a>(names: impl Iterator<Item = &'a str>) -> Option<String> {
    names
        .filter_map(|name| match name.split_once('/') {
            None if name == MANIFEST_NAME => Some(String::new()),
            Some((top, rest)) if rest == MANIFEST_NAME => Some(top.to_string()),
            _ => None,
        })
        .min()
        .map(|root| {
            if root.is_empty() {
                root
            } else {
                format!("{root}/")
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_names() {
        assert!(unsafe_reason("../x").unwrap().contains(".."));
        assert!(unsafe_reason("a/../../x").is_some());
        assert!(unsafe_reason("a\\..\\x").is_some());
        assert!(unsafe_reason("/etc/passwd").unwrap().contains("absolute"));
        assert!(unsafe_reason("C:/x").unwrap().contains("drive"));
        assert_eq!(unsafe_reason("a/b..c/d"), None);
        assert_eq!(unsafe_reason("iteragpu-lab-v1/README.md"), None);
    }

    #[test]
    fn a_built_kit_verifies_in_memory_and_on_disk() {
        let kit = crate::build(&crate::KitOptions {
            tool: crate::ManifestTool {
                commit: None,
                name: "iteragpu".into(),
                version: "0".into(),
            },
            binaries: Vec::new(),
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let zip_path = dir.path().join("k.zip");
        std::fs::write(&zip_path, &kit.bytes).unwrap();
        let report = verify(&zip_path).unwrap();
        assert!(report.ok(), "{report:#?}");
        assert_eq!(report.listed, kit.manifest.files.len());
        assert_eq!(report.hashes_matched, report.listed - 1);

        // Extract by hand (the verifier never does) and check the folder, then break it.
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(kit.bytes)).unwrap();
        archive.extract(dir.path().join("x")).unwrap();
        let top = dir.path().join("x");
        assert!(verify(&top).unwrap().ok());
        let readme = top.join("iteragpu-lab-v1/README.md");
        let mut bytes = std::fs::read(&readme).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&readme, bytes).unwrap();
        std::fs::write(top.join("iteragpu-lab-v1/extra.txt"), b"x").unwrap();
        let report = verify(&top).unwrap();
        assert!(!report.complete && !report.valid);
        let kinds: Vec<_> = report.failures.iter().map(|f| f.message.clone()).collect();
        assert!(
            kinds.iter().any(|m| m.starts_with("unexpected: extra.txt")),
            "{kinds:?}"
        );
        assert!(
            kinds
                .iter()
                .any(|m| m.starts_with("hash mismatch: README.md")),
            "{kinds:?}"
        );
    }

    /// The tar.gz holds the zip's members, names, bytes and permissions, and verifies; a tar.gz
    /// with a link, a changed member, bytes after its end or a cut stream does not.
    #[test]
    fn the_tar_gz_holds_the_zip_members_and_verifies() {
        let kit = crate::build(&crate::KitOptions {
            tool: crate::ManifestTool {
                commit: None,
                name: "iteragpu".into(),
                version: "0".into(),
            },
            binaries: Vec::new(),
        })
        .unwrap();
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(kit.bytes.clone())).unwrap();
        let mut from_zip = Vec::new();
        for i in 0..zip.len() {
            let mut f = zip.by_index(i).unwrap();
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes).unwrap();
            let mode = f.unix_mode().unwrap() & 0o7777;
            from_zip.push((f.name().unwrap().to_string(), mode, bytes));
        }
        let gz = flate2::read::GzDecoder::new(kit.tar_gz.as_slice());
        let mut tar = tar::Archive::new(gz);
        let mut from_tar = Vec::new();
        for entry in tar.entries().unwrap() {
            let mut e = entry.unwrap();
            let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let mode = e.header().mode().unwrap();
            assert_eq!(e.header().mtime().unwrap(), 315_532_800, "{name}");
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).unwrap();
            from_tar.push((name, mode, bytes));
        }
        assert_eq!(from_zip, from_tar);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.tar.gz");
        std::fs::write(&path, &kit.tar_gz).unwrap();
        let report = verify(&path).unwrap();
        assert!(report.ok(), "{report:#?}");
        assert_eq!(report.source, Source::TarGz);
        assert_eq!(report.hashes_matched, report.listed - 1);

        // Rewritten with one member changed, then with a link added.
        let rewrite = |name: &str, change: &dyn Fn(&str, &mut Vec<u8>), link: bool| {
            let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(kit.tar_gz.as_slice()));
            let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            let mut out = tar::Builder::new(gz);
            for entry in tar.entries().unwrap() {
                let mut e = entry.unwrap();
                let member = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                let mut header = e.header().clone();
                let mut bytes = Vec::new();
                e.read_to_end(&mut bytes).unwrap();
                change(&member, &mut bytes);
                header.set_size(bytes.len() as u64);
                out.append_data(&mut header, &member, bytes.as_slice())
                    .unwrap();
            }
            if link {
                let mut header = tar::Header::new_ustar();
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                out.append_link(&mut header, "iteragpu-lab-v1/passwd", "/etc/passwd")
                    .unwrap();
            }
            let path = dir.path().join(name);
            std::fs::write(&path, out.into_inner().unwrap().finish().unwrap()).unwrap();
            verify(&path).unwrap()
        };
        let flip = |member: &str, bytes: &mut Vec<u8>| {
            if member.ends_with("/README.md") {
                bytes[0] ^= 1;
            }
        };
        let report = rewrite("changed.tar.gz", &flip, false);
        assert!(report.complete && !report.valid, "{report:#?}");
        assert!(
            report.failures[0]
                .message
                .starts_with("hash mismatch: README.md")
        );
        let report = rewrite("link.tar.gz", &|_: &str, _: &mut Vec<u8>| {}, true);
        assert!(!report.complete && report.valid, "{report:#?}");
        assert!(
            report.failures[0]
                .message
                .contains("iteragpu-lab-v1/passwd (a symbolic link)"),
            "{report:#?}"
        );

        // Bytes after the archive's end, inside the gzip stream.
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(kit.tar_gz.as_slice())
            .read_to_end(&mut raw)
            .unwrap();
        raw.extend_from_slice(b"hidden");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).unwrap();
        let trailing = dir.path().join("trailing.tar.gz");
        std::fs::write(&trailing, gz.finish().unwrap()).unwrap();
        let report = verify(&trailing).unwrap();
        assert!(!report.complete, "{report:#?}");
        assert!(
            report
                .failures
                .iter()
                .any(|f| f.message == "archive structure: data after the tar archive's end"),
            "{report:#?}"
        );

        // A cut stream: never a pass.
        let cut = dir.path().join("cut.tar.gz");
        std::fs::write(&cut, &kit.tar_gz[..kit.tar_gz.len() - 40]).unwrap();
        match verify(&cut) {
            Ok(report) => assert!(!report.ok(), "{report:#?}"),
            Err(e) => assert!(e.to_string().contains("tar.gz"), "{e}"),
        }
    }

    /// The built kit's members with `extra` added (paths inside the top folder), under a
    /// manifest that lists them all with their sizes and hashes: only the names can be wrong.
    fn repacked(dir: &Path, extra: &[(&str, &[u8])]) -> PathBuf {
        use std::io::Write;
        let tool = crate::ManifestTool {
            commit: None,
            name: "iteragpu".into(),
            version: "0".into(),
        };
        let kit = crate::build(&crate::KitOptions {
            tool: tool.clone(),
            binaries: Vec::new(),
        })
        .unwrap();
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(kit.bytes)).unwrap();
        let mut content: Vec<(String, Vec<u8>)> = Vec::new();
        for i in 0..archive.len() {
            let mut entry = archive.by_index(i).unwrap();
            let name = entry.name().unwrap().to_string();
            let rel = name.strip_prefix(&format!("{}/", crate::ROOT)).unwrap();
            if entry.is_dir() || rel == MANIFEST_NAME {
                continue;
            }
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            content.push((rel.to_string(), bytes));
        }
        content.extend(extra.iter().map(|(p, b)| (p.to_string(), b.to_vec())));
        let listed: Vec<(String, &[u8])> = content
            .iter()
            .map(|(p, b)| (p.clone(), b.as_slice()))
            .collect();
        let (_, manifest) = Manifest::for_content(crate::ROOT, tool, &listed).unwrap();
        content.push((MANIFEST_NAME.to_string(), manifest.into_bytes()));
        let path = dir.join("repacked.zip");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        for (rel, bytes) in &content {
            zip.start_file(
                format!("{}/{rel}", crate::ROOT),
                zip::write::SimpleFileOptions::default(),
            )
            .unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        path
    }

    /// Issue 27: `a/./b`, `a//b` and `a\b` are extracted over `a/b` (unzip -o, bsdtar and
    /// Python's zipfile keep the last one's text); listed with its own hash, such a member made
    /// a kit that verified.
    #[test]
    fn names_that_extract_to_one_file_collide() {
        let dir = tempfile::tempdir().unwrap();
        for (extra, path, other) in [
            ("./README.md", "README.md", "./README.md"),
            (
                "docs//catalogue.md",
                "docs/catalogue.md",
                "docs//catalogue.md",
            ),
            (
                "docs\\catalogue.md",
                "docs\\catalogue.md",
                "docs/catalogue.md",
            ),
            ("data/./../data/x", "", ""),
        ] {
            let report = verify(&repacked(dir.path(), &[(extra, b"replaced\n")])).unwrap();
            assert!(!report.ok() && !report.complete, "{extra}: {report:#?}");
            let messages: Vec<&str> = report.failures.iter().map(|f| f.message.as_str()).collect();
            let stored = format!("{}/{extra}", crate::ROOT);
            if path.is_empty() {
                // `..` is refused first, as it was.
                assert_eq!(
                    report.failures[0].failure,
                    Failure::UnsafePath {
                        path: stored,
                        reason: "a `..` component that climbs out of the folder".into()
                    }
                );
                continue;
            }
            assert!(
                report.failures.iter().any(|f| f.failure
                    == Failure::Collision {
                        path: path.into(),
                        other: other.into()
                    }),
                "{messages:#?}"
            );
            assert!(
                messages.contains(
                    &format!(
                        "name collision: {path} and {other} are extracted to one file (extractors \
                     drop `.` components and empty segments; Windows also reads `\\` as `/`, \
                     drops trailing dots and spaces, replaces the characters it forbids and \
                     ignores case), so one would overwrite the other"
                    )
                    .as_str()
                ),
                "{messages:#?}"
            );
            // The name itself is refused too: the kit writer never writes one.
            assert!(
                messages
                    .iter()
                    .any(|m| m.starts_with(&format!("unsafe path: {stored} (a "))),
                "{messages:#?}"
            );
        }
        // Alone, such a name is still refused: the file it names is not the one written.
        let report = verify(&repacked(dir.path(), &[("docs/./notes.md", b"x")])).unwrap();
        assert!(!report.complete);
        assert_eq!(
            report.failures[0].message,
            "unsafe path: iteragpu-lab-v1/docs/./notes.md (a `.` component or an empty segment, \
             which extractors drop)"
        );
        assert_eq!(report.failures.len(), 1, "{:#?}", report.failures);
    }

    #[test]
    fn the_extracted_key_folds_what_extractors_fold() {
        for (a, b) in [
            ("README.md", "./README.md"),
            ("a/b", "a//b/"),
            ("a/b", "a\\b"),
            ("a/b", "a/./././b"),
            ("README.md", "readme.MD"),
            ("README.md", "README.md. "),
            ("a:b", "a_b"),
            ("caf\u{e9}", "cafe\u{301}"),
        ] {
            assert_eq!(extracted_key(a), extracted_key(b), "{a} {b}");
        }
        assert_ne!(extracted_key("a/b"), extracted_key("ab"));
        assert_ne!(extracted_key(".hidden"), extracted_key("hidden"));
        assert_eq!(non_canonical_reason("iteragpu-lab-v1/docs/"), None);
        assert_eq!(non_canonical_reason("iteragpu-lab-v1/.hidden"), None);
        for name in ["a/./b", "a//b", "a\\b", "./a", "a/.", "a//"] {
            assert!(non_canonical_reason(name).is_some(), "{name}");
        }
    }
}
