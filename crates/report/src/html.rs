//! The page: escaped text, tables, and the charts inline.

use std::fmt::Write;

use lab::environment::Environment;
use lab::measure::document::MeasurementDocument;
use lab_io::bytes::binary as bytes;
use serde_json::Value;
use sweep::summary::{Row, Status};

use crate::charts::{self, FleetBar, PALETTE, PhaseAxes, ProbeBar, ProbeGroup, Series};
use crate::fit::{self, FitDocument, RowStanding};
use crate::load::{Inputs, Money, MoneyKind, Probe, ReportError, Run, Standing, Sweep};
use crate::units::{bytes_unit, figure as number, flops_unit, tick};

/// What the page says about itself.
#[derive(Debug, Clone)]
pub struct Meta {
    /// The tool that wrote the page (`iteragpu 0.1.0`).
    pub tool: String,
    /// When, RFC 3339 in UTC.
    pub generated_utc: String,
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// No fetch of any kind is allowed: the page must stand alone (a browser reports any attempt).
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:";

/// Scoped under `.iteragpu-report` so that the page can be shown inside a notebook without
/// restyling it.
const STYLE: &str = "
.iteragpu-report { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; color: #1a1a1a;
  max-width: 1500px; margin: 0 auto; padding: 16px; background: #fff; }
.iteragpu-report h1 { font-size: 1.6em; margin: 0 0 4px; }
.iteragpu-report h2 { font-size: 1.3em; border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 28px; }
.iteragpu-report h3 { font-size: 1.05em; margin: 0 0 6px; word-break: break-all; }
.iteragpu-report .meta, .iteragpu-report .note { color: #555; font-size: 0.9em; }
.iteragpu-report p, .iteragpu-report li, .iteragpu-report h4 { overflow-wrap: anywhere; }
.iteragpu-report .grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 560px), 1fr)); gap: 16px; }
.iteragpu-report .grid > * { min-width: 0; }
.iteragpu-report .card { border: 1px solid #ddd; border-radius: 6px; padding: 12px; min-width: 0; }
.iteragpu-report figure { margin: 8px 0; overflow-x: auto; container-type: inline-size; }
.iteragpu-report figure svg { display: block; max-width: 100%; height: auto; }
.iteragpu-report figure svg.narrow { display: none; width: 100%; }
@container (max-width: NARROWpx) {
  .iteragpu-report figure svg.wide { display: none; }
  .iteragpu-report figure svg.narrow { display: block; }
}
.iteragpu-report .scroll { max-width: 100%; overflow-x: auto; margin: 8px 0; }
.iteragpu-report table { border-collapse: collapse; font-size: 0.85em; }
.iteragpu-report th, .iteragpu-report td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
.iteragpu-report td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.iteragpu-report th { background: #f4f4f4; }
.iteragpu-report .badge { display: inline-block; background: #fff3cd; border: 1px solid #e0c36a; border-radius: 4px; padding: 2px 6px; font-size: 0.85em; }
.iteragpu-report .bad { color: #a4000f; font-weight: 600; }
.iteragpu-report .warn { color: #7a4100; font-weight: 600; }
.iteragpu-report .verdict { margin: 0 0 12px; }
.iteragpu-report .verdict.bad { border: 2px solid #a4000f; background: #fff1f1; color: #1a1a1a; font-weight: normal; }
.iteragpu-report .verdict.warn { border: 2px solid #c98a00; background: #fff8e1; color: #1a1a1a; font-weight: normal; }
.iteragpu-report .verdict.ok { border-left: 6px solid #2e7d32; }
.iteragpu-report .verdict .headline { font-size: 1.1em; margin: 4px 0; overflow-wrap: anywhere; }
.iteragpu-report .verdict ul { margin: 4px 0; padding-left: 1.2em; }
.iteragpu-report .verdict li.bad, .iteragpu-report .verdict li.warn { font-weight: normal; }
.iteragpu-report td.bad { background: #fff1f1; }
.iteragpu-report td.warn { background: #fff8e1; }
.iteragpu-report dl { display: grid; grid-template-columns: minmax(6em, max-content) minmax(0, 1fr); gap: 2px 12px; font-size: 0.88em; margin: 6px 0; }
.iteragpu-report dt { color: #555; }
.iteragpu-report dd { margin: 0; overflow-wrap: anywhere; }
.iteragpu-report .money td.num { font-weight: 600; }
.iteragpu-report .money td.num::before { font-weight: normal; }
@media (max-width: 700px) {
  .iteragpu-report table, .iteragpu-report tbody, .iteragpu-report tr, .iteragpu-report td { display: block; width: 100%; box-sizing: border-box; }
  .iteragpu-report tr.head { display: none; }
  .iteragpu-report tr { border: 1px solid #ccc; border-radius: 4px; margin: 0 0 8px; }
  .iteragpu-report td, .iteragpu-report td.num { display: grid; grid-template-columns: 42% minmax(0, 1fr); gap: 8px; border: none;
    border-bottom: 1px solid #eee; text-align: left; white-space: normal; overflow-wrap: anywhere; }
  .iteragpu-report td::before { content: attr(data-label); color: #555; }
}
";

/// Renders the page.
pub fn render(inputs: &Inputs, meta: &Meta) -> Result<String, ReportError> {
    let mut body = String::from("<h1>IteraGPU Lab report</h1>\n");
    // The verdicts come first, the failing ones first of all: before the page's own line and
    // before any chart.
    if !inputs.verdicts.is_empty() {
        verdict_section(&mut body, inputs);
    }
    let _ = writeln!(
        body,
        "<p class=\"meta\">{} run(s) and {} sweep(s){}{}; written by {} at {}. \
         Bytes use binary prefixes (KiB = 2<sup>10</sup>, MiB = 2<sup>20</sup>, GiB = 2<sup>30</sup> bytes); \
         <code>allocated</code> is part of <code>reserved</code>: never add them.</p>",
        inputs.runs.len(),
        inputs.sweeps.len(),
        if inputs.probes.is_empty() {
            String::new()
        } else {
            format!(", {} probe(s)", inputs.probes.len())
        },
        if inputs.money.is_empty() {
            String::new()
        } else {
            format!(", {} cost document(s)", inputs.money.len())
        },
        escape(&meta.tool),
        escape(&meta.generated_utc)
    );
    if inputs.money.iter().any(|m| m.fit.is_some()) {
        fit_section(&mut body, &inputs.money);
    }
    if !inputs.sweeps.is_empty() {
        body.push_str("<section id=\"sweeps\">\n<h2>Sweeps</h2>\n");
        sweeps(&mut body, &inputs.sweeps)?;
        body.push_str("</section>\n");
    }
    if !inputs.runs.is_empty() {
        let _ = write!(
            body,
            "<section id=\"runs\">\n<h2>Runs</h2>\n<p class=\"note\">Every run shares one time axis \
             (logarithmic where the times span a decade or more). Runs whose peak memory is within {}x of each other share a memory scale; \
             a run further from the others has its own, as its chart's note says.</p>\n<div class=\"grid\">\n",
            charts::SHARED_SCALE_FACTOR
        );
        let all: Vec<&Run> = inputs.runs.iter().collect();
        let axes = PhaseAxes::of(&all);
        for (run, axes) in inputs.runs.iter().zip(&axes) {
            let shared: Vec<&str> = axes
                .memory_shared_with
                .iter()
                .map(|&j| inputs.runs[j].label.as_str())
                .collect();
            run_card(&mut body, run, axes, &shared)?;
        }
        body.push_str("</div>\n</section>\n");
    }
    engines_side_by_side(&mut body, &inputs.runs);
    if !inputs.probes.is_empty() {
        body.push_str("<section id=\"probes\">\n<h2>Probes</h2>\n<p class=\"note\">Copy bandwidth and dense GEMM throughput per GPU (the median of repeated timed runs), each against the datasheet figure of the detected model (the black line).</p>\n<div class=\"grid\">\n");
        let flagged = if inputs.probes.len() > 1 {
            fleet_charts(&mut body, &inputs.probes)?
        } else {
            Vec::new()
        };
        for i in cards_shown(&inputs.probes, &flagged) {
            probe_card(&mut body, &inputs.probes[i])?;
        }
        if inputs.probes.len() > PROBE_CARDS {
            let shown = cards_shown(&inputs.probes, &flagged).len();
            let _ = writeln!(
                body,
                "<p class=\"note\" data-summary=\"probes\">{} of {} probes shown (those with an outlier, a warning or an error first); the other {} are in the charts above, summarised.</p>",
                shown,
                inputs.probes.len(),
                inputs.probes.len() - shown
            );
        }
        body.push_str("</div>\n</section>\n");
    }
    if inputs.money.iter().any(|m| m.kind != MoneyKind::Fit) {
        money_section(&mut body, &inputs.money);
    }
    environment_table(&mut body, inputs);
    let style = STYLE.replace("NARROW", &charts::NARROW_BELOW.to_string());
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>IteraGPU Lab report</title>\n<style>{style}</style>\n</head>\n<body>\n\
         <div class=\"iteragpu-report\">\n{body}</div>\n</body>\n</html>\n"
    ))
}

/// The verdicts, the failing ones first, then the doubtful ones: each a card in its colour with
/// its headline and its lines (failing lines first).
fn verdict_section(out: &mut String, inputs: &Inputs) {
    let mut verdicts: Vec<_> = inputs.verdicts.iter().collect();
    verdicts.sort_by_key(|v| v.standing);
    out.push_str("<section id=\"verdict\">\n<h2>Verdict</h2>\n");
    for v in verdicts {
        let _ = write!(
            out,
            "<article class=\"card verdict {}\" data-standing=\"{}\" data-ok=\"{}\">\n<p class=\"headline {}\"><strong>{}</strong></p>\n<p class=\"note\">{}</p>\n",
            v.standing.class(),
            v.standing.class(),
            v.standing == Standing::Ok,
            v.standing.class(),
            escape(&v.headline),
            escape(&v.label)
        );
        if !v.lines.is_empty() {
            let mut lines: Vec<_> = v.lines.iter().collect();
            lines.sort_by_key(|l| l.0);
            out.push_str("<ul>\n");
            for (standing, line) in lines {
                let class = match standing {
                    Standing::Ok => String::new(),
                    s => format!(" class=\"{}\"", s.class()),
                };
                let _ = writeln!(out, "<li{class}>{}</li>", escape(line));
            }
            out.push_str("</ul>\n");
        }
        out.push_str("</article>\n");
    }
    out.push_str("</section>\n");
}

/// At most this many rows of a fit document in its tables: the document's order puts the
/// fitting rows first, cheapest first; the rest are in the document.
const FIT_ROWS: usize = 24;

const FIT_COLUMNS: [&str; 10] = [
    "package",
    "fits",
    "headroom per GPU",
    "largest context",
    "largest batch",
    "decode ceiling",
    "price per Mtok",
    "price",
    "per GPU-day",
    "why",
];

const BUDGET_COLUMNS: [&str; 12] = [
    "package",
    "engine",
    "total memory",
    "fraction",
    "budget",
    "weights",
    "activation peak",
    "non-torch",
    "KV cache pool",
    "KV tokens",
    "CUDA graphs",
    "margin",
];

/// Bytes as GiB with two decimals, negative ones too.
fn gib(b: i128) -> String {
    format!("{} GiB", lab_io::bytes::gib(b, 2))
}

/// An estimated term: its figure and its range.
fn term(t: Option<&fit::Term>) -> String {
    match t {
        Some(fit::Term {
            bytes: Some(b),
            low_bytes,
            high_bytes,
        }) => match (low_bytes, high_bytes) {
            (Some(l), Some(h)) => format!(
                "{} ({:.2} to {:.2})",
                gib(i128::from(*b)),
                *l as f64 / f64::from(1u32 << 30),
                *h as f64 / f64::from(1u32 << 30)
            ),
            _ => gib(i128::from(*b)),
        },
        _ => "-".to_string(),
    }
}

/// Each fit document: what it assumed, its decision table (fits, tight or does not fit, the
/// headroom, the largest context and batch, the decode ceiling, the price per million tokens
/// and the package's price) and the serving engine's budget per GPU, term by term.
fn fit_section(out: &mut String, money: &[Money]) {
    out.push_str("<section id=\"fit\">\n<h2>Will it fit?</h2>\n<p class=\"note\">From <code>iteragpu fit --json</code>: each package, whether the model fits on it (<span class=\"warn\">tight</span>: it fits with little to spare, or an estimate's high end would tip it over; <span class=\"bad\">does not fit</span>: it does not), with the largest context and batch it holds and the decode ceiling, a roofline bound (never a prediction: a real engine runs slower), and its price per million decoded tokens at that ceiling (a floor on the cost).</p>\n");
    for m in money {
        let Some(d) = &m.fit else { continue };
        let _ = writeln!(
            out,
            "<article class=\"card fit\" data-money=\"fit\">\n<h3>{}</h3>",
            escape(&m.label)
        );
        fit_facts(out, d);
        table_head(out, "fit", &FIT_COLUMNS);
        for r in d.options.iter().take(FIT_ROWS) {
            fit_row(out, r);
        }
        out.push_str("</table>\n</div>\n");
        if d.options.len() > FIT_ROWS {
            let _ = writeln!(
                out,
                "<p class=\"note\" data-summary=\"fit\">{FIT_ROWS} of the document's {} rows shown, in its order (fitting rows first); every row is in the document.</p>",
                d.options.len()
            );
        }
        let shown: Vec<_> = d.options.iter().take(FIT_ROWS).collect();
        if shown.iter().any(|r| r.budget.is_some()) {
            out.push_str("<h4>The engine's budget per GPU</h4>\n<p class=\"note\">On the busiest GPU of each package, as the engine budgets it at start-up: the total memory times the fraction it may use, minus the weights and the terms it subtracts, leaves the KV cache pool; estimated terms show their range. A negative pool: the engine does not start.</p>\n");
            table_head(out, "budget", &BUDGET_COLUMNS);
            for r in shown.iter().filter(|r| r.budget.is_some()) {
                budget_row(out, r);
            }
            out.push_str("</table>\n</div>\n");
        } else {
            out.push_str("<p class=\"note\">No engine budget in this document (<code>--serve none</code>, or no model geometry): each package's need is the raw figure against its usable memory minus the flat reserve.</p>\n");
        }
        out.push_str("</article>\n");
    }
    out.push_str("</section>\n");
}

/// What a fit assumed, as labelled facts.
fn fit_facts(out: &mut String, d: &FitDocument) {
    let a = &d.assumptions;
    let scalar_of = |v: &Option<Value>| v.as_ref().map_or("-".to_string(), scalar);
    let engine = a.engine.as_ref();
    let engine_opt = |k: &str| {
        engine
            .and_then(|e| e.get(k))
            .filter(|v| !v.is_null())
            .map(scalar)
    };
    let serve = match a.serve.as_deref() {
        Some("none") | None => format!(
            "none: usable memory minus a flat reserve of {} GiB per GPU; tight under {} GiB of headroom",
            scalar_of(&a.reserve_gib_per_gpu),
            scalar_of(&a.tight_headroom_gib)
        ),
        Some(name) => {
            let mut s = name.to_string();
            for (k, flag) in [
                ("gpu_memory_utilization", "--gpu-memory-utilization"),
                ("mem_fraction_static", "--mem-fraction-static"),
                ("max_num_seqs", "--max-num-seqs"),
                ("max_num_batched_tokens", "--max-num-batched-tokens"),
                ("kv_cache_dtype", "--kv-cache-dtype"),
            ] {
                if let Some(v) = engine_opt(k) {
                    let _ = write!(s, " {flag} {v}");
                }
            }
            let share = engine
                .and_then(|e| e.get("tight_share"))
                .and_then(|v| match v {
                    Value::String(t) => t.parse::<f64>().ok(),
                    other => other.as_f64(),
                })
                .map(|t| format!("{}%", number(t * 100.0, 0)));
            if let Some(t) = share {
                let _ = write!(
                    s,
                    "; tight when the KV pool to spare is under {t} of the card or an estimate's high end would not fit"
                );
            }
            s
        }
    };
    let items = [
        ("model", d.model.clone()),
        (
            "parameters",
            d.parameters.map_or("-".to_string(), |p| p.to_string()),
        ),
        (
            "model memory",
            d.estimate.total_bytes.map_or("-".to_string(), bytes),
        ),
        (
            "workload",
            match a.context {
                Some(c) => format!(
                    "{c} tokens x {} sequence(s)",
                    a.batch.map_or("?".to_string(), |b| b.to_string())
                ),
                None => "weights only (no --context)".to_string(),
            },
        ),
        ("serving engine", serve),
    ];
    out.push_str("<dl>\n");
    for (k, v) in items {
        let _ = writeln!(out, "<dt>{k}</dt><dd>{}</dd>", escape(&v));
    }
    out.push_str("</dl>\n");
}

/// One row of the decision table: its standing in words and in colour, never a bare number.
fn fit_row(out: &mut String, r: &fit::FitRow) {
    let standing = RowStanding::of(r);
    let class = standing.class();
    let currency = r.currency.as_deref().unwrap_or("?");
    let mark = if r.example { " (example price)" } else { "" };
    let c = r.ceilings.as_ref();
    let headroom_class = match standing {
        RowStanding::Fits => "num",
        RowStanding::Tight | RowStanding::Unknown => "num warn",
        RowStanding::DoesNotFit => "num bad",
    };
    let context = match (r.largest_context, r.largest_context_limit.as_deref()) {
        (Some(t), Some("max-position-embeddings")) => format!("{t} (the model's cap)"),
        (Some(t), _) => t.to_string(),
        (None, Some("unbounded")) => "any".to_string(),
        _ => "-".to_string(),
    };
    table_row(
        out,
        &FIT_COLUMNS,
        &[
            ("", escape(&fit::package(r))),
            (class, standing.words().to_string()),
            (
                headroom_class,
                r.headroom_bytes
                    .map_or("-".to_string(), |h| gib(i128::from(h))),
            ),
            ("num", context),
            (
                "num",
                r.largest_batch.map_or("-".to_string(), |b| b.to_string()),
            ),
            (
                "num",
                c.and_then(|c| c.decode_tokens_per_s)
                    .map_or("-".to_string(), |t| {
                        format!("{} tok/s at most", number(t, 1))
                    }),
            ),
            (
                "num",
                c.and_then(|c| c.decode_price_per_mtok_cents.as_ref())
                    .and_then(|v| decimal_cents(v, currency, 4))
                    .map_or("-".to_string(), |p| escape(&format!("{p}{mark} at least"))),
            ),
            (
                "num",
                r.total_price_cents.map_or("-".to_string(), |p| {
                    escape(&format!("{}{mark}", cents(p, currency)))
                }),
            ),
            (
                "num",
                r.price_per_gpu_day_cents
                    .as_ref()
                    .and_then(|v| decimal_cents(v, currency, 2))
                    .map_or("-".to_string(), |p| escape(&format!("{p}{mark}"))),
            ),
            (
                if standing == RowStanding::Fits {
                    ""
                } else {
                    class
                },
                escape(fit::why(r).unwrap_or("-")),
            ),
        ],
    );
}

/// One row of the budget table.
fn budget_row(out: &mut String, r: &fit::FitRow) {
    let Some(b) = &r.budget else { return };
    let g = |v: Option<u64>| v.map_or("-".to_string(), |v| gib(i128::from(v)));
    let pool_class = match b.kv_pool_bytes {
        Some(p) if p < 0 => "num bad",
        _ => "num",
    };
    table_row(
        out,
        &BUDGET_COLUMNS,
        &[
            ("", escape(&fit::package(r))),
            ("", escape(b.serve.as_deref().unwrap_or("-"))),
            ("num", g(b.total_bytes)),
            (
                "num",
                escape(&b.fraction.as_ref().map_or("-".to_string(), scalar)),
            ),
            ("num", g(b.budget_bytes)),
            ("num", g(b.weights_bytes)),
            ("num", term(b.activation_peak.as_ref())),
            ("num", term(b.non_torch.as_ref())),
            (
                pool_class,
                b.kv_pool_bytes
                    .map_or("-".to_string(), |p| gib(i128::from(p))),
            ),
            (
                "num",
                b.kv_tokens.map_or("-".to_string(), |t| t.to_string()),
            ),
            ("num", term(b.cuda_graphs.as_ref())),
            ("num", g(b.margin_bytes)),
        ],
    );
}

fn figure(out: &mut String, kind: &str, caption: &str, svg: &str) {
    let _ = write!(
        out,
        "<figure class=\"chart\" data-chart=\"{}\">\n{svg}\n<figcaption class=\"note\">{}</figcaption>\n</figure>\n",
        escape(kind),
        escape(caption)
    );
}

fn device_name(doc: &MeasurementDocument) -> String {
    let d = &doc.environment.details;
    let name = d
        .get("gpu")
        .and_then(|g| g.get("name"))
        .or_else(|| d.get("cpu_model"))
        .and_then(Value::as_str);
    match name {
        Some(n) => format!("{} ({n})", doc.configuration.device),
        None => doc.configuration.device.clone(),
    }
}

fn run_card(
    out: &mut String,
    run: &Run,
    axes: &PhaseAxes,
    shared_with: &[&str],
) -> Result<(), ReportError> {
    let doc = &run.doc;
    let c = &doc.configuration;
    let _ = writeln!(
        out,
        "<article class=\"card run\">\n<h3>{}</h3>",
        escape(&run.label)
    );
    if doc.environment.reference_device {
        out.push_str("<p class=\"badge\">CPU reference device: real arithmetic on the host CPU, not a GPU measurement</p>\n");
    }
    let check = match &doc.check {
        Some(ch) => format!(
            "{} (relative error {:.2e}, bound {:.0e})",
            if ch.passed { "passed" } else { "FAILED" },
            ch.relative_error,
            ch.bound
        ),
        None => "not run".to_string(),
    };
    let status = match &doc.error {
        Some(e) => format!("INCOMPLETE: {} ({})", e.message, e.kind),
        None if doc.complete => "complete".to_string(),
        None => "INCOMPLETE".to_string(),
    };
    let items = [
        ("device", device_name(doc)),
        ("engine", engine_name(doc)),
        (
            "shape",
            format!(
                "[batch {} x context {} x width {}] -> hidden {}",
                c.batch, c.context, c.width, c.hidden
            ),
        ),
        ("dtype", format!("{} ({})", c.dtype, c.math_mode)),
        (
            "passes",
            format!("{} warm-up, {} timed; seed {}", c.warmup, c.repeats, c.seed),
        ),
        (
            "parameters",
            format!(
                "{} ({})",
                doc.synthetic_model.parameter_count,
                bytes(doc.synthetic_model.parameter_bytes)
            ),
        ),
        ("started", doc.started_utc.clone()),
        ("check", check),
        ("status", status),
    ];
    out.push_str("<dl>\n");
    for (k, v) in items {
        let class = if (k == "status" && !doc.complete) || v.starts_with("FAILED") {
            " class=\"bad\""
        } else {
            ""
        };
        let _ = writeln!(out, "<dt>{k}</dt><dd{class}>{}</dd>", escape(&v));
    }
    out.push_str("</dl>\n");
    let time_caption = if doc.phases.iter().any(|p| p.device_seconds.is_some()) {
        "Wall clock (host, around the synchronized region) next to device time (CUDA events). \
         Phases: load = model_load, cold = cold_forward, warm N = warm_forward #N."
    } else {
        "Wall clock only: this device has no device clock (device time is null). \
         Phases: load = model_load, cold = cold_forward, warm N = warm_forward #N."
    };
    figure(
        out,
        "phase-time",
        time_caption,
        &charts::phase_time(run, axes)?,
    );
    let scale = if shared_with.is_empty() {
        if axes.memory_max > 1.0 {
            "This run's own memory scale: its peak is more than 10x apart from the other runs' \
             (or it is the only run)."
                .to_string()
        } else {
            "This run's own memory scale.".to_string()
        }
    } else {
        format!("Same memory scale as {}.", shared_with.join(", "))
    };
    figure(
        out,
        "phase-memory",
        &format!(
            "Allocator counters per phase: baseline (after the opening synchronize), end, and \
             peak. {scale}"
        ),
        &charts::phase_memory(run, axes)?,
    );
    out.push_str("</article>\n");
    Ok(())
}

/// Which engine measured a run, in words.
fn engine_name(doc: &MeasurementDocument) -> String {
    match &doc.engine {
        Some(e) => format!("{} {} ({})", e.name, e.version, e.build),
        None => "native (iteragpu's own)".to_string(),
    }
}

/// What makes two runs the same measurement but for the engine.
fn configuration_key(doc: &MeasurementDocument) -> String {
    let c = &doc.configuration;
    format!(
        "{} {}x{}x{} hidden {} {} warmup {} repeats {} tf32 {} seed {}",
        c.device,
        c.batch,
        c.context,
        c.width,
        c.hidden,
        c.dtype,
        c.warmup,
        c.repeats,
        c.allow_tf32,
        c.seed
    )
}

const ENGINE_COLUMNS: [&str; 9] = [
    "phase",
    "native wall ms",
    "torch wall ms",
    "native device ms",
    "torch device ms",
    "device ratio native/torch",
    "native peak allocated",
    "torch peak allocated",
    "peak allocated",
];

/// Where one configuration ran on both engines (the native engine and the machine's PyTorch),
/// their phases side by side: times, the ratio of device times, and the allocator peaks, which
/// the native engine's model of torch's allocator says must be equal.
fn engines_side_by_side(out: &mut String, runs: &[Run]) {
    let mut pairs = Vec::new();
    for (i, native) in runs.iter().enumerate() {
        if native.doc.engine.is_some() {
            continue;
        }
        let key = configuration_key(&native.doc);
        if let Some(torch) = runs
            .iter()
            .skip(i + 1)
            .chain(runs.iter().take(i))
            .find(|r| {
                r.doc.engine.as_ref().is_some_and(|e| e.name == "torch")
                    && configuration_key(&r.doc) == key
            })
        {
            pairs.push((native, torch));
        }
    }
    if pairs.is_empty() {
        return;
    }
    out.push_str(
        "<section id=\"engines\">\n<h2>Native and torch engines, side by side</h2>\n<p class=\"note\">\
         The same configuration measured by iteragpu's native engine and by the machine's PyTorch \
         (<code>measure --engine torch</code>). The native engine mirrors torch's caching \
         allocator, so its peaks should equal torch's; a ratio of device times above 1 means the \
         native engine was slower.</p>\n",
    );
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| format!("{:.3}", s * 1e3));
    for (native, torch) in pairs {
        let _ = writeln!(
            out,
            "<h3>{} and {}</h3>\n<p class=\"note\">{}; torch: {}</p>",
            escape(&native.label),
            escape(&torch.label),
            escape(&configuration_key(&native.doc)),
            escape(&engine_name(&torch.doc))
        );
        table_head(out, "", &ENGINE_COLUMNS);
        for row in &native.doc.phases {
            let other = torch
                .doc
                .phases
                .iter()
                .find(|r| r.phase == row.phase && r.index == row.index);
            let (a, b) = (
                row.memory.peak_allocated_bytes,
                other.map(|r| r.memory.peak_allocated_bytes),
            );
            let ratio = match (row.device_seconds, other.and_then(|r| r.device_seconds)) {
                (Some(x), Some(y)) if y > 0.0 => format!("{:.2}", x / y),
                _ => "-".to_string(),
            };
            let verdict = match b {
                Some(b) if b == a => ("", "same".to_string()),
                Some(b) => ("bad", format!("differs by {} B", a.abs_diff(b))),
                None => ("bad", "no torch row".to_string()),
            };
            table_row(
                out,
                &ENGINE_COLUMNS,
                &[
                    ("", escape(&format!("{} #{}", row.phase.name(), row.index))),
                    ("num", ms(Some(row.wall_seconds))),
                    ("num", ms(other.map(|r| r.wall_seconds))),
                    ("num", ms(row.device_seconds)),
                    ("num", ms(other.and_then(|r| r.device_seconds))),
                    ("num", ratio),
                    ("num", escape(&bytes(a))),
                    (
                        "num",
                        b.map_or_else(|| "-".to_string(), |b| escape(&bytes(b))),
                    ),
                    (verdict.0, escape(&verdict.1)),
                ],
            );
        }
        out.push_str("</table>\n</div>\n");
    }
    out.push_str("</section>\n");
}

/// How a probe's node is named on a fleet chart: the node its document records (its name, else
/// its rank), else the folder the document sits in (`DIR/<node>/probe.json`), else its label.
fn node_name(probe: &Probe) -> String {
    if let Some(n) = &probe.doc.node {
        if let Some(name) = &n.name {
            return name.clone();
        }
        if let Some(r) = n.rank {
            return format!("rank {r}");
        }
    }
    std::path::Path::new(&probe.label)
        .parent()
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| probe.label.clone())
}

/// At most this many probe cards on a page: a fleet of 1,024 nodes would otherwise give a
/// page of 15 MB that no renter reads; the fleet charts and the verdict cover the rest.
const PROBE_CARDS: usize = 16;

/// At most this many bars on a fleet chart: the outliers and the lowest devices, since a slow
/// GPU is what a renter looks for; the rest is summarised in the caption.
const FLEET_BARS: usize = 64;

/// Which probe cards the page shows, in order: all of them up to [`PROBE_CARDS`]; past that,
/// the flagged ones first (an outlier device on a fleet chart, a warning, an error, an
/// incomplete run), then the others in their order, [`PROBE_CARDS`] in all.
fn cards_shown(probes: &[Probe], flagged: &[usize]) -> Vec<usize> {
    if probes.len() <= PROBE_CARDS {
        return (0..probes.len()).collect();
    }
    let bad = |i: usize| {
        let d = &probes[i].doc;
        flagged.contains(&i) || d.warnings > 0 || d.error.is_some() || !d.complete
    };
    let mut order: Vec<usize> = (0..probes.len()).filter(|&i| bad(i)).collect();
    order.extend((0..probes.len()).filter(|&i| !bad(i)));
    order.truncate(PROBE_CARDS);
    order
}

/// One figure of the fleet charts: its name, label, unit, and a bar per device with the index
/// of the probe it came from.
type Figure = (String, String, &'static str, Vec<(usize, FleetBar)>);

/// Several probes (the nodes of a fleet, or machines side by side): each figure on one axis
/// with every device of every probe (past [`FLEET_BARS`], the outliers and the lowest, the rest
/// summarised), the outliers (more than the lot's tolerance below the median of all the
/// others) marked. Returns the probes that hold an outlier.
fn fleet_charts(out: &mut String, probes: &[Probe]) -> Result<Vec<usize>, ReportError> {
    // (figure name, label, unit, bars)
    let mut figures: Vec<Figure> = Vec::new();
    let mut add =
        |name: &str, label: &str, unit: &'static str, bar: (usize, FleetBar)| match figures
            .iter_mut()
            .find(|f| f.0 == name)
        {
            Some(f) => f.3.push(bar),
            None => figures.push((name.to_string(), label.to_string(), unit, vec![bar])),
        };
    for (index, p) in probes.iter().enumerate() {
        let node = node_name(p);
        for d in &p.doc.devices {
            let label = format!("{node}/{}", d.device);
            for c in &d.copies {
                if let Some(v) = c.gb_per_s {
                    let bar = FleetBar {
                        label: label.clone(),
                        value: v,
                        reference: line_at(v, c.reference.as_ref()),
                        outlier: false,
                    };
                    add(c.kind.name(), c.kind.label(), "GB/s", (index, bar));
                }
            }
            for g in &d.gemms {
                if let Some(v) = g.tflops {
                    let bar = FleetBar {
                        label: label.clone(),
                        value: v,
                        reference: line_at(v, g.reference.as_ref()),
                        outlier: false,
                    };
                    add(
                        g.kind.name(),
                        &format!("{} GEMM", g.kind.name()),
                        "TFLOP/s",
                        (index, bar),
                    );
                }
            }
        }
    }
    if figures.iter().all(|f| f.3.len() < 2) {
        return Ok(Vec::new());
    }
    let tolerance = probes.first().map_or(lab::probe::LOT_OUTLIER_PERCENT, |p| {
        p.doc.configuration.lot_outlier_percent
    });
    let _ = writeln!(
        out,
        "<article class=\"card fleet\">\n<h3>Every device of every probe</h3>\n<p class=\"note\">{} probe(s) side by side: each figure on one axis, one bar per device of every node; a device more than {}% below the median of all the others is marked as the outlier.</p>",
        probes.len(),
        number(tolerance, 0)
    );
    let mut named: Vec<String> = Vec::new();
    let mut flagged: Vec<usize> = Vec::new();
    for (name, label, unit, bars) in &mut figures {
        let values: Vec<f64> = bars.iter().map(|b| b.1.value).collect();
        for o in lab::stats::low_outliers_of_lot(&values, tolerance) {
            bars[o.index].1.outlier = true;
            flagged.push(bars[o.index].0);
            named.push(format!(
                "{} {name}: {} {unit}, {}% below the others' median {}",
                bars[o.index].1.label,
                number(o.value, 1),
                number(o.percent_below, 0),
                number(o.median_of_others, 1)
            ));
        }
        if bars.len() < 2 {
            continue;
        }
        let (drawn, caption) = if bars.len() > FLEET_BARS {
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
            let mut order: Vec<&FleetBar> = bars.iter().map(|b| &b.1).collect();
            order.sort_by(|a, b| b.outlier.cmp(&a.outlier).then(a.value.total_cmp(&b.value)));
            order.truncate(FLEET_BARS);
            let drawn: Vec<FleetBar> = order.into_iter().cloned().collect();
            let caption = format!(
                "{label}: the {} lowest of {} devices, outliers first (red), the black line the datasheet figure; all {}: min {}, 5th percentile {}, median {}, 95th percentile {}, max {} {unit}.",
                drawn.len(),
                bars.len(),
                bars.len(),
                number(at(0.0), 1),
                number(at(0.05), 1),
                number(at(0.5), 1),
                number(at(0.95), 1),
                number(at(1.0), 1)
            );
            (drawn, caption)
        } else {
            (
                bars.iter().map(|b| b.1.clone()).collect(),
                format!(
                    "{label}: every device of every probe; red bars are outliers, the black line is the datasheet figure."
                ),
            )
        };
        figure(
            out,
            "fleet-figure",
            &caption,
            &charts::fleet_bars(&format!("{label} across nodes"), unit, &drawn)?,
        );
    }
    if !named.is_empty() {
        out.push_str("<ul>\n");
        for n in named {
            let _ = writeln!(out, "<li class=\"bad\">outlier: {}</li>", escape(&n));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</article>\n");
    flagged.sort_unstable();
    flagged.dedup();
    Ok(flagged)
}

/// A probe: what was probed, a table of every figure against the datasheet, the warnings, and
/// a bar chart each for copies and products.
fn probe_card(out: &mut String, probe: &Probe) -> Result<(), ReportError> {
    let doc = &probe.doc;
    let _ = writeln!(
        out,
        "<article class=\"card probe\">\n<h3>{}</h3>",
        escape(&probe.label)
    );
    if doc.reference_device {
        out.push_str("<p class=\"badge\">CPU reference device: host memcpy bandwidth only, not a GPU figure</p>\n");
    }
    let devices: Vec<String> = doc
        .devices
        .iter()
        .map(|d| match &d.facts {
            Some(f) => format!("{} ({})", d.device, f.name),
            None => d.device.clone(),
        })
        .collect();
    let status = match &doc.error {
        Some(e) => format!("INCOMPLETE: {e}"),
        None if doc.complete => "complete".to_string(),
        None => "INCOMPLETE".to_string(),
    };
    let items = [
        ("devices", devices.join(", ")),
        ("datasheet", doc.datasheet.clone()),
        (
            "budget",
            format!(
                "{} s per GPU{}",
                doc.configuration.seconds_per_gpu,
                if doc.configuration.concurrent {
                    ", GPUs concurrently"
                } else {
                    ""
                }
            ),
        ),
        ("started", doc.started_utc.clone()),
        ("warnings", doc.warnings.to_string()),
        ("status", status),
    ];
    out.push_str("<dl>\n");
    for (k, v) in items {
        let bad = (k == "status" && !doc.complete) || (k == "warnings" && doc.warnings > 0);
        let class = if bad { " class=\"bad\"" } else { "" };
        let _ = writeln!(out, "<dt>{k}</dt><dd{class}>{}</dd>", escape(&v));
    }
    out.push_str("</dl>\n");

    let mut copies: Vec<ProbeGroup> = Vec::new();
    let mut gemms: Vec<ProbeGroup> = Vec::new();
    let mut rows = String::new();
    let push = |groups: &mut Vec<ProbeGroup>, label: &str, bar: ProbeBar| match groups
        .iter_mut()
        .find(|g| g.label == label)
    {
        Some(g) => g.bars.push(bar),
        None => groups.push(ProbeGroup {
            label: label.to_string(),
            bars: vec![bar],
        }),
    };
    for (i, d) in doc.devices.iter().enumerate() {
        for c in &d.copies {
            if let Some(v) = c.gb_per_s {
                probe_row(
                    &mut rows,
                    &d.device,
                    c.kind.label(),
                    v,
                    "GB/s",
                    c.reference.as_ref(),
                );
                let bar = ProbeBar {
                    device: i,
                    value: v,
                    reference: line_at(v, c.reference.as_ref()),
                };
                push(&mut copies, c.kind.name(), bar);
            }
        }
        for g in &d.gemms {
            if let Some(v) = g.tflops {
                let figure = format!("{} GEMM {}x{}x{}", g.kind.name(), g.m, g.n, g.k);
                probe_row(
                    &mut rows,
                    &d.device,
                    &figure,
                    v,
                    "TFLOP/s",
                    g.reference.as_ref(),
                );
                let bar = ProbeBar {
                    device: i,
                    value: v,
                    reference: line_at(v, g.reference.as_ref()),
                };
                push(&mut gemms, g.kind.name(), bar);
            }
        }
    }
    for p in &doc.peers {
        if let Some(v) = p.gb_per_s {
            let figure = format!("peer to peer {} -> {}", p.from, p.to);
            probe_row(&mut rows, &p.from, &figure, v, "GB/s", p.reference.as_ref());
            if let Some(i) = doc.devices.iter().position(|d| d.device == p.from) {
                let bar = ProbeBar {
                    device: i,
                    value: v,
                    reference: line_at(v, p.reference.as_ref()),
                };
                push(&mut copies, &format!("p2p -> {}", p.to), bar);
            }
        }
    }
    table_head(out, "", &PROBE_COLUMNS);
    out.push_str(&rows);
    out.push_str("</table>\n</div>\n");
    let warnings: Vec<_> = doc
        .findings
        .iter()
        .filter(|f| f.severity == lab::lot::Severity::Warning)
        .collect();
    if !warnings.is_empty() {
        out.push_str("<ul>\n");
        for f in warnings {
            let _ = writeln!(
                out,
                "<li class=\"bad\">{}: {}</li>",
                escape(&f.code),
                escape(&f.message)
            );
        }
        out.push_str("</ul>\n");
    }
    if !copies.is_empty() {
        let caption = if doc.reference_device {
            "Host memory to host memory on the CPU: no GPU and no datasheet figure."
        } else {
            "Median copy bandwidth per GPU; the black line is the datasheet figure (one direction of the PCIe link for host copies, half the memory bandwidth for a copy within the GPU, which reads and writes every byte)."
        };
        figure(
            out,
            "probe-copies",
            caption,
            &charts::probe_bars("Copy bandwidth per device", "GB/s", &devices, &copies)?,
        );
    }
    if !gemms.is_empty() {
        figure(
            out,
            "probe-gemms",
            "Median dense GEMM throughput per GPU and dtype; the black line is the datasheet's dense peak.",
            &charts::probe_bars("GEMM throughput per GPU", "TFLOP/s", &devices, &gemms)?,
        );
    }
    out.push_str("</article>\n");
    Ok(())
}

/// Where the datasheet line of a bar goes, in the bar's own unit: the value at which the figure
/// would be 100% of its datasheet figure. Most figures compare directly (the line is the datasheet
/// value); a device-to-device copy compares its memory traffic, twice the copy rate, so its line
/// sits at half the memory bandwidth.
fn line_at(value: f64, r: Option<&lab::probe::Reference>) -> Option<f64> {
    r.map(|r| {
        if r.percent > 0.0 && r.percent.is_finite() {
            value * 100.0 / r.percent
        } else {
            r.value
        }
    })
}

/// One row of a probe's table: the figure, its datasheet figure and the percentage (marked when
/// under the probe's threshold).
fn probe_row(
    rows: &mut String,
    device: &str,
    figure: &str,
    value: f64,
    unit: &str,
    r: Option<&lab::probe::Reference>,
) {
    let (reference, percent, class) = match r {
        Some(r) => (
            format!("{} {unit}", number(r.value, 1)),
            format!("{}%", number(r.percent, 1)),
            if r.below_threshold { "num bad" } else { "num" },
        ),
        None => ("-".to_string(), "-".to_string(), "num"),
    };
    table_row(
        rows,
        &PROBE_COLUMNS,
        &[
            ("", escape(device)),
            ("", escape(figure)),
            ("num", format!("{} {unit}", number(value, 1))),
            ("num", escape(&reference)),
            (class, escape(&percent)),
        ],
    );
}

const PROBE_COLUMNS: [&str; 5] = ["device", "figure", "measured", "datasheet", "of datasheet"];

/// Opens a table (in a frame that scrolls sideways where the table is wider than the page) with
/// its header row. On a narrow screen the style stacks the rows instead: each cell on its own
/// line, named by its `data-label`.
fn table_head(out: &mut String, class: &str, columns: &[&str]) {
    let _ = write!(
        out,
        "<div class=\"scroll{}{class}\">\n<table>\n<tr class=\"head\">",
        if class.is_empty() { "" } else { " " }
    );
    for c in columns {
        let _ = write!(out, "<th>{}</th>", escape(c));
    }
    out.push_str("</tr>\n");
}

/// One row: (class, escaped HTML) per cell, each labelled by its column for the stacked view.
fn table_row(out: &mut String, columns: &[&str], cells: &[(&str, String)]) {
    out.push_str("<tr>");
    for (column, (class, html)) in columns.iter().zip(cells) {
        let class = if class.is_empty() {
            String::new()
        } else {
            format!(" class=\"{class}\"")
        };
        let _ = write!(
            out,
            "<td data-label=\"{}\"{class}>{html}</td>",
            escape(column)
        );
    }
    out.push_str("</tr>\n");
}

fn ok_rows(sweep: &Sweep) -> impl Iterator<Item = &Row> {
    sweep.rows.iter().filter(|r| r.status == Status::Ok)
}

fn sweeps(out: &mut String, sweeps: &[Sweep]) -> Result<(), ReportError> {
    let mut dimensions: Vec<&str> = Vec::new();
    for s in sweeps {
        let d = s.dimension().unwrap_or("(empty)");
        if !dimensions.contains(&d) {
            dimensions.push(d);
        }
    }
    for dim in dimensions {
        let group: Vec<(usize, &Sweep)> = sweeps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.dimension().unwrap_or("(empty)") == dim)
            .collect();
        let _ = writeln!(
            out,
            "<h3>Against {} ({})</h3>\n<p class=\"note\">Every sweep of this dimension on the same axes; points that did not finish are left out of the curves (see the tables).</p>\n<div class=\"grid\">",
            escape(dim),
            group
                .iter()
                .map(|(_, s)| escape(&s.label))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let x = |r: &Row| r.value as f64;
        let color = |i: usize| PALETTE[i % PALETTE.len()];
        let mut time = Vec::new();
        let mut memory = Vec::new();
        let mut flops = Vec::new();
        let mem_unit = bytes_unit(
            group
                .iter()
                .flat_map(|(_, s)| ok_rows(s).filter_map(|r| r.peak_reserved_bytes))
                .max()
                .unwrap_or(0) as f64,
        );
        let flops_unit = flops_unit(
            group
                .iter()
                .flat_map(|(_, s)| ok_rows(s).filter_map(|r| r.achieved_flops_per_second))
                .fold(0.0, f64::max),
        );
        for &(i, s) in &group {
            let pts = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<(f64, f64)> {
                ok_rows(s).filter_map(|r| f(r).map(|y| (x(r), y))).collect()
            };
            time.push(Series {
                label: format!("{} wall", s.label),
                points: pts(&|r| r.warm_forward_median_wall_seconds.map(|t| t * 1e3)),
                color: color(i),
                dashed: false,
            });
            let device = pts(&|r| r.warm_forward_median_device_seconds.map(|t| t * 1e3));
            if !device.is_empty() {
                time.push(Series {
                    label: format!("{} device", s.label),
                    points: device,
                    color: color(i),
                    dashed: true,
                });
            }
            memory.push(Series {
                label: format!("{} peak allocated", s.label),
                points: pts(&|r| r.peak_allocated_bytes.map(|b| b as f64 / mem_unit.scale)),
                color: color(i),
                dashed: false,
            });
            memory.push(Series {
                label: format!("{} peak reserved", s.label),
                points: pts(&|r| r.peak_reserved_bytes.map(|b| b as f64 / mem_unit.scale)),
                color: color(i),
                dashed: true,
            });
            flops.push(Series {
                label: s.label.clone(),
                points: pts(&|r| r.achieved_flops_per_second.map(|f| f / flops_unit.scale)),
                color: color(i),
                dashed: false,
            });
        }
        let x_desc = dim.to_string();
        figure(
            out,
            "sweep-time",
            "Median of the warm forward passes: wall clock (solid) and device time (dashed, where the device has a clock).",
            &charts::line_chart(
                &format!("Warm forward time against {dim}"),
                &x_desc,
                "median time in ms",
                &time,
            )?,
        );
        figure(
            out,
            "sweep-memory",
            "Highest allocated (solid) and reserved (dashed) bytes over all phases of each point.",
            &charts::line_chart(
                &format!("Peak memory against {dim}"),
                &x_desc,
                &format!("bytes in {}", mem_unit.name),
                &memory,
            )?,
        );
        figure(
            out,
            "sweep-flops",
            "Forward FLOPs (2mnk per product) over the median time (device time where present, else wall clock).",
            &charts::line_chart(
                &format!("Achieved throughput against {dim}"),
                &x_desc,
                flops_unit.name,
                &flops,
            )?,
        );
        out.push_str("</div>\n");
        for (_, s) in group {
            sweep_table(out, s);
        }
    }
    Ok(())
}

fn sweep_table(out: &mut String, s: &Sweep) {
    let _ = writeln!(out, "<h4>{}</h4>", escape(&s.label));
    let columns = [
        s.dimension().unwrap_or("value"),
        "batch",
        "context",
        "width",
        "hidden",
        "dtype",
        "status",
        "wall median",
        "device median",
        "achieved",
        "peak allocated",
        "peak reserved",
        "check",
        "reason",
        "file",
    ];
    table_head(out, "", &columns);
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    for r in &s.rows {
        let status = if r.status == Status::Ok { "" } else { "bad" };
        let num = |v: usize| ("num", v.to_string());
        table_row(
            out,
            &columns,
            &[
                num(r.value),
                num(r.batch),
                num(r.context),
                num(r.width),
                num(r.hidden),
                ("", escape(&r.dtype.to_string())),
                (status, r.status.name().to_string()),
                (
                    "num",
                    opt(r
                        .warm_forward_median_wall_seconds
                        .map(|t| format!("{} ms", tick(t * 1e3)))),
                ),
                (
                    "num",
                    opt(r
                        .warm_forward_median_device_seconds
                        .map(|t| format!("{} ms", tick(t * 1e3)))),
                ),
                (
                    "num",
                    opt(r.achieved_flops_per_second.map(|f| {
                        let u = flops_unit(f);
                        format!("{} {}", tick(f / u.scale), u.name)
                    })),
                ),
                ("num", opt(r.peak_allocated_bytes.map(bytes))),
                ("num", opt(r.peak_reserved_bytes.map(bytes))),
                (
                    "",
                    opt(r
                        .check_passed
                        .map(|p| if p { "passed" } else { "FAILED" }.to_string())),
                ),
                ("", escape(&r.reason)),
                ("", escape(&r.file)),
            ],
        );
    }
    out.push_str("</table>\n</div>\n");
}

const MONEY_COLUMNS: [&str; 5] = [
    "package",
    "GPU",
    "price",
    "accepted results",
    "price per accepted result",
];

/// Whole cents as money: `USD 1646.00`.
fn cents(c: u64, currency: &str) -> String {
    format!("{currency} {}.{:02}", c / 100, c % 100)
}

/// A decimal number of cents (a string, as the documents write it, or a number) as money with
/// `places` decimals: `137.1667` cents at 6 places reads `USD 1.371667`.
fn decimal_cents(v: &Value, currency: &str, places: usize) -> Option<String> {
    let c = match v {
        Value::String(s) => s.parse::<f64>().ok()?,
        Value::Number(n) => n.as_f64()?,
        _ => return None,
    };
    c.is_finite()
        .then(|| format!("{currency} {:.places$}", c / 100.0))
}

/// `h100-sxm: 30 days x 1 lot`.
fn package(doc: &Value) -> String {
    let s = |k: &str| {
        doc.get(k)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    let n = |k: &str| doc.get(k).and_then(Value::as_u64).unwrap_or(0);
    let lots = n("lots");
    let gpus = match doc.get("total_gpus").and_then(Value::as_u64) {
        Some(g) => format!(" ({g} GPU{})", if g == 1 { "" } else { "s" }),
        None => String::new(),
    };
    format!(
        "{}: {} days x {lots} lot{}{gpus}",
        s("gpu"),
        n("days"),
        if lots == 1 { "" } else { "s" }
    )
}

/// One row of the money table from a price document, a fit option or a rental.
fn money_row(
    out: &mut String,
    doc: &Value,
    accepted: Option<u64>,
    unit: Option<&Value>,
    why: Option<&str>,
) {
    let currency = doc.get("currency").and_then(Value::as_str).unwrap_or("?");
    let example = doc.get("example").and_then(Value::as_bool).unwrap_or(false)
        || doc
            .get("example_price")
            .and_then(Value::as_bool)
            .unwrap_or(false)
        || doc
            .get("source")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("example price"));
    let mark = if example { " (example price)" } else { "" };
    let price = doc
        .get("total_price_cents")
        .and_then(Value::as_u64)
        .map_or("-".to_string(), |c| format!("{}{mark}", cents(c, currency)));
    let per = unit
        .and_then(|u| decimal_cents(u, currency, 6))
        .map(|p| format!("{p}{mark}"))
        .or_else(|| why.map(str::to_string))
        .unwrap_or_else(|| "-".to_string());
    let model = doc.get("model").and_then(Value::as_str).unwrap_or("-");
    table_row(
        out,
        &MONEY_COLUMNS,
        &[
            ("", escape(&package(doc))),
            ("", escape(model)),
            ("num", escape(&price)),
            ("num", accepted.map_or("-".to_string(), |a| a.to_string())),
            ("num", escape(&per)),
        ],
    );
}

/// A ledger's runs measured on another device than their package's GPU, which `cost` also says:
/// the price per result then rests on a run that did not use the GPU paid for.
fn mismatches(out: &mut String, doc: &Value) {
    let rentals = doc.get("rentals").and_then(Value::as_array);
    for r in rentals.into_iter().flatten() {
        let list = r.get("device_mismatches").and_then(Value::as_array);
        for d in list.into_iter().flatten() {
            let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("?");
            let _ = writeln!(
                out,
                "<p class=\"bad\">Rental {}, line {}: measured on {} ({}), not the package's {} (recorded with --allow-device-mismatch).</p>",
                escape(r.get("rental").and_then(Value::as_str).unwrap_or("?")),
                d.get("line").and_then(Value::as_u64).unwrap_or(0),
                escape(s("device_model")),
                escape(s("device_uuid")),
                escape(r.get("model").and_then(Value::as_str).unwrap_or("GPU"))
            );
        }
    }
}

/// What the reader pays: each price, fit and ledger document as a table of packages, their
/// prices and the price per accepted result where the document knows the accepted results.
fn money_section(out: &mut String, money: &[Money]) {
    out.push_str("<section id=\"cost\">\n<h2>Cost</h2>\n<p class=\"note\">Packages and their prices from <code>iteragpu price</code> and <code>cost</code> documents (a <code>fit</code> document's prices are in its decision table above). The price per accepted result is the package's whole price over the results the protocol accepted (a ledger), or over the results a price was asked for (<code>price --accepted-results</code>).</p>\n");
    for m in money.iter().filter(|m| m.kind != MoneyKind::Fit) {
        let doc = &m.doc;
        let str_of = |k: &str| doc.get(k).and_then(Value::as_str).unwrap_or("-");
        let (title, note) = match m.kind {
            MoneyKind::Price => ("price", format!("catalogue {}", str_of("catalogue"))),
            // Fit documents have their own section; none reaches here.
            MoneyKind::Fit => ("fit", String::new()),
            MoneyKind::Ledger => (
                "ledger",
                format!(
                    "grid {}: {} run(s); catalogue {}",
                    str_of("results"),
                    doc.get("runs").and_then(Value::as_u64).unwrap_or(0),
                    str_of("catalogue")
                ),
            ),
        };
        let _ = writeln!(
            out,
            "<article class=\"card money\" data-money=\"{title}\">\n<h3>{}</h3>\n<p class=\"note\">{} document; {}</p>",
            escape(&m.label),
            title,
            escape(&note)
        );
        table_head(out, "money", &MONEY_COLUMNS);
        match m.kind {
            MoneyKind::Price => {
                let accepted = doc.get("accepted_results").and_then(Value::as_u64);
                let why = accepted
                    .is_none()
                    .then_some("not asked (price --accepted-results N)");
                money_row(out, doc, accepted, doc.get("unit_price_cents"), why);
            }
            MoneyKind::Fit => {}
            MoneyKind::Ledger => {
                let rentals = doc.get("rentals").and_then(Value::as_array);
                for r in rentals.into_iter().flatten() {
                    let mut row = r.clone();
                    if let (Some(name), Some(o)) =
                        (r.get("rental").and_then(Value::as_str), row.as_object_mut())
                    {
                        let gpu = o.get("gpu").and_then(Value::as_str).unwrap_or("?");
                        o.insert("gpu".into(), Value::String(format!("rental {name}, {gpu}")));
                    }
                    money_row(
                        out,
                        &row,
                        r.get("accepted_units").and_then(Value::as_u64),
                        r.get("unit_price_cents"),
                        r.get("no_unit_price").and_then(Value::as_str),
                    );
                }
                let totals = doc.get("totals").and_then(Value::as_array);
                for t in totals.into_iter().flatten() {
                    let currency = t.get("currency").and_then(Value::as_str).unwrap_or("?");
                    let mark = if t.get("example_price").and_then(Value::as_bool) == Some(true) {
                        " (example price)"
                    } else {
                        ""
                    };
                    let total = t.get("total_price_cents").and_then(Value::as_u64);
                    let per = t
                        .get("unit_price_cents")
                        .and_then(|u| decimal_cents(u, currency, 6))
                        .map(|p| format!("{p}{mark}"));
                    table_row(
                        out,
                        &MONEY_COLUMNS,
                        &[
                            (
                                "",
                                escape(&format!(
                                    "all {} rental(s)",
                                    t.get("rentals").and_then(Value::as_u64).unwrap_or(0)
                                )),
                            ),
                            ("", "-".to_string()),
                            (
                                "num",
                                total.map_or("-".to_string(), |c| {
                                    format!("{}{mark}", cents(c, currency))
                                }),
                            ),
                            (
                                "num",
                                t.get("accepted_units")
                                    .and_then(Value::as_u64)
                                    .map_or("-".to_string(), |a| a.to_string()),
                            ),
                            (
                                "num",
                                escape(
                                    &per.or_else(|| {
                                        t.get("no_unit_price")
                                            .and_then(Value::as_str)
                                            .map(str::to_string)
                                    })
                                    .unwrap_or_else(|| "-".to_string()),
                                ),
                            ),
                        ],
                    );
                }
            }
        }
        out.push_str("</table>\n</div>\n");
        if m.kind == MoneyKind::Ledger {
            mismatches(out, doc);
        }
        out.push_str("</article>\n");
    }
    out.push_str("</section>\n");
}

/// The environment as labelled facts: the typed header, then every detail under a readable
/// name, with its unit (`host_memory.total_bytes: 17314432` reads "Host memory, total 16.51 MiB").
fn environment_rows(env: &Environment) -> Vec<(String, String)> {
    let mut rows = vec![
        ("Backend".to_string(), env.backend.clone()),
        (
            "Reference device".to_string(),
            if env.reference_device {
                "yes: the CPU, not a GPU".to_string()
            } else {
                "no".to_string()
            },
        ),
        (
            "Usable".to_string(),
            if env.usable { "yes" } else { "no" }.to_string(),
        ),
        (
            "Tool".to_string(),
            format!(
                "{} {}{}",
                env.tool.name,
                env.tool.version,
                env.tool
                    .commit
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            ),
        ),
    ];
    if let Some(p) = &env.problem {
        rows.push(("Problem".to_string(), p.clone()));
    }
    flatten(&env.details, &[], &mut rows);
    rows
}

/// A key's words, with the usual acronyms in capitals: `gpu_uuid` reads "GPU UUID".
fn words(key: &str) -> String {
    key.split(['_', '-'])
        .filter(|w| !w.is_empty())
        .map(|w| match w.to_ascii_lowercase().as_str() {
            "cpus" | "gpus" => format!("{}s", w[..w.len() - 1].to_ascii_uppercase()),
            "gpu" | "cpu" | "os" | "uuid" | "pci" | "pcie" | "cuda" | "nvml" | "sm" | "id"
            | "gemm" | "ecc" | "mig" | "bf16" | "tf32" | "blas" => w.to_ascii_uppercase(),
            "cublas" => "cuBLAS".to_string(),
            "cublaslt" => "cuBLASLt".to_string(),
            _ => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A fact's label from its path: the words of each part, the first capitalised.
fn label(path: &[String]) -> String {
    let mut s = path.join(", ");
    if let Some(c) = s.chars().next() {
        s.replace_range(..c.len_utf8(), &c.to_uppercase().to_string());
    }
    s
}

/// Units read from a key's suffix: what the value is shown as, and the key without it.
fn with_unit(key: &str, v: &Value) -> (String, Option<String>) {
    let n = v.as_f64();
    let strip = |suffix: &str| key.strip_suffix(suffix).map(str::to_string);
    if let (Some(k), Some(b)) = (strip("_bytes"), v.as_u64()) {
        return (k, Some(bytes(b)));
    }
    for (suffix, unit, scale) in [
        ("_mib", "MiB", 1.0),
        ("_gib", "GiB", 1.0),
        ("_seconds", "s", 1.0),
        ("_ms", "ms", 1.0),
        ("_mhz", "MHz", 1.0),
        ("_watts", "W", 1.0),
        ("_celsius", "°C", 1.0),
        ("_percent", "%", 1.0),
    ] {
        if let (Some(k), Some(x)) = (strip(suffix), n) {
            return (k, Some(format!("{} {unit}", tick(x * scale))));
        }
    }
    (key.to_string(), None)
}

fn flatten(v: &Value, path: &[String], out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let (k, shown) = with_unit(k, v);
                let mut p = path.to_vec();
                p.push(words(&k));
                match shown {
                    Some(s) => out.push((label(&p), s)),
                    None => flatten(v, &p, out),
                }
            }
        }
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            let items: Vec<String> = a.iter().map(scalar).collect();
            out.push((label(path), items.join(", ")));
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                let mut p = path.to_vec();
                p.push(format!("#{}", i + 1));
                flatten(v, &p, out);
            }
        }
        other => out.push((label(path), scalar(other))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        Value::Bool(true) => "yes".to_string(),
        Value::Bool(false) => "no".to_string(),
        other => other.to_string(),
    }
}

/// One card of labelled facts per run (a sweep shows its first point's).
fn environment_table(out: &mut String, inputs: &Inputs) {
    let mut columns: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for s in &inputs.sweeps {
        if let Some(doc) = &s.first {
            columns.push((
                format!("sweep {}", s.label),
                environment_rows(&doc.environment),
            ));
        }
    }
    for r in &inputs.runs {
        columns.push((r.label.clone(), environment_rows(&r.doc.environment)));
    }
    if columns.is_empty() {
        return;
    }
    out.push_str("<section id=\"environment\">\n<h2>Environment</h2>\n<p class=\"note\">What each run saw, as its document records it (a sweep shows its first point's).</p>\n<div class=\"grid\">\n");
    for (title, rows) in &columns {
        let _ = writeln!(
            out,
            "<article class=\"card environment\">\n<h3>{}</h3>\n<dl>",
            escape(title)
        );
        for (k, v) in rows {
            let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(v));
        }
        out.push_str("</dl>\n</article>\n");
    }
    out.push_str("</div>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(escape("plain µs"), "plain µs");
    }

    #[test]
    fn an_empty_page_is_still_a_whole_page_that_forbids_fetches() {
        let page = render(
            &Inputs::default(),
            &Meta {
                tool: "iteragpu <test>".into(),
                generated_utc: "now".into(),
            },
        )
        .unwrap();
        assert!(page.starts_with("<!DOCTYPE html>") && page.ends_with("</html>\n"));
        assert!(page.contains(CSP) && page.contains("iteragpu &lt;test&gt;"));
        assert!(!page.contains("<figure"));
    }

    #[test]
    fn a_failing_verdict_is_first_marked_and_before_the_page_line() {
        let verdict = |label: &str, standing, lines: Vec<(Standing, String)>| crate::Verdict {
            label: label.into(),
            standing,
            headline: format!("{label} says so"),
            lines,
        };
        let inputs = Inputs {
            verdicts: vec![
                verdict("yes", Standing::Ok, vec![]),
                verdict("tight", Standing::Warns, vec![]),
                verdict(
                    "no",
                    Standing::Fails,
                    vec![
                        (Standing::Warns, "not checked: x".into()),
                        (Standing::Fails, "FAIL y".into()),
                    ],
                ),
            ],
            ..Inputs::default()
        };
        let meta = Meta {
            tool: "t".into(),
            generated_utc: "now".into(),
        };
        let page = render(&inputs, &meta).unwrap();
        let at = |s: &str| page.find(s).unwrap_or_else(|| panic!("{s} not in {page}"));
        assert!(at("<h1>") < at("<section id=\"verdict\">"));
        assert!(at("<section id=\"verdict\">") < at("<p class=\"meta\">"));
        let no = at(
            "<article class=\"card verdict bad\" data-standing=\"bad\" data-ok=\"false\">\n<p class=\"headline bad\"><strong>no says so",
        );
        let tight = at("<p class=\"headline warn\"><strong>tight says so");
        let yes = at("<p class=\"headline ok\"><strong>yes says so");
        assert!(no < tight && tight < yes);
        // The failing line before the doubtful one, each in its class.
        assert!(at("<li class=\"bad\">FAIL y</li>") < at("<li class=\"warn\">not checked: x</li>"));
    }

    #[test]
    fn environment_facts_are_labelled_with_units() {
        let details = serde_json::json!({
            "host_memory": {"total_bytes": 85_520_809_984u64},
            "gpu": {"name": "NVIDIA H100", "clock_mhz": 1980, "ecc": true},
            "logical_cpus": 2,
        });
        let mut rows = Vec::new();
        flatten(&details, &[], &mut rows);
        let find = |k: &str| rows.iter().find(|(l, _)| l == k).map(|(_, v)| v.as_str());
        assert_eq!(find("Host memory, total"), Some("79.65 GiB"));
        assert_eq!(find("GPU, name"), Some("NVIDIA H100"));
        assert_eq!(find("GPU, clock"), Some("1980 MHz"));
        assert_eq!(find("GPU, ECC"), Some("yes"));
        assert_eq!(find("Logical CPUs"), Some("2"));
    }

    #[test]
    fn money_reads_cents_exactly() {
        assert_eq!(cents(164_600, "USD"), "USD 1646.00");
        assert_eq!(cents(5, "EUR"), "EUR 0.05");
        assert_eq!(
            decimal_cents(&Value::from("137.1667"), "USD", 6).as_deref(),
            Some("USD 1.371667")
        );
        assert_eq!(decimal_cents(&Value::Null, "USD", 6), None);
        let doc = serde_json::json!({"gpu": "h200", "days": 7, "lots": 2, "total_gpus": 16});
        assert_eq!(package(&doc), "h200: 7 days x 2 lots (16 GPUs)");
    }

    #[test]
    fn the_datasheet_line_sits_where_the_figure_would_be_100_percent() {
        let r = |value: f64, percent: f64| lab::probe::Reference {
            value,
            basis: String::new(),
            percent,
            threshold_percent: 70.0,
            below_threshold: percent < 70.0,
        };
        // A direct comparison: the line is the datasheet value.
        assert_eq!(line_at(31.5, Some(&r(63.0, 50.0))), Some(63.0));
        // A device copy: 1200 GB/s copied is 2400 GB/s of traffic, 50% of 4800: line at 2400.
        assert_eq!(line_at(1200.0, Some(&r(4800.0, 50.0))), Some(2400.0));
        assert_eq!(line_at(0.0, Some(&r(4800.0, 0.0))), Some(4800.0));
        assert_eq!(line_at(1.0, None), None);
    }
}
