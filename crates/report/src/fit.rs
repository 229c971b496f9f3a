//! A `fit` document (`iteragpu fit --json`) read for its decision: which packages hold the model,
//! which only tightly, and which not, with the figures a renter decides on.
//!
//! Every field is optional (`serde(default)`): the page shows what a document has and says
//! "-" for the rest, so a document from an older or newer `fit` still reads. A row whose `fits`
//! is missing is never shown as fitting.

use serde::Deserialize;
use serde_json::Value;

use crate::load::{Standing, Verdict};

/// The fields of a fit document the page shows.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FitDocument {
    /// The model as given (`--model` or `--parameters`).
    pub model: String,
    /// Parameters in all.
    pub parameters: Option<u64>,
    /// What `fit` assumed.
    pub assumptions: Assumptions,
    /// The memory estimate.
    pub estimate: Estimate,
    /// Which rows the document holds.
    pub selection: Option<Selection>,
    /// The packages, fitting ones first.
    pub options: Vec<FitRow>,
}

/// The assumptions the page repeats.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Assumptions {
    /// Tokens per sequence (with --context).
    pub context: Option<u64>,
    /// Sequences at once.
    pub batch: Option<u64>,
    /// Packages of up to this many GPUs.
    pub max_gpus: Option<u64>,
    /// `vllm`, `sglang` or `none`.
    pub serve: Option<String>,
    /// The flat reserve (with `--serve none`), GiB.
    pub reserve_gib_per_gpu: Option<Value>,
    /// The tight threshold without an engine, GiB.
    pub tight_headroom_gib: Option<Value>,
    /// The engine's options (null with `--serve none`).
    pub engine: Option<Value>,
}

/// The estimate's total.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Estimate {
    /// Bytes the model needs in all.
    pub total_bytes: Option<u64>,
}

/// How many rows there were before the document's selection.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Selection {
    /// Rows considered.
    pub rows_total: Option<u64>,
    /// Rows that fit (tight ones included).
    pub rows_fitting: Option<u64>,
    /// Rows in the document.
    pub rows_shown: Option<u64>,
}

/// One package.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct FitRow {
    /// GPU slug.
    pub gpu: String,
    /// Lots.
    pub lots: Option<u64>,
    /// GPUs in all.
    pub total_gpus: Option<u64>,
    /// Days.
    pub days: Option<u64>,
    /// Whether the model fits (absent: not known).
    pub fits: Option<bool>,
    /// Fits with little to spare.
    pub tight: Option<bool>,
    /// Usable minus need per GPU, bytes (negative: does not fit).
    pub headroom_bytes: Option<i64>,
    /// The busiest GPU's need.
    pub per_gpu_bytes: Option<u64>,
    /// What one GPU offers.
    pub usable_bytes_per_gpu: Option<u64>,
    /// Largest context per sequence at the batch.
    pub largest_context: Option<u64>,
    /// What bounds it (`memory`, `max-position-embeddings`, `unbounded`).
    pub largest_context_limit: Option<String>,
    /// Largest batch at the context.
    pub largest_batch: Option<u64>,
    /// Roofline ceilings.
    pub ceilings: Option<Ceilings>,
    /// The package price, cents.
    pub total_price_cents: Option<u64>,
    /// Per GPU-day, cents (a decimal string).
    pub price_per_gpu_day_cents: Option<Value>,
    /// ISO 4217 code.
    pub currency: Option<String>,
    /// An example price.
    pub example: bool,
    /// The layout (`tensor_parallel`, `pipeline_parallel`).
    pub layout: Option<Value>,
    /// Why no layout runs.
    pub layout_problem: Option<String>,
    /// The engine's budget on the busiest GPU.
    pub budget: Option<Budget>,
    /// Why it does not fit, or why it is tight.
    pub reason: Option<String>,
}

/// The ceilings the page shows.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Ceilings {
    /// Decode tokens per second at most.
    pub decode_tokens_per_s: Option<f64>,
    /// Price per million decoded tokens at the ceiling, cents (a floor on the cost).
    pub decode_price_per_mtok_cents: Option<Value>,
}

/// One estimated term of a budget.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Term {
    /// The bytes used.
    pub bytes: Option<u64>,
    /// The least it could be.
    pub low_bytes: Option<u64>,
    /// The most it could be.
    pub high_bytes: Option<u64>,
}

/// The serving engine's budget on the busiest GPU, term by term.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Budget {
    /// `vllm`, `sglang` or `none`.
    pub serve: Option<String>,
    /// What the process sees.
    pub total_bytes: Option<u64>,
    /// gpu_memory_utilization or mem_fraction_static.
    pub fraction: Option<Value>,
    /// total x fraction.
    pub budget_bytes: Option<u64>,
    /// Weights as loaded.
    pub weights_bytes: Option<u64>,
    /// The profile run's activation peak.
    pub activation_peak: Option<Term>,
    /// Memory outside PyTorch.
    pub non_torch: Option<Term>,
    /// CUDA graphs.
    pub cuda_graphs: Option<Term>,
    /// What is left for the KV cache (negative: the engine does not start).
    pub kv_pool_bytes: Option<i64>,
    /// Tokens the pool holds.
    pub kv_tokens: Option<u64>,
    /// total - budget.
    pub margin_bytes: Option<u64>,
}

