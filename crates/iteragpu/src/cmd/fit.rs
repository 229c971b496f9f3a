//! `iteragpu fit`: every catalogue package that holds a model, cheapest first.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use rent::catalogue::Catalogue;
use rent::estimate::{parse_bits, parse_reserve_gib};
use rent::fit::{DEFAULT_RESERVE_GIB, FitInputs, FitOption, MAX_GPUS, fit};
use rent::memory::{MemoryEstimate, ModelFacts, memory};
use rent::price::{cents_to_amount, decimal_cents_to_amount, parse_days};
use rent::units::parse_parameters;
use rust_decimal::Decimal;
use serde::Serialize;

use crate::cmd::estimate::{MemoryArgs, load, memory_options};
use crate::output;

const EXAMPLES: &str = "\
Examples:
  iteragpu fit --model data/models/llama-3.1-8b --context 8192
  iteragpu fit --model data/models/mixtral-8x7b-v0.1 --context 32768 --batch 8 --days 7
  iteragpu fit --parameters 70B --bits 16 --max-gpus 8 --json
  iteragpu fit --model path/to/model-folder --bits 4 --group-size 128 --reserve-gib 4

For every GPU of the catalogue and every number of lots up to --max-gpus GPUs, the model's
memory (weights, KV cache with --context, training states with --training adam) is split evenly
over all the package's GPUs (tensor parallel), the per-GPU reserve is added, and the sum is
compared with the memory a CUDA/ROCm process sees on that GPU (the catalogue's usable MiB).
Packages that fit come first, cheapest first; then the rest. Prices marked EXAMPLE are not
quotes. A GPU count that does not divide the attention or KV heads is marked: engines refuse it
or replicate the KV heads.";

/// Options of `fit`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["parameters", "model"])))]
pub struct Args {
    /// A model folder (config.json, *.safetensors, model.safetensors.index.json) or a config.json.
    #[arg(long, value_name = "PATH", conflicts_with = "parameters")]
    pub model: Option<PathBuf>,

    /// A parameter count instead of a model (7B, 70e9, ...); needs --bits.
    #[arg(long, value_name = "N", value_parser = parse_parameters, allow_hyphen_values = true,
          requires = "bits")]
    pub parameters: Option<u64>,

    /// Storage width in bits per parameter (default with --model: the stored width).
    #[arg(long, value_name = "B", value_parser = parse_bits, allow_hyphen_values = true)]
    pub bits: Option<u32>,

    #[command(flatten)]
    pub memory: MemoryArgs,

    /// One package duration (3, 7 or 30 days); without it all three.
    #[arg(long, value_name = "D", value_parser = parse_days, allow_hyphen_values = true)]
    pub days: Option<u32>,

    /// Packages of up to this many GPUs (lots x GPUs per lot).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = parse_max_gpus)]
    pub max_gpus: u32,

    /// Memory set aside on every GPU for the CUDA context, library workspaces and activations,
    /// in GiB (default 2; your assumption, printed as such).
    #[arg(long, value_name = "R", value_parser = parse_reserve_gib, allow_hyphen_values = true)]
    pub reserve_gib: Option<Decimal>,

    /// A tariff CSV to use instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,

    /// A SkyPilot catalogue CSV (vms.csv of skypilot-org/skypilot-catalog): its hourly on-demand
    /// and spot offers, priced for the package durations, after the packages.
    #[arg(long, value_name = "FILE")]
    pub offers: Option<PathBuf>,

    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_max_gpus(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(v) if (1..=MAX_GPUS).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{text}` is not accepted; expected a whole number of GPUs from 1 to {MAX_GPUS}"
        )),
    }
}

/// What `fit` assumed, in the JSON and under the table.
#[derive(Debug, Serialize)]
struct Assumptions {
    reserve_gib_per_gpu: Decimal,
    reserve_given: bool,
    split: &'static str,
    usable_memory: &'static str,
    model_bytes: u128,
    context: Option<u64>,
    batch: u64,
    max_gpus: u32,
    days: Option<u32>,
    notes: Vec<String>,
}

/// The JSON document.
#[derive(Debug, Serialize)]
struct Document {
    model: String,
    architecture: Option<String>,
    parameters: u64,
    active_parameters: u64,
    parameters_source: Option<model::ParametersSource>,
    assumptions: Assumptions,
    estimate: MemoryEstimate,
    catalogue: String,
    options: Vec<FitOption>,
}

/// Runs `fit`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalogue = match &args.catalogue {
        Some(path) => Catalogue::from_path(path)?,
        None => Catalogue::embedded(),
    };
    let reserve_given = args.reserve_gib.is_some();
    let reserve = args
        .reserve_gib
        .unwrap_or_else(|| Decimal::from(DEFAULT_RESERVE_GIB));
    // The reserve is per GPU here, not part of the model's bytes.
    let options = memory_options(args.bits, Decimal::ZERO, &args.memory);
    let usage = |err: rent::memory::MemoryError| crate::exit::usage(err.to_string());
    let (label, loaded) = match (&args.model, args.parameters) {
        (Some(path), _) => (
            path.display().to_string(),
            Some(load(path, args.memory.context)?),
        ),
        (None, Some(n)) => (
            format!("{n} parameters at {} bits", args.bits.unwrap_or(16)),
            None,
        ),
        (None, None) => {
            return Err(crate::exit::usage("--model or --parameters is required"));
        }
    };
    let facts = match &loaded {
        Some(l) => l.facts.clone(),
        None => {
            let n = args.parameters.unwrap_or_default();
            ModelFacts {
                parameters: n,
                active_parameters: n,
                ..ModelFacts::default()
            }
        }
    };
    let estimate = memory(&facts, &options).map_err(usage)?;
    let heads = loaded.as_ref().and_then(|l| {
        l.model
            .architecture
            .as_ref()
            .map(|a| (a.attention.heads, a.attention.kv_heads))
    });
    let reserve_bytes = {
        // At most 4 decimal places: mantissa x 2^30 / 10^scale, rounded up to a whole byte.
        let scale = 10u128.pow(reserve.scale());
        (reserve.mantissa().unsigned_abs() << 30).div_ceil(scale)
    };
    let inputs = FitInputs {
        model_bytes: estimate.total_bytes,
        reserve_bytes,
        max_gpus: args.max_gpus,
        days: args.days,
        heads,
    };
    let rows = fit(&catalogue, &inputs);
    let mut notes: Vec<String> = estimate.assumptions.clone();
    if let Some(l) = &loaded {
        notes.extend(l.notes.iter().cloned());
    }
    let assumptions = Assumptions {
        reserve_gib_per_gpu: reserve,
        reserve_given,
        split: "weights, KV cache and training states divided evenly over all GPUs of the package (tensor parallel); small replicated tensors such as norms are not counted twice",
        usable_memory: "the catalogue's usable_memory_mib: the total memory a CUDA/ROCm process sees on one GPU, before anything is allocated",
        model_bytes: estimate.total_bytes,
        context: args.memory.context,
        batch: args.memory.batch,
        max_gpus: args.max_gpus,
        days: args.days,
        notes,
    };
    let doc = Document {
        model: label,
        architecture: loaded
            .as_ref()
            .and_then(|l| l.model.architecture_name.clone()),
        parameters: facts.parameters,
        active_parameters: facts.active_parameters,
        parameters_source: loaded.as_ref().map(|l| l.model.source),
        assumptions,
        estimate,
        catalogue: catalogue.name().to_string(),
        options: rows,
    };
    let offers = crate::cmd::offers::section(args.offers.as_deref(), args.days, &doc.options)?;
    if args.json {
        output::print_json(&crate::cmd::offers::WithOffers {
            document: &doc,
            offers: offers.as_ref(),
        })?;
    } else {
        output::print_text(&(render(&doc) + &crate::cmd::offers::render(offers.as_ref())))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn gib(bytes: u128) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 30))
}

fn render(d: &Document) -> String {
    let mut s = String::new();
    let a = &d.assumptions;
    let _ = writeln!(s, "Will it fit? {}", d.model);
    if let Some(arch) = &d.architecture {
        let _ = writeln!(s, "  architecture   {arch}");
    }
    let _ = writeln!(
        s,
        "  parameters     {}{}",
        d.parameters,
        if d.active_parameters == d.parameters {
            String::new()
        } else {
            format!(" ({} active per token)", d.active_parameters)
        }
    );
    let e = &d.estimate;
    let _ = writeln!(
        s,
        "  model memory   {} bytes ({} GiB: weights {}{}{})",
        e.total_bytes,
        gib(e.total_bytes),
        e.packed_weight_bytes.unwrap_or(e.base.weight_bytes),
        e.kv_cache_bytes
            .map(|kv| format!(" + KV cache {kv}"))
            .unwrap_or_default(),
        e.training
            .as_ref()
            .map(|t| format!(" + training states {}", t.total_bytes - t.weights_bytes))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "  reserve        {} GiB per GPU ({})",
        a.reserve_gib_per_gpu,
        if a.reserve_given {
            "your --reserve-gib"
        } else {
            "default assumption; --reserve-gib changes it"
        }
    );
    let _ = writeln!(s);
    let head = [
        "gpu",
        "GPUs",
        "lots",
        "days",
        "need/GPU GiB",
        "usable GiB",
        "fits",
        "headroom GiB",
        "price",
        "per GPU-day",
        "",
    ];
    let mut cells: Vec<[String; 11]> = Vec::new();
    for o in &d.options {
        let example = if o.example { "*" } else { "" };
        cells.push([
            o.gpu.clone(),
            o.total_gpus.to_string(),
            o.lots.to_string(),
            o.days.to_string(),
            gib(o.per_gpu_bytes),
            gib(o.usable_bytes_per_gpu),
            match (o.fits, o.heads_divisible) {
                (true, Some(false)) => "yes!".to_string(),
                (true, _) => "yes".to_string(),
                (false, _) => "no".to_string(),
            },
            format!("{:.1}", o.headroom_bytes as f64 / f64::from(1u32 << 30)),
            format!(
                "{} {}{example}",
                o.currency,
                cents_to_amount(o.total_price_cents)
            ),
            format!(
                "{}{example}",
                decimal_cents_to_amount(o.price_per_gpu_day_cents).round_dp(2)
            ),
            if o.example {
                "EXAMPLE".to_string()
            } else {
                String::new()
            },
        ]);
    }
    let mut widths = head.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |fields: &[String]| {
        let mut out = String::new();
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            if i == 0 || i == 10 {
                let _ = write!(out, "{f:<w$}", w = widths[i]);
            } else {
                let _ = write!(out, "{f:>w$}", w = widths[i]);
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    s.push_str(&line(&head.map(str::to_string)));
    for row in &cells {
        s.push_str(&line(row));
    }
    let fitting = d.options.iter().filter(|o| o.fits).count();
    let _ = writeln!(s);
    match d.options.iter().find(|o| o.fits) {
        Some(best) => {
            let _ = writeln!(
                s,
                "{fitting} of {} packages fit. Cheapest: {} x {} ({} GPU{}), {} days, {} {}{}.",
                d.options.len(),
                best.lots,
                best.gpu,
                best.total_gpus,
                if best.total_gpus == 1 { "" } else { "s" },
                best.days,
                best.currency,
                cents_to_amount(best.total_price_cents),
                if best.example { " (EXAMPLE price)" } else { "" }
            );
        }
        None => {
            let _ = writeln!(
                s,
                "None of the {} packages up to {} GPUs fits: raise --max-gpus, lower --bits or --context.",
                d.options.len(),
                a.max_gpus
            );
        }
    }
    let _ = writeln!(s, "Assumed: {}.", a.split);
    let _ = writeln!(s, "Assumed: usable memory is {}.", a.usable_memory);
    for n in &a.notes {
        let _ = writeln!(s, "Assumed: {n}.");
    }
    if d.options
        .iter()
        .any(|o| o.heads_divisible == Some(false) && o.fits)
    {
        let _ = writeln!(
            s,
            "yes! = fits, but the GPU count does not divide the attention or KV heads: engines refuse it or replicate KV heads."
        );
    }
    if d.options.iter().any(|o| o.example) {
        let _ = writeln!(
            s,
            "* EXAMPLE prices, not real quotes: the catalogue rows say so in their source."
        );
    }
    let _ = writeln!(
        s,
        "Not included: {}. A package price is not availability: check the provider's offer.",
        e.base.excluded.join(", ")
    );
    s
}
