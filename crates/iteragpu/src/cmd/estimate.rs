//! `iteragpu estimate`: the bytes the weights of a model occupy; with `--model`, the exact count
//! from the model's own files, and on request the KV cache and fine-tuning states.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use rent::estimate::{parse_bits, parse_reserve_gib};
use rent::memory::{MemoryEstimate, ModelFacts, memory};
use rent::units::parse_parameters;
use rust_decimal::Decimal;
use serde::Serialize;

use crate::memory::{MemoryArgs, load, memory_options};
use crate::output;

const EXAMPLES: &str = "\
Examples:
  iteragpu estimate --parameters 7000000000 --bits 16 --reserve-gib 4
  iteragpu estimate --parameters 70B --bits 4
  iteragpu estimate --parameters 1.5T --bits 8 --json
  iteragpu estimate --model data/models/llama-3.1-8b --context 8192 --batch 4
  iteragpu estimate --model path/to/model-folder   # reads safetensors headers only
  iteragpu estimate --model data/models/qwen2.5-7b --bits 4 --group-size 128
  iteragpu estimate --model data/models/gpt-oss-20b   # its MXFP4 layout, from config.json
  iteragpu estimate --model data/models/deepseek-v3 --context 32768   # latent KV cache
  iteragpu estimate --model data/models/llama-3.2-3b --training adam

Bytes per parameter are ceil(bits / 8): 4-bit weights count one whole byte each in weight bytes,
the headline, whose total is never below them. A width that packs below whole bytes gets a second
figure with its own total: ceil(parameters x bits / 8), or with --model the layout a quantised
checkpoint stores (linear layers packed; embeddings, lm_head, norms, biases and routers at 16
bits; scales and zero points per group, from the config or 128-column groups).
--model takes a model folder (config.json and/or *.safetensors, sharded or not) or a config.json:
with safetensors files the count and bytes are exact from their headers (the tensor data is never
read; a header whose tensors do not cover the data exactly, from byte 0 to its end with no gap
or overlap, as the format requires, is refused naming the tensors); with config.json alone the
count comes from the architecture's formula.
GiB = 2^30 bytes, GB = 10^9 bytes, both rounded half to even at 4 decimals.
Not included unless asked: activations, KV cache (--context), quantisation metadata
(--group-size), gradients and optimizer state (--training adam), runtime libraries and CUDA
context. An estimate is not a guarantee that a model fits: `iteragpu fit` checks the catalogue.";

/// Options of `estimate`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["parameters", "model"])))]
pub struct Args {
    /// Number of parameters: 7000000000, 7e9, 7_000_000_000, 7B, 70M, 1.5T or 1.5k. The value
    /// must be a whole number (1.5B is fine, 1.5 is not).
    #[arg(long, value_name = "N", value_parser = parse_parameters, allow_hyphen_values = true,
          requires = "bits")]
    pub parameters: Option<u64>,

    /// A model folder (config.json, *.safetensors, model.safetensors.index.json), a config.json,
    /// or a Hub id (org/name) already in the local Hugging Face cache (nothing is downloaded).
    #[arg(long, value_name = "PATH", conflicts_with = "parameters")]
    pub model: Option<PathBuf>,

    /// Storage width in bits per parameter, 1 to 64 (16 for float16/bfloat16, 8 for int8, 4 for
    /// int4), rounded up to whole bytes. With --model it defaults to the stored width.
    #[arg(long, value_name = "B", value_parser = parse_bits, allow_hyphen_values = true)]
    pub bits: Option<u32>,

    /// Memory to set aside on top of the weights, in GiB (a non-negative decimal, at most 4
    /// decimal places). It is your assumption, printed as such, never a measurement.
    #[arg(long, value_name = "R", value_parser = parse_reserve_gib, allow_hyphen_values = true)]
    pub reserve_gib: Option<Decimal>,

    #[command(flatten)]
    pub memory: MemoryArgs,

    /// Print one JSON document instead of text (decimals as strings).
    #[arg(long)]
    pub json: bool,
}

/// The JSON of `estimate --model`: the estimate's keys plus the model's.
#[derive(Debug, Serialize)]
pub struct ModelEstimate {
    /// The path as given.
    pub model: String,
    /// The architecture's class name, when config.json names one.
    pub architecture: Option<String>,
    /// `safetensors` or `config`.
    pub parameters_source: model::ParametersSource,
    /// Parameters per token (mixture of experts), else equal to parameters.
    pub active_parameters: u64,
    /// Stored bytes per safetensors dtype (empty from config.json alone).
    pub weight_bytes_by_dtype: BTreeMap<String, u64>,
    /// What the model's own structure does to the figures (experts held but not all run,
    /// sliding windows the KV figure does not exploit, a declared quantisation), in sentences:
    /// the text output prints them as assumptions, and a script must not lose them.
    pub model_notes: Vec<String>,
    /// The estimate.
    #[serde(flatten)]
    pub estimate: MemoryEstimate,
}

