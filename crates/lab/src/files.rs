//! Writing result files so that nothing is ever lost or half-written: an existing file is
//! refused before any work starts, and a new file appears only once it is complete.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a result file cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The file is already there; results are never overwritten.
    #[error("{} already exists; results are never overwritten: choose a new file name", .0.display())]
    Exists(PathBuf),
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
    /// The OS refused a step.
    #[error("could not write {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Checks, before any work, that `path` can become a new file: it does not exist (not even as a
/// dangling link) and its folder does.
pub fn check_new(path: &Path) -> Result<(), OutputError> {
    if path.symlink_metadata().is_ok() {
        return Err(OutputError::Exists(path.to_path_buf()));
    }
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
    Ok(())
}

/// Writes `bytes` to a temporary file in the target's folder, flushes it to disk, then links it
/// into place without ever replacing an existing file (the check is repeated atomically by the
/// OS: a file that appeared meanwhile is refused, not overwritten).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    check_new(path)?;
    let io = |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A result file is for sharing: the usual 0644, not the temporary file's private 0600.
    #[cfg(unix)]
    let permissions = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    #[cfg(not(unix))]
    let permissions = std::fs::metadata(folder_of(path))
        .map_err(io)?
        .permissions();
    let mut tmp = tempfile::Builder::new()
        .prefix(".iteragpu-")
        .suffix(".tmp")
        .permissions(permissions)
        .tempfile_in(folder_of(path))
        .map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist_noclobber(path).map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            OutputError::Exists(path.to_path_buf())
        } else {
            io(e.error)
        }
    })?;
    Ok(())
}

fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_once_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        write_new(&p, b"first").unwrap();
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
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn refuses_missing_folder_and_dangling_link() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope").join("m.json");
        let err = check_new(&missing).unwrap_err();
        assert!(err.to_string().contains("does not exist"), "{err}");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(dir.path().join("target"), &link).unwrap();
        assert!(matches!(check_new(&link), Err(OutputError::Exists(_))));
        assert!(matches!(check_new(dir.path()), Err(OutputError::Exists(_))));
    }
}
