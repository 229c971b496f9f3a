//! Files in and out, with the rules every command shares.
//!
//! **Results** are never lost or half-written. Before any work, [`check_new`] (or
//! [`check_replace`]) proves the file can be written: not there yet (not even as a dangling link),
//! its folder there and writable, its name not too long for that folder's filesystem (a probe
//! file of the same name length is created and removed, which asks the filesystem itself). Then
//! [`write_new`] / [`replace`] write a temporary file `.iteragpu-<pid>-XXXXXX.tmp` in the same
//! folder, flush it to disk, and only then move it into place, so the file appears whole or not at
//! all. The temporary file is removed on every error path the process survives; one left by a
//! killed process is removed by the next writer in that folder ([`clean_stale`]): its name carries
//! the writer's process id, and it is only removed when that process is gone and nobody holds the
//! lock every writer keeps on its temporary file.
//!
//! **Inputs** are opened by [`open_input`]: only a regular file (or a link to one) is read; a
//! FIFO, a device, a socket or a folder is refused with a sentence, and the open itself never
//! blocks (a FIFO with no writer would otherwise hang the command). They are read within a
//! stated limit ([`read_bounded`]): a file over it is refused with a sentence naming the file and
//! the limit, never read into memory whole.
//!
//! Stale temporary files are only ever opened when they are regular files, without following a
//! link and without blocking: anyone who can write in a shared folder can plant a FIFO or a link
//! under a temporary file's name, and a writer must still finish its own work.

use std::fs::{File, FileType, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tempfile::TempPath;

/// Every temporary file of this tool starts with this (then the process id and a dash).
pub const TMP_PREFIX: &str = ".iteragpu-";
/// ... and ends with this.
pub const TMP_SUFFIX: &str = ".tmp";

/// Why a result file cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The file is already there; results are never overwritten.
    #[error("{} already exists; results are never overwritten: choose a new file name", .0.display())]
    Exists(PathBuf),
    /// The name is a symbolic link to nothing: writing would create a file somewhere else.
    #[error("{} is a symbolic link to a file that does not exist; results are never written through a link: choose a new file name", .0.display())]
    DanglingLink(PathBuf),
    /// The folder the file should go in does not exist.
    #[error("the folder {} for {} does not exist; create it first", .folder.display(), .path.display())]
    NoFolder {
        /// The file asked for.
        path: PathBuf,
        /// Its missing folder.
        folder: PathBuf,
    },
    /// The path names a folder, or has no file name.
    #[error("{} is not a file name", .0.display())]
    NotAFile(PathBuf),
    /// The path names a FIFO, a device or a socket: results go to regular files only.
    #[error("{} is {kind}, not a regular file; results are only written to regular files: choose another name", .path.display())]
    NotRegular {
        /// The file asked for.
        path: PathBuf,
        /// What it is, in words.
        kind: &'static str,
    },
    /// Files cannot be created in the folder.
    #[error("cannot create files in the folder {} (for {}): {reason}; choose a folder you can write to", .folder.display(), .path.display())]
    NotWritable {
        /// The file asked for.
        path: PathBuf,
        /// Its folder.
        folder: PathBuf,
        /// The OS's reason.
        reason: String,
    },
    /// The file name is longer than the folder's filesystem accepts.
    #[error("the file name of {} ({bytes} bytes) is too long for the filesystem of its folder; choose a shorter name", .path.display())]
    NameTooLong {
        /// The file asked for.
        path: PathBuf,
        /// Length of its last component in bytes.
        bytes: usize,
    },
    /// The OS refused a step while writing.
    #[error("could not write {}: {reason}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error, once.
        reason: String,
    },
}

impl OutputError {
    /// True when the user fixes it by choosing another name or folder (exit 2); false for a
    /// failure while writing (exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(self, OutputError::Io { .. })
    }

    fn io(path: &Path, error: &std::io::Error) -> OutputError {
        OutputError::Io {
            path: path.to_path_buf(),
            reason: os_message(error),
        }
    }
}

/// The OS's words for an I/O error, once, without a path: `tempfile` and other layers wrap the
/// OS error with the (absolute) path of a temporary file, which says nothing to a user and would
/// repeat the message when the error chain is printed.
pub fn os_message(error: &std::io::Error) -> String {
    if let Some(code) = error.raw_os_error() {
        return std::io::Error::from_raw_os_error(code).to_string();
    }
    let inner = error
        .get_ref()
        .and_then(|e| e.source())
        .and_then(|s| s.downcast_ref::<std::io::Error>());
    match inner {
        Some(inner) => os_message(inner),
        // A layer that wraps the OS error in its own text (`... at path "..."`): its first part.
        None => {
            let text = error.to_string();
            match text.split_once(" at path ") {
                Some((first, _)) => first.to_string(),
                None => text,
            }
        }
    }
}

