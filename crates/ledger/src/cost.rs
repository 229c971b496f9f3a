//! `cost`: what one accepted useful unit cost, per package, from the results grid and the tariff
//! catalogue.
//!
//! The rules are the original kit's, through [`lab::price`]: the *whole* package price (lot price
//! x lots) is divided by the number of distinct accepted units, an exact decimal rounded once,
//! half to even, to 1/10000 of a cent; without accepted units the unit price is `null`. Repeated
//! benchmarks of the same corpus are not new units: for each distinct `corpus_id` among a
//! package's rows only the highest `units_accepted` counts, and the package's distinct accepted
//! units are the sum of those maxima over its corpora.

use std::collections::BTreeMap;
use std::path::Path;

use lab::catalogue::Catalogue;
use lab::price::{quote, unit_price_cents};
use rust_decimal::Decimal;
use serde::Serialize;

use crate::error::LedgerError;
use crate::grid::{self, LineRow, Package};

/// The accepted units one corpus contributes to a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CorpusUnits {
    /// The corpus.
    pub corpus_id: String,
    /// Rows (runs) of this package on this corpus.
    pub runs: usize,
    /// The most units accepted by any one of those runs: what the corpus contributes.
    pub accepted_units: u64,
}

/// The cost of one accepted unit on one package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageCost {
    /// The package (GPU slug, days, lots).
    #[serde(flatten)]
    pub package: Package,
    /// The GPU's display name from the catalogue.
    pub model: String,
    /// Rows of the grid for this package.
    pub runs: usize,
    /// Of those, rows whose acceptance rate met the protocol's threshold.
    pub runs_meeting_threshold: usize,
    /// What each corpus contributes.
    pub corpora: Vec<CorpusUnits>,
    /// Distinct accepted units: the sum over corpora of each corpus's best run.
    pub accepted_units: u64,
    /// Lot price x lots, whole cents.
    pub total_price_cents: u64,
    /// ISO 4217 code.
    pub currency: String,
    /// total / accepted units, half-even to 1/10000 cent; `null` without accepted units.
    pub unit_price_cents: Option<Decimal>,
    /// The catalogue row's `source` (the bundled rows say they are examples).
    pub source: String,
    /// True when that source says the price is an example, not a quote.
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
    /// One entry per package, sorted by GPU, days, lots.
    pub packages: Vec<PackageCost>,
}

/// Prices every package of the grid at `results` with `catalogue`.
pub fn cost(results: &Path, catalogue: &Catalogue) -> Result<CostReport, LedgerError> {
    let rows = grid::read(results)?;
    let packages = cost_rows(results, &rows, catalogue)?;
    Ok(CostReport {
        results: results.display().to_string(),
        catalogue: catalogue.name().to_string(),
        runs: rows.len(),
        packages,
    })
}