/// How one row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStanding {
    /// The model does not fit.
    DoesNotFit,
    /// The document does not say (no `fits`, or `fits` without `tight`).
    Unknown,
    /// It fits with little to spare.
    Tight,
    /// It fits.
    Fits,
}

impl RowStanding {
    /// The row's standing: never "fits" unless the row says it fits and is not tight.
    pub fn of(row: &FitRow) -> RowStanding {
        match (row.fits, row.tight) {
            (Some(false), _) => RowStanding::DoesNotFit,
            (Some(true), Some(false)) => RowStanding::Fits,
            (Some(true), Some(true)) => RowStanding::Tight,
            _ => RowStanding::Unknown,
        }
    }

    /// In words, as the decision table says it.
    pub fn words(self) -> &'static str {
        match self {
            RowStanding::DoesNotFit => "does not fit",
            RowStanding::Unknown => "not known",
            RowStanding::Tight => "tight",
            RowStanding::Fits => "fits",
        }
    }

    /// The page's class for it.
    pub fn class(self) -> &'static str {
        match self {
            RowStanding::DoesNotFit => "bad",
            RowStanding::Unknown | RowStanding::Tight => "warn",
            RowStanding::Fits => "ok",
        }
    }
}

/// `2 x h100-sxm (16 GPUs, TP8 x PP2), 7 days`.
pub fn package(row: &FitRow) -> String {
    let n = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let layout = row.layout.as_ref().and_then(|l| {
        let tp = l.get("tensor_parallel")?.as_u64()?;
        let pp = l
            .get("pipeline_parallel")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        Some(if pp > 1 {
            format!(", TP{tp} x PP{pp}")
        } else {
            format!(", TP{tp}")
        })
    });
    let gpus = row.total_gpus;
    format!(
        "{} x {} ({} GPU{}{}), {} days",
        n(row.lots),
        row.gpu,
        n(gpus),
        if gpus == Some(1) { "" } else { "s" },
        layout.unwrap_or_default(),
        n(row.days)
    )
}

/// Why a row does not fit or is tight, in one line.
pub fn why(row: &FitRow) -> Option<&str> {
    row.reason.as_deref().or(row.layout_problem.as_deref())
}

