//! `iteragpu cost`: the price of one accepted useful unit, per package, from the results grid.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use lab::catalogue::Catalogue;
use lab::price::{cents_to_amount, decimal_cents_to_amount};

use crate::output;

/// Options of `cost`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu cost --results data/resultats-bruts.csv
  iteragpu cost --results data/resultats-bruts.csv --catalogue my-tariffs.csv --json

Per package (GPU:DAYS:LOTS): the whole package price (lot price x lots) divided by the distinct
accepted units, rounded half to even to 1/10000 of a cent; null without accepted units.
Repeated runs on the same corpus are not new units: each corpus counts once, with its best run.")]
pub struct Args {
    /// The results grid written by `iteragpu record`.
    #[arg(long)]
    pub results: PathBuf,

    /// A tariff catalogue to use instead of the bundled one (same columns).
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `cost`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalogue = match &args.catalogue {
        Some(path) => Catalogue::from_path(path)?,
        None => Catalogue::embedded(),
    };
    let report = ledger::cost::cost(&args.results, &catalogue)?;
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn render(report: &ledger::cost::CostReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} run{}, {} package{}, prices from the catalogue {}",
        report.results,
        report.runs,
        if report.runs == 1 { "" } else { "s" },
        report.packages.len(),
        if report.packages.len() == 1 { "" } else { "s" },
        report.catalogue
    );
    if report.packages.is_empty() {
        let _ = writeln!(s, "no runs recorded yet: `iteragpu record` adds them");
        return s;
    }
    for p in &report.packages {
        let star = if p.example_price {
            " (EXAMPLE price)"
        } else {
            ""
        };
        let _ = writeln!(s, "\n{} ({})", p.package, p.model);
        let _ = writeln!(
            s,
            "  runs                 {} ({} met the protocol's threshold)",
            p.runs, p.runs_meeting_threshold
        );
        for c in &p.corpora {
            let _ = writeln!(
                s,
                "  corpus {:<13} {} accepted (best of {} run{})",
                c.corpus_id,
                c.accepted_units,
                c.runs,
                if c.runs == 1 { "" } else { "s" }
            );
        }
        let _ = writeln!(s, "  distinct accepted    {}", p.accepted_units);
        let _ = writeln!(
            s,
            "  package price        {} {} ({} cents){star}",
            p.currency,
            cents_to_amount(p.total_price_cents),
            p.total_price_cents
        );
        match p.unit_price_cents {
            Some(unit) => {
                let _ = writeln!(
                    s,
                    "  per accepted unit    {} {} ({unit} cents = package price / {}, rounded half to even to 1/10000 cent){star}",
                    p.currency,
                    decimal_cents_to_amount(unit),
                    p.accepted_units
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "  per accepted unit    none (no accepted units: there is no price per nothing)"
                );
            }
        }
    }
    if report.packages.iter().any(|p| p.example_price) {
        let _ = writeln!(
            s,
            "\nEXAMPLE prices are not real quotes: the catalogue rows say so in their source."
        );
    }
    s
}
