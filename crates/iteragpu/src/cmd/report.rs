//! `iteragpu report`: measurement, probe, price, fit and ledger documents and sweep folders as
//! one self-contained HTML page.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::SystemTime;

use lab_io::files;
use report::{Meta, ReportError};
use serde::Serialize;

use crate::exit::usage;
use crate::output;

/// Options of `report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu report runs/batch --output report.html
  iteragpu report h100/run.json a100/run.json sweeps/width --output compare.html
  iteragpu report run.json probe.json --output with-probe.html
  iteragpu price --gpu h100-sxm --days 7 --lots 1 --accepted-results 500 --json > price.json
  iteragpu report sweeps/width price.json --output with-cost.html

The page stands alone: inline SVG charts and styles, no script, no fonts, no network (a
Content-Security-Policy forbids every fetch). Runs side by side share their axes. A probe
document (`iteragpu probe`) is drawn as per-GPU bars against the datasheet line. The page
leads with the verdicts, failing ones first: a fleet's folder its `fleet check` verdict, a
`fit --json` document whether any package fits (then its decision table: fits, tight or does
not fit, headroom, largest context and batch, decode ceiling, price per Mtok, the engine's
budget per GPU). The JSON of `iteragpu price` and `cost` (--json) adds a cost section: each
package, its price and the price per accepted result. A sweep's
documents are read only by the plain file names its summary.csv gives, inside its folder; each
document is read within 16 MiB and all inputs together within 64 MiB.")]
pub struct Args {
    /// Measurement, probe, price, fit and ledger documents (.json) and folders: a folder holding
    /// summary.csv is a sweep; any other folder contributes every .json document in it.
    #[arg(required = true, value_name = "FILES_OR_DIRS")]
    pub inputs: Vec<PathBuf>,
    /// The HTML file to create; it must not exist yet.
    #[arg(long)]
    pub output: PathBuf,
    /// Print what was written as JSON instead of a sentence.
    #[arg(long)]
    pub json: bool,
}

/// What `report --json` prints.
#[derive(Debug, Serialize)]
struct Written {
    output: PathBuf,
    runs: usize,
    sweeps: usize,
    probes: usize,
    /// Price, fit and ledger documents (`price`, `fit` and `cost` with --json).
    costs: usize,
    charts: usize,
    bytes: usize,
}

/// Runs `report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    files::check_new(&args.output).map_err(|e| usage(e.to_string()))?;
    let inputs = report::load(&args.inputs).map_err(|e| match e {
        ReportError::Missing(_) => usage(e.to_string()),
        ReportError::Input(ref i) if i.is_not_found() => usage(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    let mut inputs = inputs;
    inputs.verdicts.extend(fleet_verdicts(&args.inputs));
    let meta = Meta {
        tool: format!("iteragpu {}", env!("CARGO_PKG_VERSION")),
        generated_utc: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    };
    let html = report::render(&inputs, &meta)?;
    let written = files::write_new(&args.output, html.as_bytes())?;
    if let Some(warning) = written.warning(&args.output) {
        output::warn(&warning);
    }
    let written = Written {
        output: args.output.clone(),
        runs: inputs.runs.len(),
        sweeps: inputs.sweeps.len(),
        probes: inputs.probes.len(),
        costs: inputs.money.len(),
        charts: html.matches("<figure class=\"chart\"").count(),
        bytes: html.len(),
    };
    if args.json {
        output::print_json(&written)?;
    } else {
        // Probes are named only when there are some: a page of measurements reads as before.
        let probes = if written.probes > 0 {
            format!("{} probe(s), ", written.probes)
        } else {
            String::new()
        };
        let costs = if written.costs > 0 {
            format!("{} cost document(s), ", written.costs)
        } else {
            String::new()
        };
        output::print_text(&format!(
            "wrote {}: {} run(s), {} sweep(s), {probes}{costs}{} charts ({} bytes, self-contained)\n",
            written.output.display(),
            written.runs,
            written.sweeps,
            written.charts,
            written.bytes
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The verdict of every input that is a fleet's folder (it holds the plan, the job's node list,
/// or node folders with exit codes): the page leads with it.
fn fleet_verdicts(paths: &[PathBuf]) -> Vec<report::Verdict> {
    let is_fleet = |p: &std::path::Path| {
        p.join(fleet::PLAN_FILE).is_file()
            || p.join(fleet::slurm::NODES).is_file()
            || std::fs::read_dir(p).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    fleet::Check::ALL
                        .iter()
                        .any(|c| e.path().join(format!("{c}.exit")).is_file())
                })
            })
    };
    paths
        .iter()
        .filter(|p| p.is_dir() && is_fleet(p))
        .map(|p| {
            let v = match fleet::check::check(p, &fleet::check::CheckOptions::default()) {
                Ok(v) => v,
                // A fleet the check cannot read has no verdict: the page says so rather than
                // leave the verdict out.
                Err(e) => {
                    return report::Verdict {
                        label: p.display().to_string(),
                        standing: report::Standing::Warns,
                        headline: "verdict: not checked: `fleet check` could not read this \
                                   folder"
                            .to_string(),
                        lines: vec![(report::Standing::Warns, e.to_string())],
                    };
                }
            };
            let mut lines: Vec<(report::Standing, String)> = v
                .findings
                .iter()
                .map(|f| {
                    let (standing, word) = match f.effect {
                        fleet::check::Effect::Fails => (report::Standing::Fails, "FAIL"),
                        fleet::check::Effect::Warns => (report::Standing::Warns, "warn"),
                    };
                    (
                        standing,
                        format!("{word} {}: {} (why: {})", f.code, f.message, f.why),
                    )
                })
                .collect();
            lines.extend(
                v.not_checked
                    .iter()
                    .map(|n| (report::Standing::Warns, format!("not checked: {n}"))),
            );
            // The network between the nodes: its verdict, then its curve per size and pairs.
            if let Some(c) = &v.collective {
                let standing = match c.verdict.as_str() {
                    "passed" => report::Standing::Ok,
                    "failed" => report::Standing::Fails,
                    _ => report::Standing::Warns,
                };
                for (i, line) in fleet::check::collective_lines(c).into_iter().enumerate() {
                    let s = if i == 0 {
                        standing
                    } else {
                        report::Standing::Ok
                    };
                    lines.push((s, line));
                }
            }
            let warned = v
                .findings
                .iter()
                .any(|f| f.effect == fleet::check::Effect::Warns);
            report::Verdict {
                label: p.display().to_string(),
                standing: match (v.ok, warned) {
                    (false, _) => report::Standing::Fails,
                    (true, true) => report::Standing::Warns,
                    (true, false) => report::Standing::Ok,
                },
                headline: fleet::check::verdict_line(&v),
                lines,
            }
        })
        .collect()
}