/// What a successful write may still have to say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct Written {
    /// Set when the file is in place but its folder could not be flushed to disk afterwards: the
    /// file is there and complete, yet a crash of the machine in the next moments could undo its
    /// creation. Not a failure (the data is in place), but worth a line on stderr.
    pub folder_not_flushed: Option<String>,
}

impl Written {
    /// The sentence to print on stderr, if any.
    pub fn warning(&self, path: &Path) -> Option<String> {
        self.folder_not_flushed.as_ref().map(|reason| {
            format!(
                "{} is written and complete, but its folder could not be flushed to disk ({reason}); \
                 a crash of the machine right now could still lose it",
                path.display()
            )
        })
    }
}

/// The folder a file goes in (`.` for a bare name).
pub fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Checks, before any work, that `path` can become a new file: it does not exist (a dangling
/// link is refused by its own sentence), its folder does and takes new files of that name length.
pub fn check_new(path: &Path) -> Result<(), OutputError> {
    if let Ok(meta) = path.symlink_metadata() {
        if meta.file_type().is_symlink() && path.metadata().is_err() {
            return Err(OutputError::DanglingLink(path.to_path_buf()));
        }
        return Err(OutputError::Exists(path.to_path_buf()));
    }
    check_folder(path)
}

/// Checks, before any work, that `path` can be (re)written in place with [`replace`]: it is a
/// regular file or absent (not a link, not a folder), and its folder takes new files.
pub fn check_replace(path: &Path) -> Result<(), OutputError> {
    if let Ok(meta) = path.symlink_metadata() {
        if meta.file_type().is_symlink() {
            return Err(if path.metadata().is_err() {
                OutputError::DanglingLink(path.to_path_buf())
            } else {
                OutputError::NotAFile(path.to_path_buf())
            });
        }
        if meta.is_dir() {
            return Err(OutputError::NotAFile(path.to_path_buf()));
        }
        if !meta.is_file() {
            return Err(OutputError::NotRegular {
                path: path.to_path_buf(),
                kind: kind_of(meta.file_type()),
            });
        }
    }
    check_folder(path)
}

fn check_folder(path: &Path) -> Result<(), OutputError> {
    if path.file_name().is_none() || path.as_os_str().to_string_lossy().ends_with('/') {
        return Err(OutputError::NotAFile(path.to_path_buf()));
    }
    let folder = folder_of(path);
    if !folder.is_dir() {
        return Err(OutputError::NoFolder {
            path: path.to_path_buf(),
            folder,
        });
    }
    probe(path, &folder)
}

/// A name no other probe or temporary file of this process uses.
fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-probe{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates and removes a file in `folder` whose name is as long as `path`'s: the filesystem
/// itself says whether the folder takes the name (and files at all).
fn probe(path: &Path, folder: &Path) -> Result<(), OutputError> {
    let wanted = path.file_name().map_or(0, |n| n.as_encoded_bytes().len());
    let mut name = format!("{TMP_PREFIX}{}", unique());
    let pad = wanted.saturating_sub(name.len() + TMP_SUFFIX.len());
    name.extend(std::iter::repeat_n('x', pad));
    name.push_str(TMP_SUFFIX);
    let probe = folder.join(name);
    match OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(file) => {
            drop(file);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidFilename => {
            Err(OutputError::NameTooLong {
                path: path.to_path_buf(),
                bytes: wanted,
            })
        }
        Err(e) => Err(OutputError::NotWritable {
            path: path.to_path_buf(),
            folder: folder.to_path_buf(),
            reason: os_message(&e),
        }),
    }
}

/// A temporary file being written: removed when dropped, unless it was moved into place.
#[derive(Debug)]
struct Temporary {
    /// Open for writing and locked (exclusive) until dropped.
    file: File,
    /// Removes the file on drop.
    path: TempPath,
}

/// A new temporary file in `folder`, named after this process and locked for its life. Created
/// here rather than by `tempfile::Builder`, whose errors carry the (absolute) temporary path.
fn temporary(folder: &Path, path: &Path) -> Result<Temporary, OutputError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut attempt = 0;
    loop {
        let name = format!(
            "{TMP_PREFIX}{}-{:x}{nanos:08x}{TMP_SUFFIX}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = folder.join(name);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        // A result file is for sharing: the usual 0644 (less the umask), not 0600.
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
        match options.open(&tmp) {
            Ok(file) => {
                let guard = TempPath::try_from_path(tmp).map_err(|e| OutputError::io(path, &e))?;
                // Held until the file is moved into place or removed: a cleaner in another
                // process (or another PID namespace) sees the file is in use.
                file.lock().map_err(|e| OutputError::io(path, &e))?;
                return Ok(Temporary { file, path: guard });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                attempt += 1;
            }
            Err(e) => return Err(OutputError::io(path, &e)),
        }
    }
}

/// Writes and flushes `bytes` into a new temporary file next to `path`.
fn filled(path: &Path, bytes: &[u8]) -> Result<Temporary, OutputError> {
    let folder = folder_of(path);
    clean_stale(&folder);
    let mut tmp = temporary(&folder, path)?;
    // On any error `tmp` is dropped, which removes the file.
    tmp.file
        .write_all(bytes)
        .and_then(|()| tmp.file.sync_all())
        .map_err(|e| OutputError::io(path, &e))?;
    Ok(tmp)
}

fn flush_folder(path: &Path) -> Written {
    let result = File::open(folder_of(path)).and_then(|f| f.sync_all());
    Written {
        folder_not_flushed: result.err().map(|e| os_message(&e)),
    }
}

/// Writes `bytes` to a temporary file in the target's folder, flushes it to disk, then links it
/// into place without ever replacing an existing file (the check is repeated atomically by the
/// OS: a file that appeared meanwhile is refused, not overwritten).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<Written, OutputError> {
    check_new(path)?;
    let tmp = filled(path, bytes)?;
    tmp.path.persist_noclobber(path).map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            OutputError::Exists(path.to_path_buf())
        } else {
            OutputError::io(path, &e.error)
        }
    })?;
    Ok(flush_folder(path))
}