/// The document's verdict, which the page leads with: no package fits (fails), only tight ones
/// (warns), or at least one fits with room to spare.
pub fn verdict(label: &str, doc: &FitDocument) -> Verdict {
    let count = |s: RowStanding| {
        doc.options
            .iter()
            .filter(|r| RowStanding::of(r) == s)
            .count()
    };
    let (fits, tight, not, unknown) = (
        count(RowStanding::Fits),
        count(RowStanding::Tight),
        count(RowStanding::DoesNotFit),
        count(RowStanding::Unknown),
    );
    let total = doc
        .selection
        .as_ref()
        .and_then(|s| s.rows_total)
        .unwrap_or(doc.options.len() as u64);
    let workload = match (doc.assumptions.context, doc.assumptions.batch) {
        (Some(c), b) => format!(
            " at {c} tokens x {} sequence(s)",
            b.map_or("?".to_string(), |b| b.to_string())
        ),
        (None, _) => String::new(),
    };
    let first = |s: RowStanding| doc.options.iter().find(|r| RowStanding::of(r) == s);
    let price = |r: &FitRow| match (r.total_price_cents, &r.currency) {
        (Some(c), Some(cur)) => format!(
            ", {cur} {}.{:02}{}",
            c / 100,
            c % 100,
            if r.example { " (example price)" } else { "" }
        ),
        _ => String::new(),
    };
    let mut lines = Vec::new();
    let (standing, headline) = if let Some(best) = first(RowStanding::Fits) {
        (
            Standing::Ok,
            format!(
                "fits: {fits} of the {} package(s) in the document hold {}{workload} with room \
                 to spare{}; the first: {}{}",
                doc.options.len(),
                doc.model,
                if tight > 0 {
                    format!(" ({tight} more only tightly)")
                } else {
                    String::new()
                },
                package(best),
                price(best)
            ),
        )
    } else if let Some(best) = first(RowStanding::Tight) {
        (
            Standing::Warns,
            format!(
                "tight: no package holds {}{workload} with room to spare; {tight} only tightly, \
                 the first: {}{}",
                doc.model,
                package(best),
                price(best)
            ),
        )
    } else if unknown > 0 {
        (
            Standing::Warns,
            format!(
                "not known: {unknown} package(s) do not say whether {} fits{workload}, and none \
                 says it fits",
                doc.model
            ),
        )
    } else {
        (
            Standing::Fails,
            format!(
                "does not fit: none of the {total} package(s){} holds {}{workload}",
                doc.assumptions
                    .max_gpus
                    .map(|m| format!(" of up to {m} GPUs"))
                    .unwrap_or_default(),
                doc.model
            ),
        )
    };
    if let Some(r) = first(RowStanding::Tight).filter(|_| standing != Standing::Fails) {
        lines.push((
            Standing::Warns,
            format!(
                "tight {}: {}",
                package(r),
                why(r).unwrap_or("little headroom")
            ),
        ));
    }
    if let Some(r) = first(RowStanding::DoesNotFit) {
        lines.push((
            if standing == Standing::Fails {
                Standing::Fails
            } else {
                Standing::Ok
            },
            format!(
                "{not} package(s) do not fit; the first, {}: {}",
                package(r),
                why(r).unwrap_or("its need per GPU is over the usable memory")
            ),
        ));
    }
    if let Some(s) = &doc.selection
        && let (Some(shown), Some(total)) = (s.rows_shown, s.rows_total)
        && shown < total
    {
        lines.push((
            Standing::Ok,
            format!(
                "the document holds {shown} of {total} rows ({} fit in all)",
                s.rows_fitting.map_or("?".to_string(), |f| f.to_string())
            ),
        ));
    }
    Verdict {
        label: label.to_string(),
        standing,
        headline,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(rows: Value) -> FitDocument {
        serde_json::from_value(json!({
            "model": "m", "assumptions": {"context": 8192, "batch": 4, "max_gpus": 2},
            "options": rows, "extra": {"ignored": true},
        }))
        .unwrap()
    }

    #[test]
    fn no_fitting_row_fails_and_says_so() {
        let d = doc(json!([
            {"gpu": "l4", "lots": 1, "total_gpus": 1, "days": 7, "fits": false, "tight": false,
             "reason": "vLLM holds 27104 KV tokens on this GPU, fewer than the 32768 needed"},
            {"gpu": "l4", "lots": 2, "total_gpus": 2, "days": 7, "fits": false, "tight": false},
        ]));
        let v = verdict("f.json", &d);
        assert_eq!(v.standing, Standing::Fails);
        assert_eq!(
            v.headline,
            "does not fit: none of the 2 package(s) of up to 2 GPUs holds m at 8192 tokens x 4 \
             sequence(s)"
        );
        assert_eq!(v.lines[0].0, Standing::Fails);
        assert!(
            v.lines[0].1.contains("fewer than the 32768 needed"),
            "{v:?}"
        );
        // No row at all: nothing fits either.
        assert_eq!(verdict("f", &doc(json!([]))).standing, Standing::Fails);
    }

    #[test]
    fn only_tight_rows_warn_and_a_row_without_its_verdict_is_never_a_fit() {
        let d = doc(json!([
            {"gpu": "l4", "lots": 1, "total_gpus": 1, "days": 7, "fits": false, "tight": false},
            {"gpu": "a10", "lots": 1, "total_gpus": 1, "days": 7, "fits": true, "tight": true,
             "reason": "with the estimates' high ends the pool would not hold it",
             "total_price_cents": 7800, "currency": "USD", "example": true},
        ]));
        let v = verdict("f", &d);
        assert_eq!(v.standing, Standing::Warns);
        assert!(v.headline.starts_with("tight: no package holds m"), "{v:?}");
        assert!(v.headline.ends_with("USD 78.00 (example price)"), "{v:?}");
        assert_eq!(v.lines[0].0, Standing::Warns);
        // `fits` without `tight`, or no `fits`: not known, never "fits".
        let d = doc(json!([{"gpu": "l4", "fits": true}, {"gpu": "l4"}]));
        assert_eq!(RowStanding::of(&d.options[0]), RowStanding::Unknown);
        assert_eq!(RowStanding::of(&d.options[1]), RowStanding::Unknown);
        let v = verdict("f", &d);
        assert_eq!(v.standing, Standing::Warns);
        assert!(v.headline.starts_with("not known"), "{v:?}");
    }

    #[test]
    fn a_row_with_room_to_spare_is_a_fit() {
        let d = doc(json!([
            {"gpu": "h100-sxm", "lots": 1, "total_gpus": 1, "days": 7, "fits": true,
             "tight": false, "layout": {"tensor_parallel": 1, "pipeline_parallel": 1},
             "total_price_cents": 164600, "currency": "USD"},
            {"gpu": "l4", "lots": 2, "total_gpus": 2, "days": 7, "fits": true, "tight": true,
             "layout": {"tensor_parallel": 1, "pipeline_parallel": 2}},
        ]));
        let v = verdict("f", &d);
        assert_eq!(v.standing, Standing::Ok);
        assert_eq!(
            v.headline,
            "fits: 1 of the 2 package(s) in the document hold m at 8192 tokens x 4 sequence(s) \
             with room to spare (1 more only tightly); the first: 1 x h100-sxm (1 GPU, TP1), 7 \
             days, USD 1646.00"
        );
        assert_eq!(package(&d.options[1]), "2 x l4 (2 GPUs, TP1 x PP2), 7 days");
    }
}
