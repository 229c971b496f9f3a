//! What can go wrong while building or writing a kit.

use std::path::PathBuf;

/// A kit could not be built or written.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// The output file is already there; the kit never overwrites a file.
    #[error("{} already exists; remove it or choose another --output", .0.display())]
    OutputExists(PathBuf),
    /// Writing the output failed.
    #[error(transparent)]
    Write(lab::files::OutputError),
    /// The zip library refused an entry (it should not: names and sizes are ours).
    #[error("cannot build the zip archive")]
    Zip(#[from] zip::result::ZipError),
    /// The manifest's own size did not settle (it always does in two or three rounds).
    #[error("the manifest's size did not converge after {0} rounds")]
    ManifestSize(usize),
    /// The manifest could not be serialised.
    #[error("cannot serialise MANIFEST.json")]
    Json(#[from] serde_json::Error),
}
