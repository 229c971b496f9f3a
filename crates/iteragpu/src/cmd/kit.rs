//! `iteragpu kit`: the deterministic kit archive.

use std::path::{Path, PathBuf};
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
  iteragpu kit --output iteragpu-lab-v1.zip --release-dir dist
  iteragpu kit --output iteragpu-lab-v1.zip \\
      --binary dist/x86_64-unknown-linux-gnu/iteragpu --binary dist/aarch64-unknown-linux-gnu/iteragpu
  iteragpu verify iteragpu-lab-v1.zip

The kit carries the program, under bin/<target>/iteragpu, its target read from its ELF header
(x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu, ...). Without --binary, --with-binary or
--release-dir, it takes the portable binaries of scripts/release.sh (glibc 2.28 and newer) from
dist/<target>/iteragpu when dist/ holds them, else the running iteragpu, which starts only where
the glibc is as new as the building machine's; it says which. A binary that still holds the
builder's paths (the cargo registry under a home folder, a build folder) is refused; this
checkout's builds have none (.cargo/config.toml remaps them), a plain `cargo install` elsewhere
may. scripts/install.sh, in the kit, installs the program from the unpacked kit.

The same inputs always write the same bytes: members sorted, dated 1980-01-01, 0644 (0755 for
folders and binaries). Inside the extracted folder, `sha256sum -c --strict SHA256SUMS` checks
the members without this tool.")]
pub struct Args {
    /// The zip to write; it must not exist yet.
    #[arg(long, short)]
    pub output: PathBuf,

    /// Ship this executable (the running `iteragpu`) under `bin/<its target>/`.
    #[arg(long)]
    pub with_binary: bool,

    /// Ship this iteragpu executable under `bin/<its target>/`; repeat it for each target.
    #[arg(long, value_name = "PATH")]
    pub binary: Vec<PathBuf>,

    /// Ship the portable binaries of scripts/release.sh from this folder
    /// (`DIR/<target>/iteragpu`, every target found); without any binary option, `dist/` is used
    /// when it holds them.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["with_binary", "binary"])]
    pub release_dir: Option<PathBuf>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct KitReport<'a> {
    output: String,
    bytes: u64,
    sha256: String,
    program: Program,
    manifest: &'a kit::Manifest,
}

/// Which program the kit carries, and where it came from.
#[derive(Debug, Serialize)]
struct Program {
    /// `release` (the portable binaries of scripts/release.sh), `given` (--binary,
    /// --with-binary), `this-build` (the running iteragpu, found by itself) or `none`.
    source: &'static str,
    /// The release folder, for `release`.
    #[serde(skip_serializing_if = "Option::is_none")]
    folder: Option<String>,
    /// The members it added, `bin/<target>/iteragpu`.
    members: Vec<String>,
    /// One sentence: what it is, or why there is none.
    note: String,
}

/// The targets scripts/release.sh builds, in the order it builds them.
const RELEASE_TARGETS: [&str; 2] = ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"];

/// Where `scripts/release.sh` writes its binaries, from the checkout's root.
const RELEASE_DIR: &str = "dist";

/// The release binaries in `dir`, `dir/<target>/iteragpu` for each target found.
fn release_binaries(dir: &Path) -> Vec<PathBuf> {
    RELEASE_TARGETS
        .iter()
        .map(|t| dir.join(t).join("iteragpu"))
        .filter(|p| p.is_file())
        .collect()
}

fn read_binary(name: &str, path: &Path) -> anyhow::Result<Binary> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Binary::new(name, bytes).map_err(|e| exit::usage(e.to_string()))
}

/// The binaries to ship and what they are: the ones asked for, else the release's, else the
/// running iteragpu when it can ship, else none (and why).
fn choose(args: &Args) -> anyhow::Result<(Vec<Binary>, Program)> {
    let program = |source, folder: Option<&Path>, binaries: &[Binary], note: String| Program {
        source,
        folder: folder.map(|f| f.display().to_string()),
        members: binaries.iter().map(Binary::path).collect(),
        note,
    };
    if args.with_binary || !args.binary.is_empty() {
        let mut binaries = Vec::new();
        if args.with_binary {
            let exe = std::env::current_exe().context("cannot locate the running executable")?;
            binaries.push(read_binary("the running iteragpu", &exe)?);
        }
        for path in &args.binary {
            if !path.is_file() {
                return Err(exit::usage(format!(
                    "--binary {}: no such file; give the path of an iteragpu executable",
                    path.display()
                )));
            }
            binaries.push(read_binary(&format!("--binary {}", path.display()), path)?);
        }
        let note = "the binaries given with --binary or --with-binary".to_string();
        let p = program("given", None, &binaries, note);
        return Ok((binaries, p));
    }
    let (dir, explicit) = match &args.release_dir {
        Some(dir) => (dir.clone(), true),
        None => (PathBuf::from(RELEASE_DIR), false),
    };
    let found = release_binaries(&dir);
    if explicit && found.is_empty() {
        return Err(exit::usage(format!(
            "--release-dir {}: holds no {} (scripts/release.sh writes them into dist/); give the \
             folder it wrote",
            dir.display(),
            RELEASE_TARGETS
                .map(|t| format!("{t}/iteragpu"))
                .join(" or ")
        )));
    }
    if !found.is_empty() {
        let mut binaries = Vec::new();
        for path in &found {
            binaries.push(read_binary(&path.display().to_string(), path)?);
        }
        let note = format!(
            "the portable binaries of scripts/release.sh in {}/ (glibc 2.28 or newer)",
            dir.display()
        );
        let p = program("release", Some(&dir), &binaries, note);
        return Ok((binaries, p));
    }
    let exe = std::env::current_exe().context("cannot locate the running executable")?;
    let bytes = std::fs::read(&exe).with_context(|| format!("cannot read {}", exe.display()))?;
    match Binary::new("the running iteragpu", bytes) {
        Ok(binary) => {
            let note = format!(
                "this machine's build (the running iteragpu, no portable binaries in {}/): it \
                 starts where the glibc is as new as this machine's; scripts/release.sh builds \
                 portable ones (glibc 2.28)",
                dir.display()
            );
            let binaries = vec![binary];
            let p = program("this-build", None, &binaries, note);
            Ok((binaries, p))
        }
        Err(why) => {
            let note = format!(
                "none: no portable binaries in {}/ (scripts/release.sh builds them) and {why}; \
                 install the program on the rented machine another way (a wheel, cargo install)",
                dir.display()
            );
            Ok((Vec::new(), program("none", None, &[], note)))
        }
    }
}

/// Runs `kit`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // An existing, unwritable or over-long --output is refused before anything is built.
    lab_io::files::check_new(&args.output).map_err(|e| exit::usage(e.to_string()))?;
    let (binaries, program) = choose(&args)?;
    if binaries.is_empty() {
        output::warn(&format!(
            "the kit carries no program: {}",
            program.note.trim_start_matches("none: ")
        ));
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
        program,
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
        "wrote {} ({} bytes, SHA-256 {})\nprogram: {}\n{}/: {} members, {} bytes\n",
        report.output,
        report.bytes,
        report.sha256,
        report.program.note,
        m.root,
        m.totals.files,
        m.totals.bytes
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
