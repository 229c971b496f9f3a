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
    Write(lab_io::files::OutputError),
    /// The zip library refused an entry (it should not: names and sizes are ours).
    #[error("cannot build the zip archive")]
    Zip(#[from] zip::result::ZipError),
    /// The tar writer or the gzip encoder failed (in memory: it should not).
    #[error("cannot build the .tar.gz archive")]
    Tar(#[source] std::io::Error),
    /// The manifest's own size did not settle (it always does in two or three rounds).
    #[error("the manifest's size did not converge after {0} rounds")]
    ManifestSize(usize),
    /// A file given to ship as a binary is not a Linux executable the kit knows.
    #[error("{name} is not a binary the kit can ship: {why}")]
    NotABinary {
        /// The file as the user named it.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A binary still holds an absolute path of the machine that built it.
    #[error(
        "{name} holds the path {path} of the machine that built it; ship a binary built by \
         scripts/release.sh or by cargo in this checkout, whose .cargo/config.toml removes such \
         paths with --remap-path-prefix"
    )]
    BuilderPath {
        /// The file as the user named it.
        name: String,
        /// The first builder path found in it.
        path: String,
    },
    /// Two binaries for the same machine.
    #[error("two binaries for {0}: give one binary per target")]
    DuplicateTarget(String),
    /// The manifest could not be serialised.
    #[error("cannot serialise MANIFEST.json")]
    Json(#[from] serde_json::Error),
}
