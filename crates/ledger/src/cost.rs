//! `cost`: what one accepted useful unit cost, per rental and for all rentals together, from the
//! results grid and the tariff catalogue.
//!
//! The money rules are the original kit's, through [`rent::price`]: a rental costs its *whole*
//! package price (lot price x lots), divided by the distinct accepted units, an exact decimal
//! rounded once, half to even, to 1/10000 of a cent. What counts as accepted units:
//!
//! - Only runs whose acceptance rate met the protocol's threshold count. A rental with none has
//!   no unit price, and `cost` says why.
//! - A corpus run more than once on one rental is not new work: its accepted units are those of
//!   one run, chosen by the protocol's `aggregation` (best, last, or the mean rounded down, of
//!   the runs that met the threshold). A rental's accepted units are the sum over its corpora.
//! - Each rental is one package bought: two rentals of `h200:7:1` cost twice. All rentals
//!   together cost the sum of their prices, and their distinct accepted units count each corpus
//!   once, by the same rule over the runs of every rental: a second rental that reran the same
//!   corpus bought no new units.

use std::collections::BTreeMap;
use std::path::Path;

use rent::catalogue::Catalogue;
use rent::price::{quote, unit_price_cents};
use rust_decimal::Decimal;
use serde::Serialize;

use crate::error::LedgerError;
use crate::grid::{self, LineRow, Package};
use crate::protocol::Aggregation;

/// The accepted units one corpus contributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CorpusUnits {
    /// The corpus.
    pub corpus_id: String,
    /// The protocol it was judged by.
    pub protocol_sha256: String,
    /// The protocol's rule for repeated runs.
    pub aggregation: Aggregation,
    /// Runs of the corpus here.
    pub runs: usize,
    /// Of those, runs that met the protocol's threshold: the only ones that count.
    pub runs_meeting_threshold: usize,
    /// What the rule gives over those runs (0 without any).
    pub accepted_units: u64,
}

/// A run recorded on another device than its package's GPU (`--allow-device-mismatch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceMismatch {
    /// The row's line.
    pub line: u64,
    /// Its run id.
    pub run_id: String,
    /// What it was measured on.
    pub device_model: String,
    /// The device's UUID (`cpu-reference` for the CPU reference device).
    pub device_uuid: String,
}

/// The cost of one accepted unit on one rental.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RentalCost {
    /// The rental's name.
    pub rental: String,
    /// Its package (GPU slug, days, lots).
    #[serde(flatten)]
    pub package: Package,
    /// The GPU's display name from the catalogue.
    pub model: String,
    /// The rental's first line in the grid.
    pub first_line: u64,
    /// Rows of the grid for this rental.
    pub runs: usize,
    /// Of those, rows whose acceptance rate met the protocol's threshold.
    pub runs_meeting_threshold: usize,
    /// What each corpus contributes.
    pub corpora: Vec<CorpusUnits>,
    /// The sum over corpora.
    pub accepted_units: u64,
    /// Lot price x lots, whole cents.
    pub total_price_cents: u64,
    /// ISO 4217 code.
    pub currency: String,
    /// total / accepted units, half-even to 1/10000 cent; `null` without accepted units.
    pub unit_price_cents: Option<Decimal>,
    /// Why there is no unit price, when there is none.
    pub no_unit_price: Option<String>,
    /// Runs measured on another device than the package's GPU.
    pub device_mismatches: Vec<DeviceMismatch>,
    /// The catalogue row's `source` (the bundled rows say they are examples).
    pub source: String,
    /// True when that source says the price is an example, not a quote.
    pub example_price: bool,
}

/// All rentals together, in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Total {
    /// ISO 4217 code.
    pub currency: String,
    /// Rentals priced in it.
    pub rentals: usize,
    /// The sum of their package prices, whole cents.
    pub total_price_cents: u64,
    /// Distinct accepted units: each corpus once, by its protocol's rule over the runs of all
    /// these rentals that met the threshold.
    pub accepted_units: u64,
    /// total / accepted units; `null` without accepted units.
    pub unit_price_cents: Option<Decimal>,
    /// Why there is no unit price, when there is none.
    pub no_unit_price: Option<String>,
    /// True when any of the prices is an example.
    pub example_price: bool,
}

/// `cost` over a whole grid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CostReport {
    /// The grid read.
    pub results: String,
    /// The catalogue's path, or `embedded`.
    pub catalogue: String,
    /// Rows read.
    pub runs: usize,
    /// One entry per rental, in the order of their first row.
    pub rentals: Vec<RentalCost>,
    /// One entry per currency (one with the bundled catalogue), empty without rentals.
    pub totals: Vec<Total>,
}

