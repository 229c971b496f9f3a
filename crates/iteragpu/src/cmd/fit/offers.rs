//! `fit --offers FILE`: real hourly offers (a SkyPilot catalogue file) priced for the package
//! durations, beside the package table. The rules are `rent::offers`'; this module loads, joins
//! the package table and renders.

use std::fmt::Write as _;
use std::path::Path;

use rent::catalogue::DURATIONS;
use rent::fit::FitOption;
use rent::offers::{Mapping, Offer, OfferPrice, OffersSection};
use rent::price::cents_to_amount;
use serde::Serialize;

/// A `fit` document with the `offers` key after its own keys: the section, or `null` without
/// `--offers`. The document's keys and their order are untouched.
#[derive(Debug, Serialize)]
pub struct WithOffers<'a, T: Serialize> {
    /// The document as `fit` builds it.
    #[serde(flatten)]
    pub document: &'a T,
    /// The offers section.
    pub offers: Option<&'a OffersSection>,
}

/// The offers of `path` (when given) for `days` (or every package duration), with each offer's
/// fit taken from the package table `options`: at most `limit` of each duration (the first by
/// the offers' order), read row by row without keeping the rows (`rent::offers::read`).
pub fn section(
    path: Option<&Path>,
    days: Option<u32>,
    options: &[FitOption],
    limit: Option<usize>,
) -> anyhow::Result<Option<OffersSection>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let durations: Vec<u32> = match days {
        Some(d) => vec![d],
        None => DURATIONS.to_vec(),
    };
    let section = rent::offers::read(path, &Mapping::embedded(), &durations, options, limit)?;
    Ok(Some(section))
}

fn amount(currency: &str, price: Option<&OfferPrice>) -> String {
    match price {
        Some(p) => format!("{currency} {}", cents_to_amount(p.total_cents)),
        None => "none".to_string(),
    }
}

fn place(price: Option<&OfferPrice>) -> String {
    match price {
        Some(p) => match &p.zone {
            Some(zone) => format!("{} {zone} row {}", p.region, p.row),
            None => format!("{} row {}", p.region, p.row),
        },
        None => String::new(),
    }
}

fn fits(offer: &Offer) -> &'static str {
    match &offer.fit {
        Some(f) if f.fits && f.heads_divisible == Some(false) => "yes!",
        Some(f) if f.fits => "yes",
        Some(_) => "no",
        None => "?",
    }
}

/// The text section printed after the package table: empty without `--offers`.
pub fn render(section: Option<&OffersSection>) -> String {
    let Some(s) = section else {
        return String::new();
    };
    let mut out = String::new();
    let short = Path::new(&s.file)
        .file_name()
        .map_or_else(|| s.file.clone(), |n| n.to_string_lossy().into_owned());
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Offers from {}, dated {} ({}); prices in {} per hour ({}).",
        s.file, s.date, s.date_source, s.currency, s.currency_source
    );
    let head = [
        "instance",
        "accelerator",
        "gpu",
        "GPUs",
        "days",
        "fits",
        "on demand",
        "at",
        "spot",
        "at",
        "source",
    ];
    let cells: Vec<[String; 11]> = s
        .offers
        .iter()
        .map(|o| {
            [
                o.instance_type.clone(),
                o.accelerator_name.clone(),
                o.gpu.clone(),
                o.gpus.to_string(),
                o.days.to_string(),
                fits(o).to_string(),
                amount(&o.currency, o.on_demand.as_ref()),
                place(o.on_demand.as_ref()),
                amount(&o.currency, o.spot.as_ref()),
                place(o.spot.as_ref()),
                format!("{short} {}", o.date),
            ]
        })
        .collect();
    if cells.is_empty() {
        let _ = writeln!(
            out,
            "No instance of the file has whole GPUs that the mapping ({}) names.",
            s.mapping
        );
    } else {
        let mut widths = head.map(str::len);
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let right = [3usize, 4, 6, 8];
        let line = |fields: &[String]| {
            let mut text = String::new();
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                if right.contains(&i) {
                    let _ = write!(text, "{f:>w$}", w = widths[i]);
                } else {
                    let _ = write!(text, "{f:<w$}", w = widths[i]);
                }
            }
            text.truncate(text.trim_end().len());
            text.push('\n');
            text
        };
        out.push_str(&line(&head.map(str::to_string)));
        for row in &cells {
            out.push_str(&line(row));
        }
    }
    if let Some(limit) = s.limit
        && (limit as u64) < s.instance_types
    {
        let _ = writeln!(
            out,
            "The first {limit} of {} instance types for each duration (--limit N; --all lists every one).",
            s.instance_types
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Priced: {}.", s.price_rule);
    let _ = writeln!(
        out,
        "none: {}. Spot prices are those of the day the file was fetched, and spot capacity can be reclaimed.",
        s.empty_cells
    );
    let _ = writeln!(
        out,
        "fits: {}.",
        s.fit_rule.replace("null where", "? where")
    );
    if s.offers.iter().any(|o| fits(o) == "yes!") {
        let _ = writeln!(
            out,
            "yes! = fits, but the GPU count does not divide the attention or KV heads: engines refuse it or replicate KV heads."
        );
    }
    let k = &s.skipped;
    let mut left_out = Vec::new();
    if k.without_accelerator > 0 {
        left_out.push(format!(
            "{} rows without an accelerator",
            k.without_accelerator
        ));
    }
    if k.accelerator_only > 0 {
        left_out.push(format!(
            "{} accelerator rows without an instance type (priced apart from their host VM)",
            k.accelerator_only
        ));
    }
    if k.fractional_gpus > 0 {
        left_out.push(format!("{} rows of a fraction of a GPU", k.fractional_gpus));
    }
    if !k.unmapped.is_empty() {
        let names: Vec<String> = k
            .unmapped
            .iter()
            .map(|u| {
                format!(
                    "{} ({} rows from row {})",
                    u.accelerator_name, u.rows, u.first_row
                )
            })
            .collect();
        left_out.push(format!(
            "accelerators the mapping ({}) does not name: {}",
            s.mapping,
            names.join(", ")
        ));
    }
    if !left_out.is_empty() {
        let _ = writeln!(
            out,
            "Not priced ({} rows read): {}.",
            s.rows,
            left_out.join("; ")
        );
    }
    out
}