/// Replaces the file at `path` (or creates it) with `bytes` in one step: a reader, or a crash,
/// sees the old content or the new one, never a mix. An existing file keeps its permissions.
/// The caller serialises concurrent writers (see `ledger::grid`).
pub fn replace(path: &Path, bytes: &[u8]) -> Result<Written, OutputError> {
    check_replace(path)?;
    let tmp = filled(path, bytes)?;
    if let Ok(meta) = path.metadata() {
        tmp.file
            .set_permissions(meta.permissions())
            .map_err(|e| OutputError::io(path, &e))?;
    }
    tmp.path
        .persist(path)
        .map_err(|e| OutputError::io(path, &e.error))?;
    Ok(flush_folder(path))
}

/// Removes the temporary files of writers that are gone from `folder`; returns how many. A file
/// is stale when the process id in its name is not a live process and nobody holds its lock.
/// Without `/proc` (not Linux) liveness cannot be proven and nothing is removed.
pub fn clean_stale(folder: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return 0;
    };
    if !Path::new("/proc/self").exists() {
        return 0;
    }
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name
            .strip_prefix(TMP_PREFIX)
            .filter(|_| name.ends_with(TMP_SUFFIX))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        // Only a regular file can be one of ours: a FIFO, a link or a folder under that name is
        // someone else's and is left alone (opening a FIFO would block this writer forever).
        if !entry.path().symlink_metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(file) = open_no_follow(&entry.path()) else {
            continue;
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        if file.try_lock().is_ok() && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Opens `path` for reading without following a final symbolic link and without blocking.
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK,
    );
    options.open(path)
}

/// What a path that is no regular file is, in words.
fn kind_of(file_type: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
}

/// Opens an input that must be a regular file (a link to one is followed): a FIFO, a device, a
/// socket or a folder is refused with an error of kind `InvalidInput` that says what it is. The
/// open does not block, so a FIFO with no writer cannot hang the command.
pub fn open_input(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path)?;
    let file_type = file.metadata()?.file_type();
    if file_type.is_file() {
        return Ok(file);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "it is {}, not a regular file; give a regular file",
            kind_of(file_type)
        ),
    ))
}

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Over the limit for its kind.
    #[error("{} is larger than {}, the limit for {what}; it is refused without being read further", .path.display(), crate::bytes::exact(*.limit))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// What kind of file it should be ("a measurement document").
        what: &'static str,
        /// The limit in bytes.
        limit: u64,
    },
    /// The OS refused.
    #[error("could not read {}: {reason}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error, once.
        reason: String,
        /// Its kind.
        kind: std::io::ErrorKind,
    },
}

