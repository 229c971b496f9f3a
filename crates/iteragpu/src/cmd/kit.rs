//! `iteragpu kit`: the deterministic kit archive.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use kit::{Binary, GlibcVersion, KIT_GLIBC, KitError, KitOptions, ManifestTool};
use serde::Serialize;

use crate::{exit, output};

/// Options of `kit`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu kit --output iteragpu-lab-v1.zip
  iteragpu kit --output iteragpu-lab-v1.zip --release-dir dist
  iteragpu kit --output iteragpu-lab-v1.zip \\
      --binary dist/x86_64-unknown-linux-gnu/iteragpu \\
      --binary dist/aarch64-unknown-linux-gnu/iteragpu
  iteragpu verify iteragpu-lab-v1.zip
  iteragpu verify iteragpu-lab-v1.tar.gz

It writes the zip and, beside it, the same members as a .tar.gz (OUTPUT with .zip replaced by
.tar.gz): `tar -xzf` unpacks it where neither unzip nor python3 is installed. The kit carries the
program, under bin/<target>/iteragpu, its target read from its ELF header
(x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu, ...). Without --binary, --with-binary or
--release-dir, it takes the portable binaries of scripts/release.sh from dist/<target>/iteragpu
when dist/ holds them, else the running iteragpu; it says which, and the newest glibc the program
needs, read from its ELF version needs (the GLIBC_x.y that `objdump -T` shows). The kit's README
promises glibc 2.28: a release binary that needs a newer one is refused (exit 2); a given binary
or this machine's build that does is shipped with a warning naming the version. A binary that
still holds the
builder's paths (the cargo registry under a home folder, a build folder) is refused; this
checkout's builds have none (.cargo/config.toml remaps them), a plain `cargo install` elsewhere
may. scripts/install.sh, in the kit, installs the program from the unpacked kit.

The same inputs always write the same bytes: members sorted, dated 1980-01-01, 0644 (0755 for
folders and binaries). Inside the extracted folder, `sha256sum -c --strict SHA256SUMS` checks
the members without this tool.")]
pub struct Args {
    /// The zip to write; it must not exist yet, nor the .tar.gz written beside it.
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
    /// The same kit as a .tar.gz, beside the zip.
    tar_gz: Archive,
    program: Program,
    manifest: &'a kit::Manifest,
}

