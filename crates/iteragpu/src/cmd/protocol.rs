//! `iteragpu protocol init|lock`: the quality protocol, fixed before the test.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use serde::Serialize;

use crate::{exit, output};

/// Options of `protocol`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu protocol init protocol.txt
  $EDITOR protocol.txt
  iteragpu protocol lock protocol.txt

The protocol is a text file of `key = value` lines (# starts a comment); docs/quality-protocol.md
explains every field. `lock` refuses empty fields and writes FILE.lock with the file's SHA-256 and
the UTC time; `iteragpu record` then refuses the protocol if one byte of it changed. Both files
appear whole or not at all: an interrupted `init` or `lock` leaves nothing to clean up.")]
pub struct Args {
    /// What to do with the protocol.
    #[command(subcommand)]
    pub action: Action,
}

/// `protocol` actions.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Write a protocol to fill in (never overwrites a file).
    Init {
        /// The protocol file to create.
        file: PathBuf,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a filled-in protocol and lock it: record its SHA-256 and the time in FILE.lock.
    Lock {
        /// The protocol file to lock.
        file: PathBuf,
        /// Print one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct Initialised {
    protocol: String,
    fields: Vec<&'static str>,
    next: String,
}

#[derive(Serialize)]
struct Locked<'a> {
    protocol: String,
    lock_file: String,
    #[serde(flatten)]
    lock: &'a ledger::Lock,
}

/// Runs `protocol`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Init { file, json } => {
            let written = ledger::protocol::init(&file, SystemTime::now()).map_err(exit::ledger)?;
            if let Some(warning) = written.warning(&file) {
                output::warn(&warning);
            }
            let report = Initialised {
                protocol: file.display().to_string(),
                fields: ledger::protocol::FIELDS.iter().map(|(k, _)| *k).collect(),
                next: format!("iteragpu protocol lock {}", file.display()),
            };
            if json {
                output::print_json(&report)?;
            } else {
                output::print_text(&format!(
                    "wrote {}: fill in every field before the test, then run `{}`\n",
                    report.protocol, report.next
                ))?;
            }
        }
        Action::Lock { file, json } => {
            let (lock, written) =
                ledger::protocol::lock(&file, SystemTime::now(), env!("CARGO_PKG_VERSION"))
                    .map_err(exit::ledger)?;
            let lock_file = ledger::protocol::lock_path(&file);
            if let Some(warning) = written.warning(&lock_file) {
                output::warn(&warning);
            }
            let report = Locked {
                protocol: file.display().to_string(),
                lock_file: lock_file.display().to_string(),
                lock: &lock,
            };
            if json {
                output::print_json(&report)?;
            } else {
                output::print_text(&format!(
                    "locked {} at {}\nSHA-256 {}\nlock written to {}; from now on any change to the protocol is refused by `iteragpu record`\n",
                    report.protocol, lock.locked_utc, lock.protocol_sha256, report.lock_file
                ))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
