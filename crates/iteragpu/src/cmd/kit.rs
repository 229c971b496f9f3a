//! `iteragpu kit`: the deterministic kit archive.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use kit::{Binary, KitError, KitOptions, ManifestTool};
use serde::Serialize;

use crate::{exit, output};

/// Options of `kit`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu kit --output iteragpu-lab-v1.zip
  iteragpu kit --output iteragpu-lab-v1.zip \\
      --binary dist/x86_64-unknown-linux-gnu/iteragpu --binary dist/aarch64-unknown-linux-gnu/iteragpu
  iteragpu verify iteragpu-lab-v1.zip

A binary goes to bin/<target>/iteragpu, its target read from its ELF header
(x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu, ...); scripts/release.sh builds both
portable ones (glibc 2.28 and newer). A binary that still holds the builder's paths (the cargo
registry under a home folder, a build folder), as a plain `cargo build` leaves them, is refused.

The same inputs always write the same bytes: members sorted, dated 1980-01-01, 0644 (0755 for
folders and binaries). Inside the extracted folder, `sha256sum -c --strict SHA256SUMS` checks
the members without this tool.")]
pub struct Args {
    /// The zip to write; it must not exist yet.
    #[arg(long, short)]
    pub output: PathBuf,

    /// Also ship this executable (the running `iteragpu`) under `bin/<its target>/`.
    #[arg(long)]
    pub with_binary: bool,

    /// Also ship this iteragpu executable under `bin/<its target>/`; repeat it for each target.
    #[arg(long, value_name = "PATH")]
    pub binary: Vec<PathBuf>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct KitReport<'a> {
    output: String,
    bytes: u64,
    sha256: String,
    manifest: &'a kit::Manifest,
}

/// Runs `kit`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // An existing, unwritable or over-long --output is refused before anything is built.
    lab_io::files::check_new(&args.output).map_err(|e| exit::usage(e.to_string()))?;
    let mut sources: Vec<(String, PathBuf)> = Vec::new();
    if args.with_binary {
        let exe = std::env::current_exe().context("cannot locate the running executable")?;
        sources.push(("the running iteragpu".to_string(), exe));
    }
    for path in &args.binary {
        if !path.is_file() {
            return Err(exit::usage(format!(
                "--binary {}: no such file; give the path of an iteragpu executable",
                path.display()
            )));
        }
        sources.push((format!("--binary {}", path.display()), path.clone()));
    }
    let mut binaries = Vec::new();
    for (name, path) in sources {
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        binaries.push(Binary::new(&name, bytes).map_err(|e| exit::usage(e.to_string()))?);
    }
    let options = KitOptions {
        tool: ManifestTool {
            commit: option_env!("ITERAGPU_COMMIT").map(str::to_string),
            name: "iteragpu".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        binaries,
    };
    let built = kit::build(&options).map_err(|e| match e {
        KitError::DuplicateTarget(_) => exit::usage(e.to_string()),
        other => other.into(),
    })?;
    let written = kit::write_new(&args.output, &built.bytes).map_err(|e| match e {
        KitError::OutputExists(_) => exit::usage(e.to_string()),
        other => other.into(),
    })?;
    if let Some(warning) = written.warning(&args.output) {
        output::warn(&warning);
    }
    let report = KitReport {
        output: args.output.display().to_string(),
        bytes: built.bytes.len() as u64,
        sha256: kit::hash::sha256_hex(&built.bytes),
        manifest: &built.manifest,
    };
    if args.json {
        output::print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let m = &built.manifest;
    let width = m
        .files
        .iter()
        .map(|f| f.size.to_string().len())
        .max()
        .unwrap_or(1);
    let mut text = format!(
        "wrote {} ({} bytes, SHA-256 {})\n{}/: {} members, {} bytes\n",
        report.output, report.bytes, report.sha256, m.root, m.totals.files, m.totals.bytes
    );
    for f in &m.files {
        let (hash, note) = match f.sha256.as_deref() {
            Some(h) => (h.get(..16).unwrap_or(h), ""),
            None => (
                "-",
                "  (its own size only: a file cannot hold its own hash)",
            ),
        };
        text.push_str(&format!(
            "  {:>width$}  {hash:<16}  {}{note}\n",
            f.size, f.path
        ));
    }
    text.push_str(&format!(
        "check it: iteragpu verify {}   (or, inside {}/: sha256sum -c --strict SHA256SUMS)\n",
        report.output, m.root
    ));
    output::print_text(&text)?;
    Ok(ExitCode::SUCCESS)
}
