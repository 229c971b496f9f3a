//! `iteragpu price`: the price of a package from the tariff catalogue, and of one accepted result.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use rent::catalogue::{Catalogue, Tariff};
use rent::price::{
    PriceError, Quote, cents_to_amount, decimal_cents_to_amount, parse_accepted_results,
    parse_days, parse_lots, quote,
};
use serde::Serialize;

use crate::output;

const EXAMPLES: &str = "\
Examples:
  iteragpu price --gpu b200 --days 7 --lots 2
  iteragpu price --gpu h100-sxm --days 30 --lots 1 --accepted-results 1200
  iteragpu price --list
  iteragpu price --gpu l40s --days 3 --lots 4 --catalogue my-tariffs.csv --json

The total is the lot price x lots (a lot price already covers all GPUs of the lot; a B200 lot
holds two). With --accepted-results N, the unit price is the whole package price / N, rounded
half to even to 1/10000 of a cent; an N so large that it would round to 0 is refused, never
printed as a price of 0. Counts (L, N) are plain digits: no sign, spaces or leading zeros.
Without --accepted-results the unit price is not computed (null in JSON).
The bundled catalogue's prices are examples, not quotes. A package price says nothing about
availability and is not a reservation.";

/// Options of `price`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// GPU slug from the catalogue (b200, h100-sxm, ...; `price --list` shows them all).
    #[arg(long, value_name = "GPU", required_unless_present = "list")]
    pub gpu: Option<String>,

    /// Package duration in days: 3, 7 or 30.
    #[arg(long, value_name = "D", value_parser = parse_days, allow_hyphen_values = true,
          required_unless_present = "list")]
    pub days: Option<u32>,

    /// Number of lots (a positive whole number in plain digits). The lot price is multiplied by
    /// it.
    #[arg(long, value_name = "L", value_parser = parse_lots, allow_hyphen_values = true,
          required_unless_present = "list")]
    pub lots: Option<u64>,

    /// The number of distinct accepted useful results the package produced (a positive whole
    /// number in plain digits: no sign, spaces or leading zeros). No default: repetitions of one
    /// benchmark are not new results.
    #[arg(long, value_name = "N", value_parser = parse_accepted_results,
          allow_hyphen_values = true)]
    pub accepted_results: Option<u64>,

    /// A tariff CSV to use instead of the bundled one (same columns; validated on load).
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,

    /// Print the whole catalogue as a table instead of pricing a package.
    #[arg(long, conflicts_with_all = ["gpu", "days", "lots", "accepted_results"])]
    pub list: bool,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `price`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalogue = Catalogue::load(args.catalogue.as_deref())?;
    if args.list {
        return list(&catalogue, args.json);
    }
    let (Some(gpu), Some(days), Some(lots)) = (&args.gpu, args.days, args.lots) else {
        // clap enforces these unless --list; say so rather than assume it.
        return Err(crate::exit::usage(
            "--gpu, --days and --lots are required unless --list is given",
        ));
    };
    let q = quote(&catalogue, gpu, days, lots, args.accepted_results).map_err(usage_or_failure)?;
    if args.json {
        output::print_json(&q)?;
    } else {
        let tariff = catalogue
            .find(gpu, days)
            .context("the priced package vanished from the catalogue")?;
        output::print_text(&render(&q, tariff))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Every pricing error comes from what the user asked for: exit 2.
fn usage_or_failure(err: PriceError) -> anyhow::Error {
    crate::exit::usage(err.to_string())
}

/// The catalogue as JSON: its name and its rows with the CSV's columns.
#[derive(Debug, Serialize)]
struct Listing<'a> {
    catalogue: &'a str,
    rows: &'a [Tariff],
}