/// One written archive.
#[derive(Debug, Serialize)]
struct Archive {
    output: String,
    bytes: u64,
    sha256: String,
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
    /// The newest glibc any of them needs (`2.35`), read from their ELF version needs; null
    /// when none needs one (no binary, or static ones).
    glibc_needed: Option<String>,
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

/// The .tar.gz written beside `zip`: its `.zip` replaced by `.tar.gz`, or `.tar.gz` added.
pub fn tar_gz_path(zip: &Path) -> PathBuf {
    let name = zip.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name.unwrap_or_default();
    let stem = name.strip_suffix(".zip").unwrap_or(&name);
    zip.with_file_name(format!("{stem}.tar.gz"))
}

/// The newest glibc each binary needs, with its name; a binary whose version needs cannot be
/// read is refused.
fn glibc_of(binaries: &[(String, Binary)]) -> anyhow::Result<Vec<(String, GlibcVersion)>> {
    let mut needs = Vec::new();
    for (name, binary) in binaries {
        match kit::glibc_needed(&binary.bytes) {
            Ok(Some(v)) => needs.push((name.clone(), v)),
            Ok(None) => {}
            Err(why) => {
                return Err(exit::usage(format!(
                    "{name}: cannot read which glibc it needs: {why}"
                )));
            }
        }
    }
    Ok(needs)
}

/// The binaries to ship and what they are: the ones asked for, else the release's, else the
/// running iteragpu when it can ship, else none (and why). With them, a warning when one needs a
/// newer glibc than the kit's README promises (a release binary that does is refused).
fn choose(args: &Args) -> anyhow::Result<(Vec<Binary>, Program, Option<String>)> {
    let program = |source, folder: Option<&Path>, named: &[(String, Binary)], note: String| {
        let glibc = glibc_of(named)?;
        let newest = glibc.iter().map(|(_, v)| *v).max();
        let warning = glibc
            .iter()
            .filter(|(_, v)| *v > KIT_GLIBC)
            .map(|(name, v)| {
                format!(
                    "{name} needs glibc {v} or newer (its highest GLIBC_ symbol version), newer \
                     than the {KIT_GLIBC} the kit's README states: it will not start on an older \
                     system; scripts/release.sh builds portable binaries (glibc {KIT_GLIBC})"
                )
            })
            .next();
        if source == "release"
            && let Some(message) = warning
        {
            return Err(exit::usage(message.replace(
                "scripts/release.sh builds portable binaries",
                "rebuild it with scripts/release.sh",
            )));
        }
        let note = match (source, newest) {
            ("release", _) | (_, None) => note,
            (_, Some(v)) if v > KIT_GLIBC => format!(
                "{note}: it needs glibc {v} or newer, not the {KIT_GLIBC} the kit's README \
                 states; scripts/release.sh builds portable ones (glibc {KIT_GLIBC})"
            ),
            (_, Some(v)) => format!("{note}: it needs glibc {v} or newer"),
        };
        let binaries: Vec<Binary> = named.iter().map(|(_, b)| b.clone()).collect();
        let p = Program {
            source,
            folder: folder.map(|f| f.display().to_string()),
            members: binaries.iter().map(Binary::path).collect(),
            glibc_needed: newest.map(|v| v.to_string()),
            note,
        };
        anyhow::Ok((binaries, p, warning))
    };
    if args.with_binary || !args.binary.is_empty() {
        let mut named = Vec::new();
        if args.with_binary {
            let exe = std::env::current_exe().context("cannot locate the running executable")?;
            let name = "the running iteragpu";
            named.push((name.to_string(), read_binary(name, &exe)?));
        }
        for path in &args.binary {
            if !path.is_file() {
                return Err(exit::usage(format!(
                    "--binary {}: no such file; give the path of an iteragpu executable",
                    path.display()
                )));
            }
            let name = format!("--binary {}", path.display());
            let binary = read_binary(&name, path)?;
            named.push((name, binary));
        }
        let note = "the binaries given with --binary or --with-binary".to_string();
        return program("given", None, &named, note);
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
        let mut named = Vec::new();
        for path in &found {
            let name = path.display().to_string();
            let binary = read_binary(&name, path)?;
            named.push((name, binary));
        }
        let note = format!(
            "the portable binaries of scripts/release.sh in {}/ (glibc {KIT_GLIBC} or newer)",
            dir.display()
        );
        return program("release", Some(&dir), &named, note);
    }
    let exe = std::env::current_exe().context("cannot locate the running executable")?;
    let bytes = std::fs::read(&exe).with_context(|| format!("cannot read {}", exe.display()))?;
    match Binary::new("the running iteragpu", bytes) {
        Ok(binary) => {
            let note = format!(
                "this machine's build (the running iteragpu, no portable binaries in {}/)",
                dir.display()
            );
            let named = [("the running iteragpu".to_string(), binary)];
            program("this-build", None, &named, note)
        }
        Err(why) => {
            let note = format!(
                "none: no portable binaries in {}/ (scripts/release.sh builds them) and {why}; \
                 install the program on the rented machine another way (a wheel, cargo install)",
                dir.display()
            );
            program("none", None, &[], note)
        }
    }
}

/// Runs `kit`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // An existing, unwritable or over-long --output is refused before anything is built.
    let tar_gz = tar_gz_path(&args.output);
    lab_io::files::check_new(&args.output).map_err(|e| exit::usage(e.to_string()))?;
    lab_io::files::check_new(&tar_gz).map_err(|e| exit::usage(e.to_string()))?;
    let (binaries, program, glibc_warning) = choose(&args)?;
    if let Some(warning) = glibc_warning {
        output::warn(&warning);
    }
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
    let refused = |e: KitError| -> anyhow::Error {
        match e {
            KitError::OutputExists(_) => exit::usage(e.to_string()),
            other => other.into(),
        }
    };
    let written = kit::write_new(&args.output, &built.bytes).map_err(refused)?;
    // Both or neither: a .tar.gz that cannot be written takes the zip back with it.
    let written_tar = match kit::write_new(&tar_gz, &built.tar_gz) {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_file(&args.output);
            return Err(refused(e));
        }
    };
    for (w, path) in [(&written, &args.output), (&written_tar, &tar_gz)] {
        if let Some(warning) = w.warning(path) {
            output::warn(&warning);
        }
    }
    let report = KitReport {
        output: args.output.display().to_string(),
        bytes: built.bytes.len() as u64,
        sha256: kit::hash::sha256_hex(&built.bytes),
        tar_gz: Archive {
            output: tar_gz.display().to_string(),
            bytes: built.tar_gz.len() as u64,
            sha256: kit::hash::sha256_hex(&built.tar_gz),
        },
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
        "wrote {} ({} bytes, SHA-256 {})\nwrote {} ({} bytes, SHA-256 {})\nprogram: {}\n{}/: {} \
         members, {} bytes\n",
        report.output,
        report.bytes,
        report.sha256,
        report.tar_gz.output,
        report.tar_gz.bytes,
        report.tar_gz.sha256,
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
        "check it: iteragpu verify {} (or {})   (or, inside {}/: sha256sum -c --strict \
         SHA256SUMS)\n",
        report.output, report.tar_gz.output, m.root
    ));
    output::print_text(&text)?;
    Ok(ExitCode::SUCCESS)
}
