//! `iteragpu record`: append one validated run to the results grid.

use std::path::PathBuf;
use std::process::ExitCode;

use ledger::{Package, RecordRequest};
use serde::Serialize;

use crate::output;

/// Options of `record`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu record --results data/resultats-bruts.csv --protocol protocol.txt \\
      --measurement m.json --package b200:7:2 --submitted 500 --accepted 473
  iteragpu record --results data/resultats-bruts.csv --protocol protocol.txt \\
      --measurement m2.json --package h100-sxm:3:1 --submitted 500 --accepted 488 --notes \"second run\"

The protocol must be locked and unchanged; the measurement must be complete and not yet in the
grid. Appends hold an exclusive lock on the grid, so concurrent `record`s lose nothing.")]
pub struct Args {
    /// The results grid (created with its header if it does not exist).
    #[arg(long)]
    pub results: PathBuf,

    /// The locked protocol the units were judged by.
    #[arg(long)]
    pub protocol: PathBuf,

    /// The measurement document written by `iteragpu measure`.
    #[arg(long)]
    pub measurement: PathBuf,

    /// The rented package: GPU:DAYS:LOTS, e.g. b200:7:2 (days 3, 7 or 30; lots >= 1).
    #[arg(long, value_parser = parse_package)]
    pub package: Package,

    /// Units submitted to the judge (1 or more, at most the protocol's corpus_size).
    #[arg(long)]
    pub submitted: u64,

    /// Units the judge accepted (at most --submitted).
    #[arg(long)]
    pub accepted: u64,

    /// One line of free text for the notes column.
    #[arg(long)]
    pub notes: Option<String>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_package(s: &str) -> Result<Package, String> {
    s.parse().map_err(|e: ledger::LedgerError| e.to_string())
}

#[derive(Serialize)]
struct Report<'a> {
    results: String,
    line: u64,
    created: bool,
    row: &'a ledger::Row,
}

/// Runs `record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let recorded = ledger::record(&RecordRequest {
        results: args.results.clone(),
        protocol: args.protocol,
        measurement: args.measurement,
        package: args.package,
        submitted: args.submitted,
        accepted: args.accepted,
        notes: args.notes,
    })
    .map_err(super::protocol::classify)?;
    let row = &recorded.row;
    if args.json {
        output::print_json(&Report {
            results: args.results.display().to_string(),
            line: recorded.line,
            created: recorded.created,
            row,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    output::print_text(&format!(
        "recorded run {} in {}, line {}{}\n  package {}, {} of {} units accepted (threshold {}: {})\n  device {} ({}, driver {}), started {}\n",
        row.run_id,
        args.results.display(),
        recorded.line,
        if recorded.created { " (new grid)" } else { "" },
        row.package,
        row.units_accepted,
        row.units_submitted,
        row.acceptance_threshold,
        if row.threshold_met { "met" } else { "not met" },
        row.device_model,
        row.device_uuid,
        row.driver_version,
        row.date_utc,
    ))?;
    Ok(ExitCode::SUCCESS)
}
