//! The IteraGPU Lab kit: one deterministic zip that carries its own proof of integrity, and the
//! verifier that checks it.
//!
//! The original kit shipped as `iteragpu-lab-v1.zip`, one folder whose `MANIFEST.json` lists every
//! member with its size and the SHA-256 of every member but itself. This crate builds the same
//! archive from files embedded in the binary ([`members::MEMBERS`]), so an installed `iteragpu`
//! can rebuild it anywhere, byte for byte: members in sorted order, every date 1980-01-01 00:00,
//! fixed permissions, no extra fields. Next to the manifest it writes `SHA256SUMS`, so
//! `sha256sum -c --strict` can check the kit without this tool. The same members also go into a
//! `.tar.gz` (ustar, same dates and permissions), for machines with neither `unzip` nor
//! `python3`; [`binary::glibc_needed`] reads which glibc a shipped binary needs.
//!
//! [`verify::verify`] checks a zip, a `.tar.gz` or an extracted folder against its manifest without writing
//! anything to disk: *complete* (nothing missing, nothing unexpected, no unsafe path) and *valid*
//! (sizes, then hashes) are reported separately, each failure by name. A zip's layout is read by
//! this crate itself ([`structure`]): every local header must match its central entry, and no
//! byte may lie before, between or after the entries; names that are one file once extracted
//! (`a/./b`, `a//b` or `a\b` beside `a/b`, or names that differ only in case or Unicode
//! normalisation) are refused.
//!
//! Not here: the files it embeds (`data/`, `docs/`, `notebooks/`, `scripts/`), the file rules
//! (`lab-io`), building the portable binaries it can carry (`scripts/release.sh`).
#![forbid(unsafe_code)]

pub mod archive;
pub mod binary;
pub mod error;
pub mod hash;
pub mod manifest;
pub mod members;
pub mod structure;
pub mod verify;

pub use archive::{Kit, KitOptions, build, write_new};
pub use binary::{Binary, GlibcVersion, KIT_GLIBC, glibc_needed};
pub use error::KitError;
pub use manifest::{MANIFEST_NAME, Manifest, ManifestEntry, ManifestTool, SHA256SUMS_NAME};
pub use members::{BINARY_FOLDER, MEMBERS, Member, ROOT};
pub use verify::{Failure, Finding, Report, Source, VerifyError, verify};