fn list(catalogue: &Catalogue, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        output::print_json(&Listing {
            catalogue: catalogue.name(),
            rows: catalogue.rows(),
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let head = [
        "gpu",
        "model",
        "GPUs/lot",
        "GB/GPU",
        "usable MiB",
        "days",
        "lot price",
        "currency",
    ];
    let cells: Vec<[String; 8]> = catalogue
        .rows()
        .iter()
        .map(|t| {
            [
                t.gpu.clone(),
                t.model.clone(),
                t.gpus_per_lot.to_string(),
                t.vendor_memory_gb.to_string(),
                t.usable_memory_mib.to_string(),
                t.days.to_string(),
                format!(
                    "{}{}",
                    cents_to_amount(t.price_cents),
                    if t.is_example() { "*" } else { "" }
                ),
                t.currency.clone(),
            ]
        })
        .collect();
    let mut widths = head.map(str::len);
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Text columns left-aligned, numbers right-aligned.
    let numeric = [false, false, true, true, true, true, true, false];
    let line = |fields: &[String]| {
        let mut out = String::new();
        for (i, field) in fields.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            if numeric[i] {
                let _ = write!(out, "{field:>w$}", w = widths[i]);
            } else if i + 1 == fields.len() {
                out.push_str(field);
            } else {
                let _ = write!(out, "{field:<w$}", w = widths[i]);
            }
        }
        out.push('\n');
        out
    };
    let mut s = line(&head.map(str::to_string));
    for row in &cells {
        s.push_str(&line(row));
    }
    let examples = catalogue.rows().iter().filter(|t| t.is_example()).count();
    let _ = writeln!(
        s,
        "\n{} packages ({} GPU models) from the catalogue {}. A lot price covers all GPUs of the lot, for the whole duration.",
        catalogue.rows().len(),
        catalogue.gpus().len(),
        catalogue.name()
    );
    if examples > 0 {
        let _ = writeln!(
            s,
            "* {examples} of these prices are EXAMPLES, not real quotes (their source says so)."
        );
    }
    let _ = writeln!(
        s,
        "GB/GPU is the vendor's published memory; usable MiB is the total a CUDA/ROCm process sees (what `iteragpu fit` compares against; each row's source says where it was observed)."
    );
    let _ = writeln!(
        s,
        "A catalogue price is not availability or a reservation: check the provider's offer before buying."
    );
    output::print_text(&s)?;
    Ok(ExitCode::SUCCESS)
}

/// The human report of one package.
fn render(q: &Quote, tariff: &Tariff) -> String {
    let example = if q.is_example() {
        " (EXAMPLE price)"
    } else {
        ""
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ({}), {}-day package, {} lot{}",
        q.model,
        q.gpu,
        q.days,
        q.lots,
        if q.lots == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "  GPUs               {} ({} per lot x {} lot{})",
        q.total_gpus,
        q.gpus_per_lot,
        q.lots,
        if q.lots == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        s,
        "  lot price          {} {} ({} cents){example}",
        q.currency,
        cents_to_amount(q.lot_price_cents),
        q.lot_price_cents
    );
    let _ = writeln!(
        s,
        "  total price        {} {} ({} cents = lot price x {} lot{}){example}",
        q.currency,
        cents_to_amount(q.total_price_cents),
        q.total_price_cents,
        q.lots,
        if q.lots == 1 { "" } else { "s" }
    );
    match (q.accepted_results, q.unit_price_cents) {
        (Some(n), Some(unit)) => {
            let _ = writeln!(s, "  accepted results   {n}");
            let _ = writeln!(
                s,
                "  unit price         {} {} per accepted result ({unit} cents = total / {n}, rounded half to even to 1/10000 cent){example}",
                q.currency,
                decimal_cents_to_amount(unit)
            );
        }
        _ => {
            let _ = writeln!(s, "  accepted results   not given");
            let _ = writeln!(
                s,
                "  unit price         not computed (--accepted-results N gives the price per accepted result)"
            );
        }
    }
    let _ = writeln!(
        s,
        "  catalogue          {} (snapshot {})",
        q.catalogue, tariff.snapshot_date
    );
    let _ = writeln!(s, "  source             {}", q.source);
    let _ = writeln!(s);
    if q.is_example() {
        let _ = writeln!(
            s,
            "These are EXAMPLE prices, not a real quote: the catalogue row says so in its source."
        );
    }
    let _ = writeln!(
        s,
        "A package price is not availability or a reservation: check the provider's offer before buying."
    );
    s
}
