//! `iteragpu verify`: check a kit (zip, tar.gz or extracted folder) against its manifest.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::output;

/// Options of `verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu verify iteragpu-lab-v1.zip
  iteragpu verify iteragpu-lab-v1.tar.gz
  iteragpu verify ./iteragpu-lab-v1/
  iteragpu verify iteragpu-lab-v1.zip --json

Complete: every member MANIFEST.json lists is there, nothing else is, and no name could escape
the folder (`..`, an absolute path, a link) or collide with another once case is ignored or
Unicode normalised; in a zip, every local header matches its central entry and no data lies
before, between or after the entries; in a tar.gz (read by a tar reader, whatever its name, when
it starts as gzip does), no link or special file, and nothing but zeros after the last member. Valid: every member has the listed size and then the
listed SHA-256. Nothing is extracted. Exit 1 on any failure.")]
pub struct Args {
    /// A kit zip or tar.gz, its extracted top folder, or a folder holding that top folder.
    pub path: PathBuf,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `verify`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = kit::verify(&args.path)?;
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render(&report))?;
    }
    if report.ok() {
        Ok(ExitCode::SUCCESS)
    } else {
        let n = report.failures.len();
        Ok(crate::exit::fail(
            &format!(
                "{} failed verification ({n} failure{})",
                report.path,
                if n == 1 { "" } else { "s" }
            ),
            1,
        ))
    }
}

fn render(report: &kit::Report) -> String {
    let source = match report.source {
        kit::Source::Zip => "zip",
        kit::Source::TarGz => "tar.gz",
        kit::Source::Folder => "folder",
    };
    let mut text = format!("{} ({source}", report.path);
    if let Some(root) = &report.root {
        text.push_str(&format!(
            ", manifest in {}",
            if root.is_empty() { "." } else { root }
        ));
    }
    text.push_str(&format!("): {} members listed\n", report.listed));
    let section = |text: &mut String, name: &str, ok: bool, summary: String, completeness: bool| {
        text.push_str(&format!("{name}: {}", if ok { "yes" } else { "no" }));
        if ok {
            text.push_str(&format!(" ({summary})"));
        }
        text.push('\n');
        let mut listed = 0;
        for f in report
            .failures
            .iter()
            .filter(|f| f.failure.is_completeness() == completeness)
        {
            text.push_str(&format!("  {}\n", f.message));
            listed += 1;
        }
        if !ok && listed == 0 {
            text.push_str("  not checked: there is no usable manifest to check against\n");
        }
    };
    section(
        &mut text,
        "complete",
        report.complete,
        "nothing missing, nothing unexpected, no unsafe path".to_string(),
        true,
    );
    section(
        &mut text,
        "valid",
        report.valid,
        format!(
            "{} sizes and {} SHA-256 match; MANIFEST.json is checked by size",
            report.sizes_matched, report.hashes_matched
        ),
        false,
    );
    text
}
