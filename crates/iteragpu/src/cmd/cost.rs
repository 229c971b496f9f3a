//! `iteragpu cost`: the price of one accepted useful unit, per rental and for all rentals
//! together, from the results grid.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use ledger::cost::{CostReport, RentalCost, Total};
use rent::catalogue::Catalogue;
use rent::price::{cents_to_amount, decimal_cents_to_amount};

use crate::{exit, output};

/// Options of `cost`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  iteragpu cost --results data/resultats-bruts.csv
  iteragpu cost --results data/resultats-bruts.csv --catalogue my-tariffs.csv --json

Per rental (one package bought, named by `record --rental`): the whole package price (lot price
x lots) divided by its accepted units, rounded half to even to 1/10000 of a cent. Only runs that
met the protocol's threshold count; a corpus run several times on a rental counts once, by the
protocol's aggregation rule (best, last or mean of those runs). A rental with no run meeting the
threshold has no unit price, and says why. All rentals together: the sum of their prices over
their distinct accepted units, each corpus counted once however many rentals ran it. Runs
recorded with --allow-device-mismatch are listed under their rental.")]
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
    let catalogue = Catalogue::load(args.catalogue.as_deref())?;
    let report = ledger::cost::cost(&args.results, &catalogue).map_err(exit::ledger)?;
    if args.json {
        output::print_json(&report)?;
    } else {
        output::print_text(&render(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn rental(s: &mut String, r: &RentalCost) {
    let star = if r.example_price {
        " (EXAMPLE price)"
    } else {
        ""
    };
    let _ = writeln!(s, "\nrental {}: {} ({})", r.rental, r.package, r.model);
    let _ = writeln!(
        s,
        "  runs                 {} ({} met the protocol's threshold)",
        r.runs, r.runs_meeting_threshold
    );
    for c in &r.corpora {
        let counted = if c.runs_meeting_threshold == 0 && c.runs == 1 {
            "its one run did not meet the threshold".to_string()
        } else if c.runs_meeting_threshold == 0 {
            format!("none of its {} runs met the threshold", c.runs)
        } else {
            format!(
                "{} the {} that met the threshold",
                c.aggregation.of(),
                plural(c.runs_meeting_threshold, "run")
            )
        };
        let _ = writeln!(
            s,
            "  corpus {:<13} {} accepted ({counted})",
            c.corpus_id, c.accepted_units
        );
    }
    let _ = writeln!(s, "  accepted units       {}", r.accepted_units);
    let _ = writeln!(
        s,
        "  package price        {} {} ({} cents){star}",
        r.currency,
        cents_to_amount(r.total_price_cents),
        r.total_price_cents
    );
    unit_line(
        s,
        &r.currency,
        r.unit_price_cents,
        r.accepted_units,
        r.no_unit_price.as_deref(),
        star,
    );
    // One line per device, listing its runs' lines.
    let mut devices: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for m in &r.device_mismatches {
        match devices
            .iter_mut()
            .find(|(model, uuid, _)| *model == m.device_model && *uuid == m.device_uuid)
        {
            Some((_, _, lines)) => lines.push(m.line.to_string()),
            None => devices.push((&m.device_model, &m.device_uuid, vec![m.line.to_string()])),
        }
    }
    for (model, uuid, lines) in devices {
        let _ = writeln!(
            s,
            "  device mismatch      line{} {}: measured on {model} ({uuid}), not an {} (--allow-device-mismatch)",
            if lines.len() == 1 { "" } else { "s" },
            lines.join(", "),
            r.model
        );
    }
}

fn unit_line(
    s: &mut String,
    currency: &str,
    unit: Option<rust_decimal::Decimal>,
    units: u64,
    why: Option<&str>,
    star: &str,
) {
    match unit {
        Some(unit) => {
            let _ = writeln!(
                s,
                "  per accepted unit    {currency} {} ({unit} cents = price / {units}, rounded half to even to 1/10000 cent){star}",
                decimal_cents_to_amount(unit),
            );
        }
        None => {
            let _ = writeln!(
                s,
                "  per accepted unit    none: {}",
                why.unwrap_or("no accepted units")
            );
        }
    }
}

fn total(s: &mut String, t: &Total) {
    let star = if t.example_price {
        " (EXAMPLE price)"
    } else {
        ""
    };
    let _ = writeln!(s, "\nall {} together", plural(t.rentals, "rental"));
    let _ = writeln!(
        s,
        "  price                {} {} ({} cents){star}",
        t.currency,
        cents_to_amount(t.total_price_cents),
        t.total_price_cents
    );
    let _ = writeln!(
        s,
        "  distinct accepted    {} (each corpus once, however many rentals ran it)",
        t.accepted_units
    );
    unit_line(
        s,
        &t.currency,
        t.unit_price_cents,
        t.accepted_units,
        t.no_unit_price.as_deref(),
        star,
    );
}

fn render(report: &CostReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {}, {}, prices from the catalogue {}",
        report.results,
        plural(report.runs, "run"),
        plural(report.rentals.len(), "rental"),
        report.catalogue
    );
    if report.rentals.is_empty() {
        let _ = writeln!(s, "no runs recorded yet: `iteragpu record` adds them");
        return s;
    }
    for r in &report.rentals {
        rental(&mut s, r);
    }
    // With one rental the total is that rental: said once.
    if report.rentals.len() > 1 {
        for t in &report.totals {
            total(&mut s, t);
        }
    }
    if report.rentals.iter().any(|r| r.example_price) {
        let _ = writeln!(
            s,
            "\nEXAMPLE prices are not real quotes: the catalogue rows say so in their source."
        );
    }
    s
}