/// Prices every rental of the grid at `results` with `catalogue`.
pub fn cost(results: &Path, catalogue: &Catalogue) -> Result<CostReport, LedgerError> {
    let grid = grid::read(results)?;
    let rentals = cost_rows(results, &grid.rows, catalogue)?;
    let totals = totals(&grid.rows, &rentals);
    Ok(CostReport {
        results: results.display().to_string(),
        catalogue: catalogue.name().to_string(),
        runs: grid.rows.len(),
        rentals,
        totals,
    })
}

/// Groups `rows` by corpus (each corpus has one protocol in a grid) and applies each protocol's
/// rule to the runs that met its threshold.
fn corpora(rows: &[&LineRow]) -> Vec<CorpusUnits> {
    let mut by_corpus: BTreeMap<&str, Vec<&LineRow>> = BTreeMap::new();
    for r in rows {
        by_corpus.entry(&r.row.corpus_id).or_default().push(r);
    }
    by_corpus
        .into_values()
        .map(|runs| {
            let first = &runs[0].row;
            let met: Vec<u64> = runs
                .iter()
                .filter(|r| r.row.threshold_met)
                .map(|r| r.row.units_accepted)
                .collect();
            CorpusUnits {
                corpus_id: first.corpus_id.clone(),
                protocol_sha256: first.protocol_sha256.clone(),
                aggregation: first.aggregation,
                runs: runs.len(),
                runs_meeting_threshold: met.len(),
                accepted_units: first.aggregation.apply(&met).unwrap_or(0),
            }
        })
        .collect()
}

fn sum_units(corpora: &[CorpusUnits]) -> Option<u64> {
    corpora
        .iter()
        .try_fold(0u64, |sum, c| sum.checked_add(c.accepted_units))
}

/// Why a set of runs has no unit price.
fn why_none(runs: usize) -> String {
    let which = if runs == 1 {
        "its one run did not meet".to_string()
    } else {
        format!("none of its {runs} runs met")
    };
    format!("{which} the protocol's minimum_acceptance_rate, so no unit counts as accepted")
}

/// The per-rental costs of `rows` (read from `path`, named in errors).
pub fn cost_rows(
    path: &Path,
    rows: &[LineRow],
    catalogue: &Catalogue,
) -> Result<Vec<RentalCost>, LedgerError> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_rental: BTreeMap<&str, Vec<&LineRow>> = BTreeMap::new();
    for row in rows {
        let entry = by_rental.entry(&row.row.rental).or_default();
        if entry.is_empty() {
            order.push(&row.row.rental);
        }
        entry.push(row);
    }
    let mut out = Vec::with_capacity(order.len());
    for rental in order {
        let rows = &by_rental[rental];
        let first = rows[0];
        let package = &first.row.package;
        let unpriced = |reason: String| LedgerError::Unpriced {
            path: path.to_path_buf(),
            line: first.line,
            message: format!(
                "rental {rental} ({package}) cannot be priced with the catalogue {}: {reason}",
                catalogue.name()
            ),
        };
        let q = quote(
            catalogue,
            &package.gpu,
            package.days,
            u64::from(package.lots),
            None,
        )
        .map_err(|e| unpriced(e.to_string()))?;
        let corpora = corpora(rows);
        let accepted_units = sum_units(&corpora)
            .ok_or_else(|| unpriced("the accepted units overflow a 64-bit count".into()))?;
        let runs_meeting_threshold = rows.iter().filter(|r| r.row.threshold_met).count();
        let (unit_price_cents, no_unit_price) = if accepted_units == 0 {
            (None, Some(why_none(rows.len())))
        } else {
            // The one refusal left (so many results that the price would show as 0) is said
            // in place of the price, never printed as a price of 0.
            match unit_price_cents(q.total_price_cents, accepted_units) {
                Ok(price) => (Some(price), None),
                Err(e) => (None, Some(e.to_string())),
            }
        };
        out.push(RentalCost {
            rental: rental.to_string(),
            package: package.clone(),
            model: q.model.clone(),
            first_line: first.line,
            runs: rows.len(),
            runs_meeting_threshold,
            corpora,
            accepted_units,
            total_price_cents: q.total_price_cents,
            currency: q.currency.clone(),
            unit_price_cents,
            no_unit_price,
            device_mismatches: rows
                .iter()
                .filter(|r| r.row.device_mismatch)
                .map(|r| DeviceMismatch {
                    line: r.line,
                    run_id: r.row.run_id.clone(),
                    device_model: r.row.device_model.clone(),
                    device_uuid: r.row.device_uuid.clone(),
                })
                .collect(),
            example_price: q.is_example(),
            source: q.source,
        });
    }
    Ok(out)
}

