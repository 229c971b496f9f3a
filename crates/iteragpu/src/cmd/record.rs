//! `iteragpu record`: append one validated run to the results grid.

use std::path::PathBuf;
use std::process::ExitCode;

use ledger::{Package, RecordRequest};
use serde::Serialize;

use crate::{exit, output};

/// Options of `record`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu record --results data/resultats-bruts.csv --protocol protocol.txt \\
      --measurement m.json --rental h200-sept-a --package h200:7:1 --submitted 500 --accepted 473
  iteragpu record --results data/resultats-bruts.csv --protocol protocol.txt \\
      --measurement m2.json --rental h200-sept-a --package h200:7:1 --submitted 500 --accepted 468 \\
      --notes \"rerun, same corpus\"
  iteragpu record --results rehearsal.csv --protocol protocol.txt --measurement cpu.json \\
      --rental rehearsal --package h200:7:1 --submitted 10 --accepted 10 --allow-device-mismatch

A rental is one package you paid for: give every run made on it the same --rental name and
--package; a second rental of the same package gets another name (and costs again). The package
must be in the tariff catalogue (--catalogue, as for `cost`), the measurement must come from the
package's GPU (a CPU reference run or another GPU is refused unless --allow-device-mismatch,
which the row and `cost` then show), the protocol must be locked and unchanged, and the
measurement complete, possible (at least one phase, a passed check, every time finite, 0 or
more and within the package's days, a start and an end no later than 5 minutes past this
machine's clock) and not yet in the grid. A document is not signed: one written by hand that
passes these checks is recorded as that run, and the row keeps its SHA-256. The row is added
all or nothing under an exclusive lock on the grid, so concurrent or interrupted `record`s
never lose or tear a row. A grid holds at most 64 MiB, the most `record` and `cost` read: a
row that would take it past that is refused and the grid left as it was; record the next runs
with --results naming a new file.
Exit codes: 0 recorded; 1 a file that fails its checks (protocol, measurement, grid); 2 a bad
option, a --protocol, --measurement or --catalogue that is not there, a package the catalogue does not sell, a device mismatch, or a grid that cannot be
written where asked (a link to nothing, or full).")]
pub struct Args {
    /// The results grid (created with its header if it does not exist; at most 64 MiB).
    #[arg(long)]
    pub results: PathBuf,

    /// The locked protocol the units were judged by.
    #[arg(long)]
    pub protocol: PathBuf,

    /// The measurement document written by `iteragpu measure` on the rented GPU.
    #[arg(long)]
    pub measurement: PathBuf,

    /// Your name for the rental (one package bought): letters, digits and . _ - :, e.g.
    /// h200-sept-a. Every run on it carries the same name.
    #[arg(long, value_name = "NAME")]
    pub rental: String,

    /// The rental's package: GPU:DAYS:LOTS, e.g. b200:7:2 (a GPU the catalogue sells, days 3, 7
    /// or 30, lots >= 1).
    #[arg(long, value_parser = crate::lot::parse_package)]
    pub package: Package,

    /// Units submitted to the judge (1 or more, at most the protocol's corpus_size), in plain
    /// digits: no sign, spaces or leading zeros.
    #[arg(long, value_parser = parse_submitted, allow_hyphen_values = true)]
    pub submitted: u64,

    /// Units the judge accepted (0 to --submitted), in plain digits: no sign, spaces or leading
    /// zeros.
    #[arg(long, value_parser = parse_accepted, allow_hyphen_values = true)]
    pub accepted: u64,

    /// One line of free text for the notes column (at most 1000 characters).
    #[arg(long)]
    pub notes: Option<String>,

    /// Record the run even though the measurement was not made on the package's GPU (the CPU
    /// reference device, or another GPU model); the row and `cost` say so.
    #[arg(long)]
    pub allow_device_mismatch: bool,

    /// The tariff catalogue the package must be in (same columns as the bundled one).
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--submitted`: a count as `price --accepted-results` reads one (one spelling, the grid's).
fn parse_submitted(s: &str) -> Result<u64, rent::units::CountError> {
    rent::units::parse_count("number of units submitted", s)
}

/// `--accepted`: the same, where 0 is a result (the judge accepted nothing).
fn parse_accepted(s: &str) -> Result<u64, rent::units::CountError> {
    rent::units::parse_whole("number of units accepted", s)
}

#[derive(Serialize)]
struct Report<'a> {
    results: String,
    line: u64,
    created: bool,
    model: &'a str,
    row: &'a ledger::Row,
}

/// Runs `record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalogue = rent::catalogue::Catalogue::load(args.catalogue.as_deref())?;
    let recorded = ledger::record(
        &RecordRequest {
            results: args.results.clone(),
            protocol: args.protocol,
            measurement: args.measurement,
            rental: args.rental,
            package: args.package,
            submitted: args.submitted,
            accepted: args.accepted,
            notes: args.notes,
            allow_device_mismatch: args.allow_device_mismatch,
        },
        &catalogue,
    )
    .map_err(exit::ledger)?;
    if let Some(warning) = &recorded.warning {
        output::warn(warning);
    }
    let row = &recorded.row;
    if args.json {
        output::print_json(&Report {
            results: args.results.display().to_string(),
            line: recorded.line,
            created: recorded.created,
            model: &recorded.model,
            row,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!(
        "recorded run {} in {}, line {}{}\n  rental {}, package {} ({}), {} of {} units accepted (threshold {}: {})\n  device {} ({}, driver {}), started {}\n",
        row.run_id,
        args.results.display(),
        recorded.line,
        if recorded.created { " (new grid)" } else { "" },
        row.rental,
        row.package,
        recorded.model,
        row.units_accepted,
        row.units_submitted,
        row.acceptance_threshold,
        if row.threshold_met { "met" } else { "not met" },
        row.device_model,
        row.device_uuid,
        row.driver_version,
        row.date_utc,
    );
    if row.device_mismatch {
        text.push_str(&format!(
            "  device mismatch: not measured on an {}; recorded with --allow-device-mismatch\n",
            recorded.model
        ));
    }
    output::print_text(&text)?;
    Ok(ExitCode::SUCCESS)
}