/// Runs `estimate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let reserve = args.reserve_gib.unwrap_or(Decimal::ZERO);
    let options = memory_options(args.bits, reserve, &args.memory);
    let usage = |err: rent::memory::MemoryError| crate::exit::usage(err.to_string());
    match &args.model {
        None => {
            let parameters = args.parameters.unwrap_or_default();
            let facts = ModelFacts {
                parameters,
                active_parameters: parameters,
                ..ModelFacts::default()
            };
            if args.memory.context.is_some() {
                return Err(usage(rent::memory::MemoryError::NoGeometry));
            }
            let e = memory(&facts, &options).map_err(usage)?;
            if args.json {
                output::print_json(&e)?;
            } else {
                output::print_text(&render(&e, args.reserve_gib.is_some(), None, &[]))?;
            }
        }
        Some(path) => {
            let loaded = load(path, args.memory.context)?;
            let e = memory(&loaded.facts, &options).map_err(usage)?;
            let doc = ModelEstimate {
                model: path.display().to_string(),
                architecture: loaded.model.architecture_name.clone(),
                parameters_source: loaded.model.source,
                active_parameters: loaded.model.active_parameters,
                weight_bytes_by_dtype: loaded.model.weight_bytes_by_dtype.clone(),
                model_notes: loaded.notes.clone(),
                estimate: e,
            };
            if args.json {
                output::print_json(&doc)?;
            } else {
                output::print_text(&render(
                    &doc.estimate,
                    args.reserve_gib.is_some(),
                    Some(&doc),
                    &loaded.notes,
                ))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The human report: the headline (whole bytes per parameter) and its total, then the packed
/// figure with its own total; every total says what it adds.
fn render(
    e: &MemoryEstimate,
    reserve_given: bool,
    model: Option<&ModelEstimate>,
    notes: &[String],
) -> String {
    let b = &e.base;
    let mut s = String::new();
    let model_lines = model.is_some()
        || e.kv_cache_bytes.is_some()
        || e.training.is_some()
        || e.quantisation_metadata_bytes.is_some();
    if model_lines {
        let _ = writeln!(s, "Memory estimate");
    } else {
        let _ = writeln!(s, "Weight estimate (the weights only)");
    }
    if let Some(m) = model {
        let _ = writeln!(s, "  model               {}", m.model);
        let _ = writeln!(
            s,
            "  architecture        {}",
            m.architecture
                .as_deref()
                .unwrap_or("not named by a config.json")
        );
        let _ = writeln!(
            s,
            "  parameters from     {}",
            match m.parameters_source {
                model::ParametersSource::Safetensors => "the safetensors headers (exact)",
                model::ParametersSource::Config => "config.json and the architecture's formula",
            }
        );
    }
    let _ = writeln!(s, "  parameters          {}", b.parameters);
    if let Some(m) = model
        && m.active_parameters != b.parameters
    {
        let _ = writeln!(s, "  active per token    {}", m.active_parameters);
    }
    if let Some(m) = model {
        for (dtype, bytes) in &m.weight_bytes_by_dtype {
            let _ = writeln!(s, "  stored {dtype:<12} {bytes} bytes");
        }
    }
    let _ = writeln!(
        s,
        "  bits per parameter  {} -> {} byte{} per parameter (ceil({} / 8))",
        b.bits,
        b.bytes_per_parameter,
        if b.bytes_per_parameter == 1 { "" } else { "s" },
        b.bits
    );
    let _ = writeln!(s, "  weight bytes        {}", b.weight_bytes);
    let _ = writeln!(s, "  weight GiB (2^30)   {}", b.weight_gib);
    let _ = writeln!(s, "  weight GB (10^9)    {}", b.weight_gb);
    if let (Some(q), Some(m)) = (e.quantisation_metadata_bytes, &e.quantisation_metadata) {
        let _ = writeln!(
            s,
            "  scales and zeros    {q} bytes ({} groups: {}-bit scale{})",
            m.groups,
            m.scale_bits,
            if m.zero_point_bits > 0 {
                format!(", {}-bit zero point", m.zero_point_bits)
            } else {
                ", no zero point".to_string()
            }
        );
    }
    if let (Some(per), Some(bits)) = (e.kv_cache_bytes_per_token, e.kv_bits) {
        let _ = writeln!(
            s,
            "  KV cache per token  {per} bytes ({bits}-bit keys and values)"
        );
    }
    if let (Some(kv), Some(c)) = (e.kv_cache_bytes, e.context) {
        let windowed = e
            .kv_cache_layers
            .as_ref()
            .is_some_and(|l| l.iter().any(|l| l.cached_tokens < c));
        let _ = writeln!(
            s,
            "  KV cache            {kv} bytes ({c} tokens x {} sequence{}{})",
            e.batch,
            if e.batch == 1 { "" } else { "s" },
            if windowed {
                "; windowed layers hold fewer"
            } else {
                ""
            }
        );
    }
    if let Some(t) = &e.training {
        let _ = writeln!(s, "  training: adam, mixed precision");
        let _ = writeln!(s, "    weights              {}", t.weights_bytes);
        let _ = writeln!(s, "    gradients            {}", t.gradients_bytes);
        let _ = writeln!(s, "    float32 master copy  {}", t.master_weights_bytes);
        let _ = writeln!(s, "    Adam first moment    {}", t.adam_first_moment_bytes);
        let _ = writeln!(s, "    Adam second moment   {}", t.adam_second_moment_bytes);
    }
    let adds = |items: &[rent::memory::Item]| -> String {
        items
            .iter()
            .filter(|i| i.item != "reserve")
            .map(|i| short(i.item))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    if model_lines {
        let _ = writeln!(
            s,
            "  model bytes         {} ({})",
            e.model_bytes,
            adds(&e.total_breakdown)
        );
    }
    let what = if model_lines { "model" } else { "weights" };
    total_lines(
        &mut s,
        reserve_given,
        b.reserve_gib,
        b.total_gib,
        model_lines.then_some(e.model_gib),
        what,
    );
    if let (Some(p), Some(gib)) = (e.packed_weight_bytes, e.packed_weight_gib) {
        let _ = writeln!(s);
        match &e.packed_layout {
            Some(l) => {
                let _ = writeln!(
                    s,
                    "Packed {}-bit weights, a second figure (as a quantised checkpoint stores them)",
                    b.bits
                );
                let _ = writeln!(
                    s,
                    "  packed              {} parameters at {} bits: {} bytes",
                    l.quantised_parameters, b.bits, l.quantised_bytes
                );
                let kept: u128 = l.kept.iter().map(|k| u128::from(k.parameters)).sum();
                let _ = writeln!(
                    s,
                    "  kept at {} bits     {kept} parameters: {} bytes ({})",
                    l.kept_bits,
                    l.kept_bytes,
                    l.kept
                        .iter()
                        .map(|k| format!("{} {}", k.what, k.parameters))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "Packed {}-bit storage, a second figure (ceil(parameters x {} / 8) bytes{})",
                    b.bits,
                    b.bits,
                    if e.quantisation_metadata_bytes.is_some() {
                        ""
                    } else {
                        "; no scales or zero points"
                    }
                );
            }
        }
        let _ = writeln!(s, "  packed weight bytes {p}");
        let _ = writeln!(s, "  packed weight GiB   {gib}");
        if let (true, Some(pm), Some(items)) = (
            model_lines,
            e.packed_model_bytes,
            e.packed_total_breakdown.as_ref(),
        ) {
            let _ = writeln!(s, "  packed model bytes  {pm} ({})", adds(items));
        }
        if let Some(total) = e.packed_total_gib {
            let what = if model_lines {
                "packed model"
            } else {
                "packed weights"
            };
            let model_gib = if model_lines {
                e.packed_model_gib
            } else {
                None
            };
            let _ = write!(s, "  packed total        ");
            total_value(&mut s, reserve_given, b.reserve_gib, total, model_gib, what);
        }
    }
    let _ = writeln!(s);
    for line in e.assumptions.iter().chain(notes) {
        let _ = writeln!(s, "Assumed: {line}.");
    }
    let _ = writeln!(s, "Not included: {}.", b.excluded.join(", "));
    let _ = writeln!(
        s,
        "This is arithmetic on the {}, not a guarantee that a model fits on a GPU{}.",
        if model_lines { "model" } else { "weights" },
        if model_lines {
            " (`iteragpu fit` checks the catalogue)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "GiB and GB are rounded half to even at 4 decimals; bytes are exact."
    );
    s
}

/// A total line's item, in a few words.
fn short(item: &str) -> &str {
    match item {
        "quantisation metadata (scales, zero points)" => "scales and zeros",
        "training states (gradients, float32 master copy, Adam moments)" => "training states",
        other => other,
    }
}

/// The reserve line and the headline total.
fn total_lines(
    s: &mut String,
    reserve_given: bool,
    reserve: Decimal,
    total: Decimal,
    model_gib: Option<Decimal>,
    what: &str,
) {
    if reserve_given {
        let _ = writeln!(
            s,
            "  reserve (assumed)   {reserve} GiB (your assumption, not measured)"
        );
    } else {
        let _ = writeln!(s, "  reserve (assumed)   none (--reserve-gib R adds one)");
    }
    let _ = write!(s, "  total               ");
    total_value(s, reserve_given, reserve, total, model_gib, what);
}

/// `X GiB (what + reserve)`, with the model's GiB when it is not printed above.
fn total_value(
    s: &mut String,
    reserve_given: bool,
    reserve: Decimal,
    total: Decimal,
    model_gib: Option<Decimal>,
    what: &str,
) {
    let _ = match (reserve_given, model_gib) {
        (true, Some(m)) => writeln!(s, "{total} GiB ({what} {m} GiB + reserve {reserve} GiB)"),
        (true, None) => writeln!(s, "{total} GiB ({what} + reserve)"),
        (false, _) => writeln!(s, "{total} GiB ({what} only)"),
    };
}