/// All rentals together, per currency.
fn totals(rows: &[LineRow], rentals: &[RentalCost]) -> Vec<Total> {
    let mut by_currency: BTreeMap<&str, Vec<&RentalCost>> = BTreeMap::new();
    for r in rentals {
        by_currency.entry(&r.currency).or_default().push(r);
    }
    by_currency
        .into_iter()
        .map(|(currency, rentals)| {
            let names: Vec<&str> = rentals.iter().map(|r| r.rental.as_str()).collect();
            let runs: Vec<&LineRow> = rows
                .iter()
                .filter(|r| names.contains(&r.row.rental.as_str()))
                .collect();
            let total_price_cents = rentals
                .iter()
                .try_fold(0u64, |sum, r| sum.checked_add(r.total_price_cents));
            let accepted_units = sum_units(&corpora(&runs));
            let (unit_price_cents, no_unit_price) = match (total_price_cents, accepted_units) {
                (Some(total), Some(n)) if n > 0 => match unit_price_cents(total, n) {
                    Ok(price) => (Some(price), None),
                    Err(e) => (None, Some(e.to_string())),
                },
                (Some(_), Some(_)) => (None, Some(why_none(runs.len()))),
                _ => (
                    None,
                    Some("the total overflows a 64-bit count of cents or units".to_string()),
                ),
            };
            Total {
                currency: currency.to_string(),
                rentals: rentals.len(),
                total_price_cents: total_price_cents.unwrap_or(u64::MAX),
                accepted_units: accepted_units.unwrap_or(u64::MAX),
                unit_price_cents,
                no_unit_price,
                example_price: rentals.iter().any(|r| r.example_price),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::{Row, threshold_met};
    use proptest::prelude::*;

    fn row(line: u64, rental: &str, package: &str, corpus: &str, accepted: u64) -> LineRow {
        row_with(
            line,
            rental,
            package,
            corpus,
            500,
            accepted,
            Aggregation::Best,
        )
    }

    fn row_with(
        line: u64,
        rental: &str,
        package: &str,
        corpus: &str,
        submitted: u64,
        accepted: u64,
        aggregation: Aggregation,
    ) -> LineRow {
        let sha = format!("{line:064x}");
        LineRow {
            line,
            row: Row {
                run_id: sha[..12].to_string(),
                date_utc: "2026-09-24T08:00:00Z".into(),
                protocol_sha256: "ab".repeat(32),
                corpus_id: corpus.into(),
                rental: rental.into(),
                package: package.parse().unwrap(),
                device_model: "x".into(),
                device_uuid: "GPU-1".into(),
                driver_version: "570".into(),
                device_mismatch: false,
                measurement_sha256: sha,
                units_submitted: submitted,
                units_accepted: accepted,
                acceptance_threshold: "0.9".into(),
                threshold_met: threshold_met(accepted, submitted, "0.9".parse().unwrap()),
                aggregation,
                notes: String::new(),
            },
        }
    }

    fn lot(gpu: &str, days: u32) -> u64 {
        Catalogue::embedded().find(gpu, days).unwrap().price_cents
    }

    #[test]
    fn reruns_of_a_corpus_are_not_new_units_and_only_passing_runs_count() {
        let c = Catalogue::embedded();
        let rows = [
            row(2, "a", "b200:7:2", "tickets-v3", 473),
            row(3, "a", "b200:7:2", "tickets-v3", 480),
            // Below the threshold: 20 of 500 accepted does not count at all.
            row(4, "a", "b200:7:2", "invoices-v1", 20),
            row(5, "b", "h100-sxm:3:1", "tickets-v3", 10),
        ];
        let costs = cost_rows(Path::new("g.csv"), &rows, &c).unwrap();
        assert_eq!(costs.len(), 2);
        let a = &costs[0];
        assert_eq!(
            (a.rental.as_str(), a.runs, a.runs_meeting_threshold),
            ("a", 3, 2)
        );
        assert_eq!(a.accepted_units, 480);
        assert_eq!(a.total_price_cents, 2 * lot("b200", 7));
        assert_eq!(
            a.unit_price_cents,
            Some(unit_price_cents(2 * lot("b200", 7), 480).unwrap())
        );
        let invoices = a
            .corpora
            .iter()
            .find(|c| c.corpus_id == "invoices-v1")
            .unwrap();
        assert_eq!(
            (
                invoices.runs,
                invoices.runs_meeting_threshold,
                invoices.accepted_units
            ),
            (1, 0, 0)
        );
        let b = &costs[1];
        assert_eq!(b.accepted_units, 0);
        assert_eq!(b.unit_price_cents, None);
        assert!(
            b.no_unit_price
                .as_deref()
                .unwrap()
                .contains("its one run did not meet"),
            "{b:?}"
        );
        let json = serde_json::to_value(b).unwrap();
        assert!(json["unit_price_cents"].is_null());
    }

    /// So many accepted units that the price of one would round to 0.0000 cents: no unit
    /// price, and the reason in its place, for the rental and for the total; never a price of 0.
    #[test]
    fn a_count_that_would_make_the_unit_price_zero_gives_no_unit_price_and_says_why() {
        let c = Catalogue::embedded();
        let n = u64::MAX / 2;
        let rows = [row_with(
            2,
            "a",
            "b200:7:1",
            "tickets-v3",
            n,
            n,
            Aggregation::Best,
        )];
        let costs = cost_rows(Path::new("g.csv"), &rows, &c).unwrap();
        assert_eq!(costs[0].accepted_units, n);
        assert_eq!(costs[0].unit_price_cents, None);
        let why = costs[0].no_unit_price.as_deref().unwrap();
        assert!(why.contains("rounds to 0"), "{why}");
        let total = totals(&rows, &costs);
        assert_eq!(total[0].unit_price_cents, None);
        assert!(
            total[0]
                .no_unit_price
                .as_deref()
                .unwrap()
                .contains("rounds to 0"),
            "{total:?}"
        );
    }

    #[test]
    fn two_rentals_of_one_package_cost_twice_and_a_rerun_corpus_counts_once() {
        let c = Catalogue::embedded();
        let rows = vec![
            row(2, "first", "h200:7:1", "tickets-v3", 470),
            row(3, "second", "h200:7:1", "tickets-v3", 480),
            row_with(
                4,
                "second",
                "h200:7:1",
                "invoices-v1",
                100,
                95,
                Aggregation::Best,
            ),
        ];
        let report_rentals = cost_rows(Path::new("g.csv"), &rows, &c).unwrap();
        assert_eq!(
            report_rentals.len(),
            2,
            "one package bought twice is two rentals"
        );
        assert_eq!(report_rentals[1].accepted_units, 480 + 95);
        let t = totals(&rows, &report_rentals);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].rentals, 2);
        assert_eq!(t[0].total_price_cents, 2 * lot("h200", 7));
        // tickets-v3 once (best of 470 and 480), invoices-v1 once.
        assert_eq!(t[0].accepted_units, 480 + 95);
        assert_eq!(
            t[0].unit_price_cents,
            Some(unit_price_cents(2 * lot("h200", 7), 575).unwrap())
        );
    }

    #[test]
    fn the_protocols_rule_is_applied() {
        let c = Catalogue::embedded();
        for (rule, expected) in [
            (Aggregation::Best, 480),
            (Aggregation::Last, 460),
            (Aggregation::Mean, 470),
        ] {
            let rows = [
                row_with(2, "a", "l4:3:1", "t", 500, 470, rule),
                row_with(3, "a", "l4:3:1", "t", 500, 480, rule),
                row_with(4, "a", "l4:3:1", "t", 500, 10, rule), // does not count
                row_with(5, "a", "l4:3:1", "t", 500, 460, rule),
            ];
            let costs = cost_rows(Path::new("g.csv"), &rows, &c).unwrap();
            assert_eq!(costs[0].accepted_units, expected, "{rule}");
            assert_eq!(costs[0].corpora[0].aggregation, rule);
        }
    }

    #[test]
    fn an_unknown_gpu_names_its_row_and_the_way_out() {
        let rows = [row(7, "r", "nosuchgpu:7:1", "c", 500)];
        let err = cost_rows(Path::new("g.csv"), &rows, &Catalogue::embedded())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("g.csv, line 7: rental r (nosuchgpu:7:1) cannot be priced"),
            "{err}"
        );
        assert!(err.contains("--catalogue FILE"), "{err}");
    }

    proptest! {
        #[test]
        fn distinct_units_follow_the_rule_per_corpus(
            runs in proptest::collection::vec((0usize..3, 0u64..=1000), 1..20),
            rule in 0usize..3,
        ) {
            let rule = Aggregation::ALL[rule];
            let rows: Vec<LineRow> = runs
                .iter()
                .enumerate()
                .map(|(i, (corpus, accepted))| {
                    row_with(i as u64 + 2, "r", "b200:3:1", &format!("c{corpus}"), 1000, *accepted, rule)
                })
                .collect();
            let costs = cost_rows(Path::new("g"), &rows, &Catalogue::embedded()).unwrap();
            let mut expected = 0u64;
            for corpus in 0..3 {
                let met: Vec<u64> = runs
                    .iter()
                    .filter(|(c, a)| *c == corpus && *a >= 900)
                    .map(|(_, a)| *a)
                    .collect();
                expected += match (rule, met.is_empty()) {
                    (_, true) => 0,
                    (Aggregation::Best, _) => *met.iter().max().unwrap(),
                    (Aggregation::Last, _) => *met.last().unwrap(),
                    (Aggregation::Mean, _) => met.iter().sum::<u64>() / met.len() as u64,
                };
            }
            prop_assert_eq!(costs[0].accepted_units, expected);
            prop_assert_eq!(costs[0].unit_price_cents.is_none(), expected == 0);
        }
    }
}