/// The per-package costs of `rows` (read from `path`, named in errors).
pub fn cost_rows(
    path: &Path,
    rows: &[LineRow],
    catalogue: &Catalogue,
) -> Result<Vec<PackageCost>, LedgerError> {
    let mut by_package: BTreeMap<&Package, Vec<&LineRow>> = BTreeMap::new();
    for row in rows {
        by_package.entry(&row.row.package).or_default().push(row);
    }
    let mut out = Vec::with_capacity(by_package.len());
    for (package, rows) in by_package {
        let first_line = rows.first().map_or(0, |r| r.line);
        let price_err = |reason: String| LedgerError::BadRow {
            path: path.to_path_buf(),
            line: first_line,
            reason: format!("package {package} cannot be priced: {reason}"),
        };
        let q = quote(
            catalogue,
            &package.gpu,
            package.days,
            u64::from(package.lots),
            None,
        )
        .map_err(|e| price_err(e.to_string()))?;

        let mut corpora: BTreeMap<&str, CorpusUnits> = BTreeMap::new();
        for r in &rows {
            let entry = corpora
                .entry(r.row.corpus_id.as_str())
                .or_insert_with(|| CorpusUnits {
                    corpus_id: r.row.corpus_id.clone(),
                    runs: 0,
                    accepted_units: 0,
                });
            entry.runs += 1;
            entry.accepted_units = entry.accepted_units.max(r.row.units_accepted);
        }
        let accepted_units = corpora
            .values()
            .try_fold(0u64, |sum, c| sum.checked_add(c.accepted_units))
            .ok_or_else(|| price_err("the accepted units overflow a 64-bit count".into()))?;
        let unit_price_cents = if accepted_units == 0 {
            None
        } else {
            Some(
                unit_price_cents(q.total_price_cents, accepted_units)
                    .map_err(|e| price_err(e.to_string()))?,
            )
        };
        out.push(PackageCost {
            package: package.clone(),
            model: q.model.clone(),
            runs: rows.len(),
            runs_meeting_threshold: rows.iter().filter(|r| r.row.threshold_met).count(),
            corpora: corpora.into_values().collect(),
            accepted_units,
            total_price_cents: q.total_price_cents,
            currency: q.currency.clone(),
            unit_price_cents,
            example_price: q.is_example(),
            source: q.source,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::Row;
    use proptest::prelude::*;

    fn row(line: u64, package: &str, corpus: &str, submitted: u64, accepted: u64) -> LineRow {
        LineRow {
            line,
            row: Row {
                run_id: format!("{line:012}"),
                date_utc: "2026-09-24T08:00:00Z".into(),
                protocol_sha256: "ab".repeat(32),
                corpus_id: corpus.into(),
                package: package.parse().unwrap(),
                device_model: "x".into(),
                device_uuid: "cpu-reference".into(),
                driver_version: "none".into(),
                measurement_sha256: format!("{line:064}"),
                units_submitted: submitted,
                units_accepted: accepted,
                acceptance_threshold: "0.9".into(),
                threshold_met: accepted * 10 >= submitted * 9,
                notes: String::new(),
            },
        }
    }

    #[test]
    fn repeats_of_a_corpus_are_not_new_units() {
        let c = Catalogue::embedded();
        let lot = c.find("b200", 7).unwrap().price_cents;
        let rows = [
            row(2, "b200:7:2", "tickets-v3", 500, 473),
            row(3, "b200:7:2", "tickets-v3", 500, 480),
            row(4, "b200:7:2", "invoices-v1", 100, 20),
            row(5, "h100-sxm:3:1", "tickets-v3", 10, 0),
        ];
        let costs = cost_rows(Path::new("g.csv"), &rows, &c).unwrap();
        assert_eq!(costs.len(), 2);
        let b200 = &costs[0];
        assert_eq!(b200.package.gpu, "b200");
        assert_eq!(b200.runs, 3);
        assert_eq!(b200.runs_meeting_threshold, 2);
        assert_eq!(b200.accepted_units, 480 + 20);
        assert_eq!(b200.total_price_cents, 2 * lot);
        assert_eq!(
            b200.unit_price_cents,
            Some(unit_price_cents(2 * lot, 500).unwrap())
        );
        let h100 = &costs[1];
        assert_eq!(h100.accepted_units, 0);
        assert_eq!(h100.unit_price_cents, None);
        let json = serde_json::to_value(h100).unwrap();
        assert!(json["unit_price_cents"].is_null());
    }

    #[test]
    fn an_unknown_gpu_names_its_row() {
        let rows = [row(7, "nosuchgpu:7:1", "c", 1, 1)];
        let err = cost_rows(Path::new("g.csv"), &rows, &Catalogue::embedded())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("g.csv, line 7: package nosuchgpu:7:1 cannot be priced"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn distinct_units_are_the_sum_of_per_corpus_maxima(
            runs in proptest::collection::vec((0usize..3, 0u64..1000), 1..20)
        ) {
            let rows: Vec<LineRow> = runs
                .iter()
                .enumerate()
                .map(|(i, (corpus, accepted))| {
                    row(i as u64 + 2, "b200:3:1", &format!("c{corpus}"), 1000, *accepted)
                })
                .collect();
            let costs = cost_rows(Path::new("g"), &rows, &Catalogue::embedded()).unwrap();
            let mut best = [None::<u64>; 3];
            for (corpus, accepted) in &runs {
                best[*corpus] = Some(best[*corpus].map_or(*accepted, |b| b.max(*accepted)));
            }
            let expected: u64 = best.iter().flatten().sum();
            prop_assert_eq!(costs[0].accepted_units, expected);
            prop_assert_eq!(costs[0].unit_price_cents.is_none(), expected == 0);
        }
    }
}