impl InputError {
    /// True when the file is not there (a usage error for most commands).
    pub fn is_not_found(&self) -> bool {
        matches!(self, InputError::Io { kind, .. } if *kind == std::io::ErrorKind::NotFound)
    }

    fn io(path: &Path, e: &std::io::Error) -> InputError {
        InputError::Io {
            path: path.to_path_buf(),
            reason: os_message(e),
            kind: e.kind(),
        }
    }
}

/// Reads the regular file at `path` whole (see [`open_input`]), refusing it when it holds more
/// than `limit` bytes, by its size before reading. `what` names the kind of file in the refusal:
/// "a measurement document".
pub fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, InputError> {
    let file = open_input(path).map_err(|e| InputError::io(path, &e))?;
    read_bounded_from(file, path, limit, what)
}

/// [`read_bounded`] for a file already open (under a lock, say); `path` names it in errors.
pub fn read_bounded_from(
    file: File,
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, InputError> {
    let io = |e: std::io::Error| InputError::io(path, &e);
    let too_large = || InputError::TooLarge {
        path: path.to_path_buf(),
        what,
        limit,
    };
    let meta = file.metadata().map_err(io)?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(if meta.is_file() {
        meta.len() as usize
    } else {
        0
    });
    let mut file = file;
    (&mut file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_once_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        assert_eq!(write_new(&p, b"first").unwrap(), Written::default());
        assert!(matches!(
            write_new(&p, b"second"),
            Err(OutputError::Exists(_))
        ));
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }
        // No temporary or probe file is left behind.
        assert_eq!(listing(dir.path()), ["m.json"]);
    }

    #[test]
    fn refuses_missing_folder_and_dangling_link() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope").join("m.json");
        let err = check_new(&missing).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
        let err = check_new(&link).unwrap_err();
        assert!(matches!(err, OutputError::DanglingLink(_)), "{err}");
        assert!(err.is_usage());
        assert!(matches!(
            check_replace(&link),
            Err(OutputError::DanglingLink(_))
        ));
        assert!(!dir.path().join("target").exists());
        assert!(matches!(check_new(dir.path()), Err(OutputError::Exists(_))));
    }

    #[test]
    fn a_name_too_long_for_the_filesystem_is_found_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join(format!("{}.json", "a".repeat(300)));
        let err = check_new(&long).unwrap_err();
        assert!(
            matches!(err, OutputError::NameTooLong { bytes: 305, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("too long"), "{err}");
        // A name just under the usual 255-byte limit passes, and the probe leaves nothing.
        let fits = dir.path().join(format!("{}.json", "b".repeat(250)));
        check_new(&fits).unwrap();
        assert!(listing(dir.path()).is_empty());
    }

    #[test]
    fn replace_swaps_content_whole_and_keeps_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("grid.csv");
        let _ = replace(&p, b"one\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let _ = replace(&p, b"one\ntwo\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one\ntwo\n");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(listing(dir.path()), ["grid.csv"]);
        let target = dir.path().join("real.csv");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            replace(&link, b"y"),
            Err(OutputError::NotAFile(_))
        ));
    }

    #[test]
    fn stale_temporary_files_of_dead_writers_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has exited: its id is free (until reused, when the file is kept).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir
            .path()
            .join(format!("{TMP_PREFIX}{dead}-abc123{TMP_SUFFIX}"));
        std::fs::write(&stale, b"half").unwrap();
        // Ours (a live process) and another tool's file.
        let ours = dir.path().join(format!(
            "{TMP_PREFIX}{}-def456{TMP_SUFFIX}",
            std::process::id()
        ));
        std::fs::write(&ours, b"in use").unwrap();
        let foreign = dir.path().join(".other-1.tmp");
        std::fs::write(&foreign, b"x").unwrap();
        // A dead id whose file someone still holds locked (another PID namespace, say).
        let held = dir
            .path()
            .join(format!("{TMP_PREFIX}{dead}-ghi789{TMP_SUFFIX}"));
        std::fs::write(&held, b"held").unwrap();
        let holder = File::open(&held).unwrap();
        holder.lock().unwrap();
        assert_eq!(clean_stale(dir.path()), 1);
        assert!(!stale.exists());
        assert!(ours.exists() && foreign.exists() && held.exists());
        drop(holder);
        assert_eq!(clean_stale(dir.path()), 1);
        assert!(!held.exists());
        // A writer cleans before it writes.
        std::fs::write(&stale, b"half").unwrap();
        let _ = write_new(&dir.path().join("r.json"), b"{}").unwrap();
        assert!(!stale.exists());
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file_and_says_the_os_error_once() {
        // A folder that disappears between the check and the write stands for any OS refusal.
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let p = sub.join("m.json");
        check_new(&p).unwrap();
        std::fs::remove_dir(&sub).unwrap();
        let err = filled(&p, b"x").unwrap_err();
        let text = err.to_string();
        assert_eq!(text.matches("os error").count(), 1, "{text}");
        assert!(!text.contains(TMP_PREFIX), "{text}");
    }

    #[test]
    fn inputs_over_their_limit_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.json");
        std::fs::write(&p, vec![b' '; 2048]).unwrap();
        assert_eq!(read_bounded(&p, 2048, "a test file").unwrap().len(), 2048);
        let err = read_bounded(&p, 1024, "a test file").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is larger than 1 KiB, the limit for a test file; it is refused without being read further",
                p.display()
            )
        );
        // A device is no input file: refused by what it is, before any byte is read.
        let err = read_bounded(Path::new("/dev/zero"), 4096, "a test file").unwrap_err();
        assert_eq!(
            err.to_string(),
            "could not read /dev/zero: it is a device, not a regular file; give a regular file"
        );
        let err = read_bounded(&dir.path().join("none"), 1, "x").unwrap_err();
        assert!(err.is_not_found(), "{err}");
        assert_eq!(err.to_string().matches("os error").count(), 1);
    }

    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn a_fifo_under_a_stale_temporary_name_is_left_alone_and_the_writer_finishes() {
        let dir = tempfile::tempdir().unwrap();
        // A dead writer's id: the FIFO looks stale by its name alone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let fifo = dir.path().join(format!("{TMP_PREFIX}{dead}-0{TMP_SUFFIX}"));
        mkfifo(&fifo);
        // A link under such a name, to a FIFO elsewhere, and to a regular file: neither is ours.
        let elsewhere = tempfile::tempdir().unwrap();
        let far_fifo = elsewhere.path().join("f");
        mkfifo(&far_fifo);
        let to_fifo = dir.path().join(format!("{TMP_PREFIX}{dead}-1{TMP_SUFFIX}"));
        std::os::unix::fs::symlink(&far_fifo, &to_fifo).unwrap();
        let far_file = elsewhere.path().join("keep.txt");
        std::fs::write(&far_file, b"keep").unwrap();
        let to_file = dir.path().join(format!("{TMP_PREFIX}{dead}-2{TMP_SUFFIX}"));
        std::os::unix::fs::symlink(&far_file, &to_file).unwrap();
        // The write runs on another thread so that a hang fails the test instead of stalling it.
        let target = dir.path().join("m.json");
        let (tx, rx) = std::sync::mpsc::channel();
        let t = target.clone();
        std::thread::spawn(move || tx.send(write_new(&t, b"{}").map(|_| ())).unwrap());
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the writer hung on a FIFO named like a stale temporary file");
        result.unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"{}");
        assert_eq!(clean_stale(dir.path()), 0);
        assert!(fifo.symlink_metadata().is_ok());
        assert!(to_fifo.symlink_metadata().is_ok() && to_file.symlink_metadata().is_ok());
        assert_eq!(std::fs::read(&far_file).unwrap(), b"keep");
    }

    #[test]
    fn only_regular_files_are_inputs_and_opening_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("doc.json");
        mkfifo(&fifo);
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        for path in [&fifo, &link] {
            let err = read_bounded(path, 1024, "a test file").unwrap_err();
            assert!(
                err.to_string().ends_with(
                    "it is a FIFO (named pipe), not a regular file; give a regular file"
                ),
                "{err}"
            );
        }
        let err = read_bounded(dir.path(), 1024, "a test file").unwrap_err();
        assert!(err.to_string().contains("it is a folder"), "{err}");
        // A link to a regular file is followed.
        let real = dir.path().join("real.json");
        std::fs::write(&real, b"{}").unwrap();
        let to_real = dir.path().join("to-real.json");
        std::os::unix::fs::symlink(&real, &to_real).unwrap();
        assert_eq!(read_bounded(&to_real, 1024, "a test file").unwrap(), b"{}");
    }
}
