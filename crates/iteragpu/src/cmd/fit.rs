//! `iteragpu fit`: every catalogue package that holds a model under a layout an engine runs,
//! cheapest first, with the largest context and batch per GPU and the speed ceilings.

mod offers;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lab::probe::{CopyKind, FigureStatus, PROBE_SCHEMA, ProbeDocument};
use lab_io::bytes::gib;
use rent::capacity::{ContextLimit, Embedding, Geometry, Workload};
use rent::catalogue::{Catalogue, nearest};
use rent::ceiling::{self, GpuSpeed};
use rent::datasheet::{Datasheet, GemmKind};
use rent::engine::{Budget, EngineOptions, Serve, Shape};
use rent::estimate::{parse_bits, parse_reserve_gib};
use rent::fit::{
    DEFAULT_RESERVE_GIB, DEFAULT_TIGHT_GIB, EnginePlan, FitInputs, FitOption, MAX_GPUS, Plan,
    Selection, Sort, fit_with, select,
};
use rent::layout::{Heads, RULE};
use rent::memory::{MemoryEstimate, ModelFacts, memory};
use rent::price::{cents_to_amount, decimal_cents_to_amount, parse_days};
use rent::units::parse_parameters;
use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::Value;

use crate::memory::{MemoryArgs, load, memory_options};
use crate::output;

const EXAMPLES: &str = "\
Examples:
  iteragpu fit --model data/models/llama-3.1-8b --context 8192
  iteragpu fit --model data/models/llama-3.1-8b --context 16384 --gpu-memory-utilization 0.95 \\
      --max-num-seqs 256
  iteragpu fit --model data/models/qwen3-8b --context 32768 --serve sglang --kv-cache-dtype fp8
  iteragpu fit --model data/models/llama-3.1-8b --context 8192 --serve none --reserve-gib 2
  iteragpu fit --model data/models/mixtral-8x7b-v0.1 --context 32768 --batch 8 --days 7
  iteragpu fit --model data/models/llama-3.1-8b --context 8192 --fits-only --limit 5
  iteragpu fit --model data/models/llama-3.1-8b --gpu h100-sxm,l40s --sort price-per-mtok
  iteragpu fit --model data/models/llama-3.1-8b --context 8192 --probe probe.json
  iteragpu fit --parameters 70B --bits 16 --max-gpus 8 --json
  iteragpu fit --model path/to/model-folder --bits 4 --group-size 128 --serve none --reserve-gib 4

Every GPU is budgeted as the serving engine budgets it at start-up (--serve vllm, the default;
sglang; or none, the raw figure): vLLM uses total x --gpu-memory-utilization (0.9), minus the
weights, minus the activation peak of its profiling pass over --max-num-batched-tokens tokens
and --max-num-seqs rows of logits, minus memory outside PyTorch; the rest is its KV cache, in
16-token blocks; CUDA graphs (none with --enforce-eager) must fit in what it leaves above the
budget. SGLang's weights and KV pool take total x --mem-fraction-static. Each term is printed
for the cheapest package, and every row's terms are in --json; the activation, non-torch and
graph terms are estimates with their range. A row is tight when its KV pool has under
--tight-share of the card to spare or an estimate's high end would tip it over.

For every GPU of the catalogue and every number of lots up to --max-gpus GPUs, the model is
placed as an engine runs it: tensor parallel over a degree that divides the attention heads and
divides (or is a multiple of) the KV heads, vLLM's rule, and pipeline stages splitting the layers
when the GPU count allows no such degree alone. The busiest GPU's need (its weights, its KV cache
with --context, training states with --training adam, and the per-GPU reserve) is compared with
the memory a CUDA/ROCm process sees on that GPU (the catalogue's usable MiB); headroom under
--tight-gib is marked tight. Each row gives the largest context (at --batch) and the largest
batch (at --context) that fit, solved from the bytes and capped by max_position_embeddings, and
decode and prefill ceilings from the datasheet or a --probe document: roofline bounds, never
predictions. Packages that fit come first, cheapest first; the text shows the first 10 rows
(--all shows every row). Prices marked EXAMPLE are not quotes; ROCm marks an AMD GPU, which
iteragpu's native engine (CUDA only) cannot measure: measure --engine torch can, through PyTorch
for ROCm.";

/// Why the decode ceiling is not a bound under speculative decoding.
const SPECULATIVE: &str = "the decode ceilings assume one token per sequence per step; with \
     speculative decoding (a draft model, n-gram or EAGLE/MTP heads) a step can accept several \
     tokens for one read of the weights, so measured tokens/s may exceed them";

/// The rows the text shows without --limit or --all.
const DEFAULT_TEXT_ROWS: usize = 10;

/// The largest probe document read (the probe's own documents take a few hundred KB).
const MAX_PROBE_BYTES: u64 = 64 * 1024 * 1024;

/// Options of `fit`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["parameters", "model"])))]
pub struct Args {
    /// A model folder (config.json, *.safetensors, model.safetensors.index.json), a config.json,
    /// or a Hub id (org/name) already in the local Hugging Face cache (HF_HUB_CACHE, HF_HOME/hub
    /// or ~/.cache/huggingface/hub; nothing is downloaded).
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

    /// A fitting package with less headroom per GPU than this, in GiB, is marked tight
    /// (default 1).
    #[arg(long, value_name = "T", value_parser = parse_reserve_gib, allow_hyphen_values = true)]
    pub tight_gib: Option<Decimal>,

    /// The serving engine whose start-up budget decides: vllm, sglang, or none (the usable
    /// memory minus --reserve-gib, no engine).
    /// (Default vllm with --model; none with --parameters, which gives no shape to budget.)
    #[arg(long, value_name = "ENGINE", value_parser = Serve::NAMES)]
    pub serve: Option<String>,

    /// vLLM's --gpu-memory-utilization: the share of the GPU it budgets (default 0.9).
    #[arg(long, value_name = "U", value_parser = parse_fraction)]
    pub gpu_memory_utilization: Option<Decimal>,

    /// vLLM's --max-num-batched-tokens: the tokens of its profiling pass (default 8192 on a GPU
    /// of 70 GiB or more other than an A100, else 2048, as `vllm serve`).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub max_num_batched_tokens: Option<u64>,

    /// vLLM's --max-num-seqs: sequences at once, the rows of its profiling sampler run
    /// (default 1024 on such a GPU, else 256).
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub max_num_seqs: Option<u64>,

    /// vLLM's --enforce-eager: no CUDA graphs.
    #[arg(long)]
    pub enforce_eager: bool,

    /// SGLang's --mem-fraction-static: the share weights and KV pool take (default by
    /// tensor-parallel degree, 0.88 at one GPU).
    #[arg(long, value_name = "F", value_parser = parse_fraction)]
    pub mem_fraction_static: Option<Decimal>,

    /// The engine's --kv-cache-dtype: auto (the served dtype), fp8 (fp8_e4m3, fp8_e5m2),
    /// bfloat16, float16.
    #[arg(long, value_name = "DTYPE", conflicts_with = "kv_bits",
          value_parser = ["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16", "half"])]
    pub kv_cache_dtype: Option<String>,

    /// A fitting row whose KV pool has less than this share of the card to spare is tight
    /// (default 0.05; with --serve none, --tight-gib decides).
    #[arg(long, value_name = "S", value_parser = parse_fraction)]
    pub tight_share: Option<Decimal>,

    /// Only the packages that fit.
    #[arg(long)]
    pub fits_only: bool,

    /// At most N rows (the text shows 10 without it).
    #[arg(long, value_name = "N", value_parser = parse_limit, conflicts_with = "all")]
    pub limit: Option<usize>,

    /// Every row in the text (the JSON has every row unless --limit).
    #[arg(long)]
    pub all: bool,

    /// Only these GPUs: catalogue slugs, comma-separated (h100-sxm,l40s).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub gpu: Option<Vec<String>>,

    /// The order after the fitting rows come first: price (the package), price-per-mtok (per
    /// million decoded tokens at the decode ceiling) or headroom (largest first).
    #[arg(long, value_name = "KEY", default_value = "price", value_parser = Sort::NAMES)]
    pub sort: String,

    /// A probe document (`iteragpu probe --output FILE`) of the GPU model to price: its measured
    /// device-to-device copy bandwidth and products replace the datasheet's for that model's
    /// rows (a probe of the CPU reference device is refused).
    #[arg(long, value_name = "FILE")]
    pub probe: Option<PathBuf>,

    /// A datasheet table instead of the bundled one (data/gpu-datasheet.csv's columns).
    #[arg(long, value_name = "FILE")]
    pub datasheet: Option<PathBuf>,

    /// A tariff CSV to use instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    pub catalogue: Option<PathBuf>,

    /// A SkyPilot catalogue CSV (vms.csv of skypilot-org/skypilot-catalog): its hourly on-demand
    /// and spot offers, priced for the package durations, after the packages. --limit caps the
    /// offers of each duration too (the text lists 10 without it, --all every one; the JSON every
    /// one unless --limit). Read row by row: a file of at most 64 MiB with at most 20,000
    /// instance types.
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

fn parse_fraction(text: &str) -> Result<Decimal, String> {
    match text.trim().parse::<Decimal>() {
        Ok(v) if v > Decimal::ZERO && v <= Decimal::ONE && v.scale() <= 4 => Ok(v),
        _ => Err(format!(
            "`{text}` is not accepted; expected a share above 0 and at most 1, with at most 4 \
             decimals (0.9)"
        )),
    }
}

fn parse_count(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(v) if v > 0 && v <= 1 << 24 && text.trim().bytes().all(|b| b.is_ascii_digit()) => Ok(v),
        _ => Err(format!(
            "`{text}` is not accepted; expected a whole number from 1 to 16777216"
        )),
    }
}

fn parse_limit(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(v) if v > 0 && text.trim().bytes().all(|b| b.is_ascii_digit()) => Ok(v),
        _ => Err(format!(
            "`{text}` is not accepted; expected a positive whole number of rows"
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
    layout_rule: &'static str,
    tight_headroom_gib: Decimal,
    kv_cache_per_gpu: String,
    max_position_embeddings: Option<u64>,
    ceilings: String,
    serve: Serve,
    engine: Option<EngineUsed>,
    speculative_decoding: &'static str,
}

/// The engine options as used.
#[derive(Debug, Serialize)]
struct EngineUsed {
    gpu_memory_utilization: Option<Decimal>,
    max_num_batched_tokens: Option<u64>,
    max_num_seqs: Option<u64>,
    enforce_eager: bool,
    mem_fraction_static: Option<Decimal>,
    kv_cache_dtype: String,
    served_dtype: String,
    tight_share: Decimal,
    rule: &'static str,
}

/// Which rows the document holds.
#[derive(Debug, Serialize)]
struct Shown {
    fits_only: bool,
    gpu: Option<Vec<String>>,
    sort: Sort,
    limit: Option<usize>,
    rows_total: usize,
    rows_fitting: usize,
    rows_shown: usize,
}

/// The probe document's figures, as used.
#[derive(Debug, Clone, Serialize)]
struct ProbeUsed {
    file: String,
    gpu: String,
    model: String,
    devices: Vec<String>,
    memory_bandwidth_gb_s: f64,
    memory_bandwidth_rule: &'static str,
    dense_tflops: BTreeMap<String, f64>,
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
    datasheet: String,
    probe: Option<ProbeUsed>,
    selection: Shown,
    options: Vec<FitOption>,
}

/// What config.json says beyond what the estimate reads: the embedding's size, whether the
/// output head is tied to it, the longest context.
#[derive(Debug, Default)]
struct ConfigExtras {
    embedding: Option<Embedding>,
    max_positions: Option<u64>,
    notes: Vec<String>,
    intermediate: u64,
    expert_intermediate: Option<u64>,
    shared_intermediate: u64,
}

fn config_extras(path: &Path) -> ConfigExtras {
    let mut out = ConfigExtras::default();
    let config = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    let Ok(bytes) = lab_io::files::read_bounded(&config, model::MAX_CONFIG_BYTES, "a config.json")
    else {
        return out;
    };
    let Ok(Value::Object(root)) = serde_json::from_slice::<Value>(&bytes) else {
        return out;
    };
    let text = root.get("text_config").and_then(Value::as_object);
    let field = |key: &str| text.and_then(|t| t.get(key)).or_else(|| root.get(key));
    let positive = |key: &str| field(key).and_then(Value::as_u64).filter(|v| *v > 0);
    match field("max_position_embeddings") {
        None | Some(Value::Null) => out.notes.push(
            "config.json gives no max_position_embeddings: the largest context is not capped"
                .to_string(),
        ),
        Some(v) => match v.as_u64().filter(|n| *n > 0) {
            Some(n) => out.max_positions = Some(n),
            None => out.notes.push(format!(
                "config.json's max_position_embeddings is `{v}`, not a positive whole number: \
                 the largest context is not capped"
            )),
        },
    }
    out.intermediate = positive("intermediate_size").unwrap_or(0);
    out.expert_intermediate = positive("moe_intermediate_size");
    out.shared_intermediate = positive("shared_expert_intermediate_size")
        .or_else(|| {
            positive("n_shared_experts")
                .zip(positive("moe_intermediate_size"))
                .map(|(n, w)| n * w)
        })
        .unwrap_or(0);
    match (positive("vocab_size"), positive("hidden_size")) {
        (Some(vocab), Some(hidden)) => {
            let tied = match field("tie_word_embeddings") {
                Some(Value::Bool(b)) => *b,
                _ => true,
            };
            out.embedding = Some(Embedding {
                vocab,
                hidden,
                tied,
            });
        }
        _ => out.notes.push(
            "config.json does not give vocab_size and hidden_size: the embedding and output \
             head are counted with the layers, spread over the pipeline stages"
                .to_string(),
        ),
    }
    out
}

/// Reads `--probe FILE`: the slowest measured figure over its GPUs, which must all be one model.
fn read_probe(path: &Path, datasheet: &Datasheet) -> anyhow::Result<ProbeUsed> {
    let file = path.display().to_string();
    let bytes = lab_io::files::read_bounded(path, MAX_PROBE_BYTES, "a probe document")?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| anyhow::anyhow!("--probe {file} is not JSON: {e}"))?;
    match value.get("schema").and_then(Value::as_str) {
        Some(PROBE_SCHEMA) => {}
        Some(other) => anyhow::bail!(
            "--probe {file} has the schema {other:?}; expected a probe document ({PROBE_SCHEMA})"
        ),
        None => anyhow::bail!("--probe {file} has no schema; expected a probe document"),
    }
    if value.get("reference_device").and_then(Value::as_bool) == Some(true) {
        return Err(crate::exit::usage(format!(
            "--probe {file} is a probe of the CPU reference device (reference_device: true): \
             its copy is host memory, not a GPU figure; pass a probe document of a GPU of the \
             package (iteragpu probe --device cuda:0 --output FILE)"
        )));
    }
    let doc: ProbeDocument = serde_json::from_value(value).map_err(|e| {
        anyhow::anyhow!("--probe {file} is a probe document that does not read: {e}")
    })?;
    let mut gpu: Option<(String, String)> = None;
    let mut devices = Vec::new();
    let mut copy: Option<f64> = None;
    let mut tflops: BTreeMap<String, f64> = BTreeMap::new();
    for d in &doc.devices {
        let row = d
            .datasheet
            .as_ref()
            .map(|r| (r.gpu.clone(), r.model.clone()))
            .or_else(|| {
                let name = d.facts.as_ref()?.name.clone();
                datasheet
                    .for_cuda_name(&name)
                    .map(|r| (r.gpu.clone(), r.model.clone()))
            });
        let Some(row) = row else {
            anyhow::bail!(
                "--probe {file}: {} names no GPU model of the datasheet table; its figures \
                 cannot be matched to a package",
                d.device
            );
        };
        match &gpu {
            Some(g) if g.0 != row.0 => anyhow::bail!(
                "--probe {file} holds a {} and a {}; expected GPUs of one model",
                g.1,
                row.1
            ),
            _ => gpu = Some(row),
        }
        devices.push(d.device.clone());
        for c in &d.copies {
            if c.kind == CopyKind::D2d
                && c.status == FigureStatus::Measured
                && let Some(rate) = c.gb_per_s.filter(|r| r.is_finite() && *r > 0.0)
            {
                copy = Some(copy.map_or(rate, |m: f64| m.min(rate)));
            }
        }
        for g in &d.gemms {
            if g.status == FigureStatus::Measured
                && let Some(t) = g.tflops.filter(|t| t.is_finite() && *t > 0.0)
            {
                tflops
                    .entry(g.kind.name().to_string())
                    .and_modify(|m| *m = m.min(t))
                    .or_insert(t);
            }
        }
    }
    let Some((gpu, model)) = gpu else {
        anyhow::bail!("--probe {file} probed no device");
    };
    let Some(copy) = copy else {
        anyhow::bail!(
            "--probe {file} has no measured device-to-device copy: no memory bandwidth to use"
        );
    };
    Ok(ProbeUsed {
        file,
        gpu,
        model,
        devices,
        memory_bandwidth_gb_s: 2.0 * copy,
        memory_bandwidth_rule: "2 x the slowest GPU's device-to-device copy rate: a copy reads \
             and writes every byte, as the probe compares it with the datasheet",
        dense_tflops: tflops,
    })
}

/// The speeds of every catalogue GPU: the datasheet's, and the probe's for its model.
fn speeds(
    catalogue: &Catalogue,
    datasheet: &Datasheet,
    probe: Option<&ProbeUsed>,
    bits: u32,
    dtype: Option<&str>,
) -> BTreeMap<String, GpuSpeed> {
    let mut out = BTreeMap::new();
    for gpu in catalogue.gpus() {
        let Some(mut s) = ceiling::from_datasheet(datasheet, gpu, bits, dtype) else {
            continue;
        };
        if let Some(p) = probe.filter(|p| p.gpu == gpu) {
            let has_fp8 = p.dense_tflops.contains_key(GemmKind::Float8E4m3.name())
                || s.compute == GemmKind::Float8E4m3;
            let kind = ceiling::compute_kind(bits, dtype, has_fp8);
            let devices = if p.devices.len() == 1 {
                p.devices[0].clone()
            } else {
                format!("the slowest of {} GPUs", p.devices.len())
            };
            s.memory_bandwidth_gb_s = p.memory_bandwidth_gb_s;
            s.bandwidth_source = format!(
                "probe {}: {} {}, measured device-to-device copy x 2",
                p.file, p.model, devices
            );
            match p.dense_tflops.get(kind.name()) {
                Some(t) => {
                    s.compute = kind;
                    s.dense_tflops = Some(*t);
                    s.compute_source = format!(
                        "probe {}: {} {devices}, measured {kind} products",
                        p.file, p.model
                    );
                }
                None => {
                    s.compute_source = format!(
                        "{} (the probe {} has no measured {kind} product)",
                        s.compute_source, p.file
                    );
                }
            }
        }
        out.insert(gpu.to_string(), s);
    }
    out
}

fn gib_bytes(gib: Decimal) -> u128 {
    // At most 4 decimal places: mantissa x 2^30 / 10^scale, rounded up to a whole byte.
    let scale = 10u128.pow(gib.scale());
    (gib.mantissa().unsigned_abs() << 30).div_ceil(scale)
}

/// The bytes of the model a package must hold: the packed figure where the width packs below
/// whole bytes, else the whole-byte one (`estimate`'s headline rule, for `estimate` alone).
fn held_bytes(estimate: &MemoryEstimate) -> u128 {
    estimate.packed_model_bytes.unwrap_or(estimate.model_bytes)
}

/// Runs `fit`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalogue = Catalogue::load(args.catalogue.as_deref())?;
    let datasheet = Datasheet::load(args.datasheet.as_deref())?;
    if let Some(list) = &args.gpu {
        let known = catalogue.gpus();
        for g in list {
            if !known.contains(&g.as_str()) {
                let hint = nearest(g, &known)
                    .map(|n| format!("; did you mean {n}?"))
                    .unwrap_or_default();
                return Err(crate::exit::usage(format!(
                    "--gpu `{g}` is not a GPU of the catalogue{hint} (GPUs: {})",
                    known.join(", ")
                )));
            }
        }
    }
    let sort = Sort::parse(&args.sort).unwrap_or_default();
    let reserve_given = args.reserve_gib.is_some();
    let reserve = args
        .reserve_gib
        .unwrap_or_else(|| Decimal::from(DEFAULT_RESERVE_GIB));
    let tight = args
        .tight_gib
        .unwrap_or_else(|| Decimal::from(DEFAULT_TIGHT_GIB))
        .normalize();
    let serve = match &args.serve {
        Some(name) => Serve::parse(name).unwrap_or_default(),
        None if args.model.is_none() => Serve::None,
        None => Serve::Vllm,
    };
    let serve_name = Serve::NAMES[match serve {
        Serve::Vllm => 0,
        Serve::Sglang => 1,
        Serve::None => 2,
    }];
    if serve != Serve::Vllm
        && (args.gpu_memory_utilization.is_some()
            || args.max_num_batched_tokens.is_some()
            || args.max_num_seqs.is_some()
            || args.enforce_eager)
    {
        return Err(crate::exit::usage(format!(
            "--gpu-memory-utilization, --max-num-batched-tokens, --max-num-seqs and \
             --enforce-eager are vLLM's options; --serve is {serve_name}"
        )));
    }
    if serve != Serve::Sglang && args.mem_fraction_static.is_some() {
        return Err(crate::exit::usage(format!(
            "--mem-fraction-static is SGLang's option; --serve is {serve_name}"
        )));
    }
    if serve != Serve::None && (args.reserve_gib.is_some() || args.tight_gib.is_some()) {
        return Err(crate::exit::usage(format!(
            "--reserve-gib and --tight-gib belong to --serve none (the raw figure); --serve {} \
             budgets the engine's own terms (--tight-share sets tight)",
            serve_name
        )));
    }
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
    // The model as the engine serves it: `--dtype auto` serves a float32 checkpoint at 16 bits
    // (vLLM: bfloat16 where the GPU has it, float16 elsewhere).
    let mut served_note = None;
    let mut bits_arg = args.bits;
    let mut memory_args = args.memory.clone();
    let stored32 = facts.native_bits == Some(32) && facts.stored_weight_bytes.is_none();
    let served_dtype = if serve != Serve::None && args.bits.is_none() && stored32 {
        bits_arg = Some(16);
        served_note = Some(format!(
            "config.json declares float32; {} serves it at 16 bits (`--dtype auto`: bfloat16 on \
             GPUs that have it, float16 elsewhere), so the weights and KV cache are counted at \
             16 bits (--bits 32 counts them as stored)",
            serve.label()
        ));
        "bfloat16 (from float32, --dtype auto)".to_string()
    } else {
        let dtype = loaded
            .as_ref()
            .and_then(|l| l.model.architecture.as_ref())
            .and_then(|a| a.dtype.clone());
        let quant = loaded
            .as_ref()
            .and_then(|l| l.model.architecture.as_ref())
            .and_then(|a| a.quantization.as_ref());
        match (args.bits, dtype, quant) {
            (Some(b), _, _) => format!("{b}-bit weights (--bits)"),
            (None, d, Some(q)) => format!(
                "{}-bit {} weights, {} activations",
                q.bits.or(facts.quantised_bits).unwrap_or(16),
                q.method.as_deref().unwrap_or("quantised"),
                d.unwrap_or_else(|| "bfloat16".to_string())
            ),
            (None, Some(d), None) => d,
            (None, None, None) => format!("{}-bit", facts.native_bits.unwrap_or(16)),
        }
    };
    if let Some(kv) = &args.kv_cache_dtype {
        memory_args.kv_bits = match kv.as_str() {
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Some(8),
            "bfloat16" | "float16" | "half" => Some(16),
            _ => None,
        };
        if memory_args.context.is_none() && memory_args.kv_bits.is_some() {
            return Err(crate::exit::usage(
                "--kv-cache-dtype needs --context (the KV cache it sizes)",
            ));
        }
    }
    if memory_args.kv_bits.is_none() && bits_arg == Some(16) && stored32 {
        memory_args.kv_bits = memory_args.context.map(|_| 16);
    }
    // The reserve is per GPU here, not part of the model's bytes.
    let options = memory_options(bits_arg, Decimal::ZERO, &memory_args);
    let usage = |err: rent::memory::MemoryError| crate::exit::usage(err.to_string());
    let estimate = memory(&facts, &options).map_err(usage)?;
    let probe = match &args.probe {
        Some(p) => {
            let used = read_probe(p, &datasheet)?;
            if !catalogue.gpus().contains(&used.gpu.as_str()) {
                return Err(crate::exit::usage(format!(
                    "--probe {} measured a {} ({}), which the catalogue does not offer",
                    used.file, used.model, used.gpu
                )));
            }
            Some(used)
        }
        None => None,
    };
    let architecture = loaded.as_ref().and_then(|l| l.model.architecture.as_ref());
    let heads = architecture.map(|a| (a.attention.heads, a.attention.kv_heads));
    let reserve_bytes = gib_bytes(reserve);
    // What a GPU holds: the packed figure where the width packs below whole bytes (a 4-bit
    // checkpoint stores two parameters a byte), else the whole-byte one. The reserve is fit's
    // own, per GPU, so the estimate's is zero here.
    let held = held_bytes(&estimate);
    let inputs = FitInputs {
        model_bytes: held,
        reserve_bytes,
        max_gpus: args.max_gpus,
        days: args.days,
        heads,
    };
    let extras = match (&args.model, architecture) {
        (Some(path), Some(_)) => config_extras(&model::hub::locate(path).unwrap_or(path.clone())),
        _ => ConfigExtras::default(),
    };
    let native_bits = facts.native_bits.unwrap_or(16);
    let bits = bits_arg.unwrap_or(native_bits);
    let kv_bits = estimate.kv_bits.unwrap_or(native_bits);
    let kv_total = estimate.kv_cache_bytes.unwrap_or(0);
    // What the total counts besides the KV cache and the training states: the weights and
    // their scales, read once per decode step.
    let training_extra = estimate
        .training
        .as_ref()
        .map_or(0, |t| t.total_bytes - t.weights_bytes);
    let weight_bytes = held.saturating_sub(kv_total).saturating_sub(training_extra);
    let geometry = architecture.map(|a| Geometry {
        heads: Heads {
            layers: a.attention.layers,
            heads: a.attention.heads,
            kv_heads: a.attention.kv_heads,
        },
        head_dim: a.attention.head_dim,
        sliding: a.attention.sliding_window.map(|w| (w.window, w.layers)),
        latent_kv: a.attention.latent_kv,
        kv_bits,
        embedding: extras.embedding,
        max_positions: extras.max_positions,
    });
    let workload = Workload {
        parameters: facts.parameters,
        active_parameters: facts.active_parameters,
        experts: architecture.and_then(|a| a.experts),
        parameter_bytes: held - kv_total,
        weight_bytes,
        geometry,
        context: args.memory.context,
        batch: args.memory.batch,
    };
    let dtype = architecture.and_then(|a| a.dtype.as_deref());
    let mut native_engine = BTreeMap::new();
    for row in datasheet.rows() {
        let cuda = !row.cuda_names.is_empty();
        native_engine
            .entry(row.gpu.clone())
            .and_modify(|c: &mut bool| *c = *c || cuda)
            .or_insert(cuda);
    }
    let tight_share = args.tight_share.unwrap_or(Decimal::new(5, 2));
    let engine_options = EngineOptions {
        serve,
        gpu_memory_utilization: args.gpu_memory_utilization,
        max_num_batched_tokens: args.max_num_batched_tokens,
        max_num_seqs: args.max_num_seqs,
        enforce_eager: args.enforce_eager,
        mem_fraction_static: args.mem_fraction_static,
    };
    let shape = architecture.map(|a| {
        let experts = a.experts;
        Shape {
            hidden: extras.embedding.map_or(0, |e| e.hidden),
            intermediate: match experts {
                Some(_) => extras.expert_intermediate.unwrap_or(extras.intermediate),
                None => extras.intermediate,
            },
            experts,
            shared_intermediate: extras.shared_intermediate,
            vocab: extras.embedding.map_or(0, |e| e.vocab),
            heads: a.attention.heads,
            kv_heads: a.attention.kv_heads,
            head_dim: a.attention.head_dim,
            activation_bytes: if bits >= 32 { 4 } else { 2 },
        }
    });
    // MXFP4 experts as stored (no --bits given): vLLM pads them per GPU (rent::engine).
    let mxfp4 = architecture
        .filter(|a| {
            args.bits.is_none()
                && a.quantization.as_ref().and_then(|q| q.method.as_deref()) == Some("mxfp4")
        })
        .zip(shape)
        .and_then(|(_, s)| {
            s.experts.map(|(e, _)| rent::engine::Mxfp4Experts {
                experts: e,
                hidden: s.hidden,
                intermediate: s.intermediate,
            })
        });
    let engine_plan = match (serve, shape) {
        (Serve::None, _) | (_, None) => None,
        (_, Some(shape)) => Some(EnginePlan {
            options: engine_options.clone(),
            shape,
            tight_share,
            mxfp4,
        }),
    };
    if serve != Serve::None && engine_plan.is_none() {
        return Err(crate::exit::usage(format!(
            "--serve {} budgets the engine from the model's shape (hidden size, layers, heads, \
             vocabulary), which only --model with a config.json of a known architecture gives; \
             with --parameters pass --serve none",
            serve_name
        )));
    }
    let plan = Plan {
        speeds: speeds(&catalogue, &datasheet, probe.as_ref(), bits, dtype),
        native_engine,
        tight_bytes: gib_bytes(tight),
        workload: Some(workload.clone()),
        engine: engine_plan,
    };
    let all_rows = fit_with(&catalogue, &inputs, &plan);
    let filtered = select(
        all_rows.clone(),
        &Selection {
            fits_only: false,
            gpus: args.gpu.clone(),
            sort,
            limit: None,
        },
    );
    let rows_total = filtered.len();
    let rows_fitting = filtered.iter().filter(|o| o.fits).count();
    let limit = if args.json || args.all {
        args.limit
    } else {
        Some(args.limit.unwrap_or(DEFAULT_TEXT_ROWS))
    };
    let rows = select(
        filtered,
        &Selection {
            fits_only: args.fits_only,
            gpus: None,
            sort,
            limit,
        },
    );
    let mut notes: Vec<String> = estimate.assumptions.clone();
    notes.extend(served_note);
    if serve == Serve::Vllm && args.memory.context.is_none() {
        notes.push(
            "without --context one KV block is asked for; vLLM's own --max-model-len defaults to \
             max_position_embeddings and it refuses to start when the pool holds fewer tokens"
                .to_string(),
        );
    }
    if let Some(l) = &loaded {
        notes.extend(l.notes.iter().cloned());
    }
    notes.extend(extras.notes.iter().cloned());
    let window = rent::capacity::window(&workload);
    let latent = workload
        .geometry
        .as_ref()
        .and_then(|g| g.latent_kv)
        .map(|l| {
            format!(
                "; multi-head latent attention caches one {l}-element latent per layer and token, \
                 whole on every tensor-parallel GPU (vLLM replicates it)"
            )
        })
        .unwrap_or_default();
    let kv_cache_per_gpu = match (&workload.geometry, window) {
        (None, _) => "no geometry (a bare parameter count): no KV cache, no layout check; the \
             weights split evenly over all GPUs"
            .to_string(),
        (Some(_), Some(w)) => format!(
            "the KV heads it caches (the KV heads / the tensor-parallel degree, at least \
             one) x its stage's layers; a sliding-window layer's cache stops growing at its \
             {w}-token window"
        ),
        (Some(_), None) => "the KV heads it caches (the KV heads / the tensor-parallel \
             degree, at least one, replicated beyond) x its stage's layers"
            .to_string(),
    };
    let kv_cache_per_gpu = format!("{kv_cache_per_gpu}{latent}");
    let mut ceiling_text = format!(
        "{}: decode tokens/s <= batch x memory bandwidth per GPU / bytes the busiest GPU reads \
         per step (its weights once, of the input embedding one row per sequence, the output head whole, and the KV cache of every sequence at the context); tensor-parallel layouts read a T-th each, pipeline stages are bounded stage by stage per micro-batch; prefill \
         tokens/s <= GPUs x dense peak / (2 x active parameters + attention) FLOP per token",
        ceiling::BOUND
    );
    if let Some((e, k)) = workload.experts {
        let _ = write!(
            ceiling_text,
            "; mixture of experts: a step at batch 1 reads the shared weights and the {k} experts \
             of one token; at batch B, each token is taken to pick its {k} of {e} experts \
             independently and uniformly, so a layer reads {e} x (1 - (1 - {k}/{e})^B) experts \
             ({:.2} at batch {})",
            ceiling::experts_read(e, k, workload.batch as f64),
            workload.batch
        );
    }
    let engine_used = (serve != Serve::None).then(|| EngineUsed {
        gpu_memory_utilization: (serve == Serve::Vllm)
            .then(|| args.gpu_memory_utilization.unwrap_or(Decimal::new(9, 1))),
        max_num_batched_tokens: args.max_num_batched_tokens,
        max_num_seqs: args.max_num_seqs,
        enforce_eager: args.enforce_eager,
        mem_fraction_static: args.mem_fraction_static,
        kv_cache_dtype: args
            .kv_cache_dtype
            .clone()
            .unwrap_or_else(|| "auto".to_string()),
        served_dtype: served_dtype.clone(),
        tight_share,
        rule: match serve {
            Serve::Vllm => {
                "vLLM (v1 gpu_worker determine_available_memory): KV pool = total x \
                 gpu_memory_utilization - weights - profile-run activation peak - non-torch \
                 memory, cut into 16-token blocks; CUDA graphs are captured afterwards, out of \
                 total x (1 - gpu_memory_utilization); max_num_batched_tokens and max_num_seqs \
                 default per GPU (null here: the engine's default, in each row's budget)"
            }
            _ => {
                "SGLang (model_runner profile_max_num_token): KV pool = total x \
                 mem_fraction_static - weights - the memory used before it is sized; \
                 activations and CUDA graphs live in total x (1 - mem_fraction_static)"
            }
        },
    });
    let assumptions = Assumptions {
        serve,
        engine: engine_used,
        speculative_decoding: SPECULATIVE,
        reserve_gib_per_gpu: reserve,
        reserve_given,
        split: "the layout of each row: weights divided over its tensor-parallel GPUs (KV \
             projections held whole where the degree exceeds the KV heads), layers over its \
             pipeline stages (the embedding on the first, the output head on the last); the \
             busiest GPU's need is compared; small replicated tensors such as norms are not \
             counted twice",
        usable_memory: "the catalogue's usable_memory_mib: the total memory a CUDA/ROCm process sees on one GPU, before anything is allocated",
        model_bytes: held,
        context: args.memory.context,
        batch: args.memory.batch,
        max_gpus: args.max_gpus,
        days: args.days,
        notes,
        layout_rule: RULE,
        tight_headroom_gib: tight,
        kv_cache_per_gpu,
        max_position_embeddings: extras.max_positions,
        ceilings: ceiling_text,
    };
    let shown = Shown {
        fits_only: args.fits_only,
        gpu: args.gpu.clone(),
        sort,
        limit,
        rows_total,
        rows_fitting,
        rows_shown: rows.len(),
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
        datasheet: datasheet.name().to_string(),
        probe,
        selection: shown,
        options: rows,
    };
    // Offers are matched against the whole package table, whatever rows are shown; the same
    // limit caps the offers of each duration.
    let offers = offers::section(args.offers.as_deref(), args.days, &all_rows, limit)?;
    if args.json {
        output::print_json(&offers::WithOffers {
            document: &doc,
            offers: offers.as_ref(),
        })?;
    } else {
        output::print_text(&(render(&doc, &all_rows) + &offers::render(offers.as_ref())))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A price per million tokens, cents, as an amount: 2 decimals, 4 under 0.10.
fn per_mtok(cents: Decimal) -> String {
    let amount = decimal_cents_to_amount(cents);
    if amount < Decimal::new(10, 2) {
        amount.round_dp(4).to_string()
    } else {
        amount.round_dp(2).to_string()
    }
}

/// The engine's budget on the busiest GPU of one row, term by term.
fn render_budget(o: &FitOption, b: &Budget) -> String {
    let mut s = String::new();
    let what = match b.serve {
        Serve::Vllm => "gpu_memory_utilization",
        _ => "mem_fraction_static",
    };
    let _ = writeln!(
        s,
        "{} budget per GPU, {} x {} ({} GPU{}{}), GiB:",
        b.serve.label(),
        o.lots,
        o.gpu,
        o.total_gpus,
        if o.total_gpus == 1 { "" } else { "s" },
        o.layout
            .as_ref()
            .map(|l| format!(", {}", l.label()))
            .unwrap_or_default()
    );
    let _ = writeln!(
        s,
        "  total memory                {:>8}",
        gib(b.total_bytes, 2)
    );
    let _ = writeln!(
        s,
        "  x {what} {:<4} {:>8}",
        b.fraction,
        gib(b.budget_bytes, 2)
    );
    let _ = writeln!(
        s,
        "  - weights as loaded         {:>8}",
        gib(b.weights_bytes, 2)
    );
    let range = |e: &rent::engine::Estimated| {
        format!(
            "(estimate, {} to {})",
            gib(e.low_bytes, 2),
            gib(e.high_bytes, 2)
        )
    };
    if b.serve == Serve::Vllm {
        let _ = writeln!(
            s,
            "  - activation peak           {:>8}  {} of the profile run: {} batched tokens, {} \
             rows of logits",
            gib(b.activation_peak.bytes, 2),
            range(&b.activation_peak),
            b.max_num_batched_tokens.unwrap_or(0),
            b.max_num_seqs
                .unwrap_or(0)
                .min(b.max_num_batched_tokens.unwrap_or(0))
        );
    }
    let _ = writeln!(
        s,
        "  - non-torch memory          {:>8}  {}",
        gib(b.non_torch.bytes, 2),
        range(&b.non_torch)
    );
    let _ = writeln!(
        s,
        "  = KV cache pool             {:>8}  {} tokens in {} blocks of {} ({} bytes a token)",
        format!("{:.2}", b.kv_pool_bytes as f64 / f64::from(1u32 << 30)),
        b.kv_tokens,
        b.kv_blocks,
        b.block_tokens,
        b.kv_bytes_per_token
    );
    match b.serve {
        Serve::Vllm => {
            let _ = writeln!(
                s,
                "  CUDA graphs                 {:>8}  {}, in the {} GiB left above the budget",
                gib(b.cuda_graphs.bytes, 2),
                if b.cuda_graphs_captured {
                    range(&b.cuda_graphs)
                } else {
                    "(--enforce-eager: none)".to_string()
                },
                gib(b.margin_bytes, 2)
            );
            if b.sampler_warmup_bytes > 0 {
                let _ = writeln!(
                    s,
                    "  sampler warm-up             {:>8}  (estimate) after the KV cache, {} rows of logits, in the same margin",
                    gib(b.sampler_warmup_bytes, 2),
                    b.max_num_seqs.unwrap_or(0)
                );
            }
        }
        _ => {
            let _ = writeln!(
                s,
                "  activations + CUDA graphs   {:>8}  (estimate), in the {} GiB outside the \
                 static fraction",
                gib(b.activation_peak.bytes + b.cuda_graphs.bytes, 2),
                gib(b.margin_bytes, 2)
            );
        }
    }
    let verdict = match (o.fits, o.tight) {
        (true, false) => "fits".to_string(),
        (true, true) => format!("tight: {}", o.reason.as_deref().unwrap_or("")),
        (false, _) => format!(
            "does not fit: {}",
            o.reason
                .as_deref()
                .or(o.layout_problem.as_deref())
                .unwrap_or("")
        ),
    };
    let _ = writeln!(s, "  verdict: {verdict}");
    s
}

fn render(d: &Document, all: &[FitOption]) -> String {
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
    // The parts of the total, each as the total counts it.
    let training = e
        .training
        .as_ref()
        .map_or(0, |t| t.total_bytes - t.weights_bytes);
    let held = held_bytes(e);
    let weights = held
        .saturating_sub(e.kv_cache_bytes.unwrap_or(0))
        .saturating_sub(training)
        .saturating_sub(e.quantisation_metadata_bytes.unwrap_or(0));
    let _ = writeln!(
        s,
        "  model memory   {} bytes ({} GiB: weights {}{}{}{})",
        held,
        gib(held, 1),
        weights,
        e.quantisation_metadata_bytes
            .map(|m| format!(" + scales {m}"))
            .unwrap_or_default(),
        e.kv_cache_bytes
            .map(|kv| format!(" + KV cache {kv}"))
            .unwrap_or_default(),
        e.training
            .as_ref()
            .map(|t| format!(" + training states {}", t.total_bytes - t.weights_bytes))
            .unwrap_or_default()
    );
    if let Some(c) = a.context {
        let _ = writeln!(
            s,
            "  context        {c} tokens x {} sequence{}{}",
            a.batch,
            if a.batch == 1 { "" } else { "s" },
            a.max_position_embeddings
                .map(|m| format!(" (max_position_embeddings {m})"))
                .unwrap_or_default()
        );
    }
    match &a.engine {
        None => {
            let _ = writeln!(
                s,
                "  serve          none: the raw figure, usable memory minus a flat reserve \
                 (--serve vllm or sglang budgets an engine)"
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
            let _ = writeln!(
                s,
                "  tight          headroom under {} GiB per GPU (--tight-gib changes it)",
                a.tight_headroom_gib
            );
        }
        Some(e) => {
            let opts = match a.serve {
                Serve::Vllm => format!(
                    "--gpu-memory-utilization {}{}{}{}",
                    e.gpu_memory_utilization.unwrap_or_default(),
                    e.max_num_batched_tokens
                        .map(|n| format!(" --max-num-batched-tokens {n}"))
                        .unwrap_or_default(),
                    e.max_num_seqs
                        .map(|n| format!(" --max-num-seqs {n}"))
                        .unwrap_or_default(),
                    if e.enforce_eager {
                        " --enforce-eager"
                    } else {
                        ""
                    }
                ),
                _ => e
                    .mem_fraction_static
                    .map(|f| format!("--mem-fraction-static {f}"))
                    .unwrap_or_else(|| "--mem-fraction-static by tensor-parallel degree".into()),
            };
            let _ = writeln!(s, "  serve          {} {opts}", a.serve.label());
            let _ = writeln!(
                s,
                "  served as      {}, KV cache {}",
                e.served_dtype, e.kv_cache_dtype
            );
            let _ = writeln!(
                s,
                "  tight          KV pool to spare under {}% of the card, or an estimate's high \
                 end over the edge (--tight-share changes it)",
                (e.tight_share * Decimal::from(100)).normalize()
            );
        }
    }
    let _ = writeln!(
        s,
        "  ceilings from  {}",
        match &d.probe {
            Some(p) => format!(
                "probe {} for {}, datasheet ({}) for the rest",
                p.file, p.gpu, d.datasheet
            ),
            None => format!("datasheet ({})", d.datasheet),
        }
    );
    let _ = writeln!(s);
    let head = [
        "gpu",
        "GPUs",
        "layout",
        "days",
        "need/GPU GiB",
        "usable GiB",
        "fits",
        "headroom GiB",
        "max context",
        "max batch",
        "decode tok/s<=",
        "per Mtok>=",
        "from",
        "price",
        "per GPU-day",
        "",
    ];
    const LEFT: [usize; 3] = [0, 2, 15];
    let mut cells: Vec<[String; 16]> = Vec::new();
    for o in &d.options {
        let example = if o.example { "*" } else { "" };
        let mut marks = Vec::new();
        if o.native_engine == Some(false) {
            marks.push("ROCm");
        }
        if o.needs_network {
            marks.push("NET");
        }
        if o.example {
            marks.push("EXAMPLE");
        }
        let c = o.ceilings.as_ref();
        cells.push([
            o.gpu.clone(),
            o.total_gpus.to_string(),
            match (&o.layout, &o.layout_problem) {
                (Some(l), _) => l.label(),
                (None, Some(_)) => "-".to_string(),
                (None, None) => "even".to_string(),
            },
            o.days.to_string(),
            gib(o.per_gpu_bytes, 1),
            gib(o.usable_bytes_per_gpu, 1),
            match (o.fits, o.tight, &o.layout_problem) {
                (true, true, _) => "tight".to_string(),
                (true, false, _) => "yes".to_string(),
                (false, _, Some(_)) => "no: layout".to_string(),
                (false, _, None) => "no".to_string(),
            },
            format!("{:.1}", o.headroom_bytes as f64 / f64::from(1u32 << 30)),
            match (o.largest_context, o.largest_context_limit) {
                (Some(t), Some(ContextLimit::MaxPositionEmbeddings)) => format!("{t} cap"),
                (Some(t), _) => t.to_string(),
                (None, Some(ContextLimit::Unbounded)) => "any".to_string(),
                _ => "-".to_string(),
            },
            o.largest_batch
                .map_or_else(|| "-".to_string(), |b| b.to_string()),
            c.map_or_else(
                || "-".to_string(),
                |c| format!("{:.1}", c.decode_tokens_per_s),
            ),
            c.and_then(|c| c.decode_price_per_mtok_cents)
                .map_or_else(|| "-".to_string(), |p| format!("{}{example}", per_mtok(p))),
            c.map_or_else(
                || "-".to_string(),
                |c| {
                    if c.bandwidth_source.starts_with("probe") {
                        "probe".to_string()
                    } else {
                        "datasheet".to_string()
                    }
                },
            ),
            format!(
                "{} {}{example}",
                o.currency,
                cents_to_amount(o.total_price_cents)
            ),
            format!(
                "{}{example}",
                decimal_cents_to_amount(o.price_per_gpu_day_cents).round_dp(2)
            ),
            marks.join(" "),
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
            if LEFT.contains(&i) {
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
    let sel = &d.selection;
    let _ = writeln!(s);
    let considered_budget: Vec<&FitOption> = all
        .iter()
        .filter(|o| sel.gpu.as_ref().is_none_or(|g| g.contains(&o.gpu)))
        .collect();
    let headline = considered_budget
        .iter()
        .find(|o| o.fits && o.machines == 1)
        .or_else(|| considered_budget.iter().find(|o| o.fits))
        .copied()
        .or_else(|| d.options.first());
    if let Some(o) = headline
        && let Some(b) = &o.budget
    {
        s.push_str(&render_budget(o, b));
        let _ = writeln!(s);
    }
    let pool = if sel.fits_only {
        sel.rows_fitting
    } else {
        sel.rows_total
    };
    if sel.rows_shown < pool {
        let mut hints = vec!["--all shows every one"];
        if !sel.fits_only {
            hints.push("--fits-only only those that fit");
        }
        if sel.gpu.is_none() {
            hints.push("--gpu LIST some GPUs");
        }
        hints.push("--sort price-per-mtok or headroom another order");
        let _ = writeln!(
            s,
            "{} of {pool} {} shown; {}.",
            sel.rows_shown,
            if sel.fits_only {
                "fitting rows"
            } else {
                "rows"
            },
            hints.join(", ")
        );
    }
    let considered: Vec<&FitOption> = all
        .iter()
        .filter(|o| sel.gpu.as_ref().is_none_or(|g| g.contains(&o.gpu)))
        .collect();
    let one_machine = considered.iter().find(|o| o.fits && o.machines == 1);
    match one_machine.or_else(|| considered.iter().find(|o| o.fits)) {
        Some(best) => {
            let _ = writeln!(
                s,
                "{} of {} packages fit. Cheapest{}: {} x {} ({} GPU{}{}), {} days, {} {}{}.",
                sel.rows_fitting,
                sel.rows_total,
                if best.machines == 1 {
                    " on one machine"
                } else {
                    " (no package fits on one machine; it needs the fleet's network)"
                },
                best.lots,
                best.gpu,
                best.total_gpus,
                if best.total_gpus == 1 { "" } else { "s" },
                best.layout
                    .as_ref()
                    .map(|l| format!(", {}", l.label()))
                    .unwrap_or_default(),
                best.days,
                best.currency,
                cents_to_amount(best.total_price_cents),
                if best.example { " (EXAMPLE price)" } else { "" }
            );
        }
        None => {
            let _ = writeln!(
                s,
                "None of the {} packages up to {} GPUs fits: raise --max-gpus, lower --bits or --context{}.",
                sel.rows_total,
                a.max_gpus,
                match a.serve {
                    Serve::Vllm =>
                        ", or give vLLM more room (--max-num-seqs, --gpu-memory-utilization, --enforce-eager)",
                    Serve::Sglang => ", or raise --mem-fraction-static",
                    Serve::None => "",
                }
            );
        }
    }
    let _ = writeln!(s, "Assumed: {}.", a.split);
    let _ = writeln!(s, "Assumed: layouts follow {}.", a.layout_rule);
    let _ = writeln!(s, "Assumed: KV cache per GPU: {}.", a.kv_cache_per_gpu);
    let _ = writeln!(s, "Assumed: usable memory is {}.", a.usable_memory);
    for n in &a.notes {
        let _ = writeln!(s, "Assumed: {n}.");
    }
    let _ = writeln!(
        s,
        "Ceilings: {}. Prefill ceilings and every figure behind them are in --json.",
        a.ceilings
    );
    let _ = writeln!(s, "Speculative decoding: {}.", a.speculative_decoding);
    if let Some(p) = &d.probe {
        let _ = writeln!(
            s,
            "Probe {}: {} ({}), memory bandwidth {:.1} GB/s ({}).",
            p.file,
            p.model,
            p.devices.join(", "),
            p.memory_bandwidth_gb_s,
            p.memory_bandwidth_rule
        );
    }
    let shown = &d.options;
    if shown.iter().any(|o| o.tight) {
        let _ = writeln!(
            s,
            "{}",
            match &a.engine {
                None => format!(
                    "tight = fits with under {} GiB of headroom per GPU beyond the reserve: \
                     fragmentation, CUDA graphs or a longer prompt can tip it over.",
                    a.tight_headroom_gib
                ),
                Some(e) => format!(
                    "tight = fits with under {}% of the card to spare in the KV pool, or an \
                     estimate's high end (activation peak, non-torch memory, CUDA graphs) would \
                     tip it over: --json has each row's reason.",
                    (e.tight_share * Decimal::from(100)).normalize()
                ),
            }
        );
    }
    if shown
        .iter()
        .any(|o| o.largest_context_limit == Some(ContextLimit::MaxPositionEmbeddings))
        && let Some(m) = a.max_position_embeddings
    {
        let _ = writeln!(
            s,
            "cap = the model's max_position_embeddings ({m}): the memory would hold a longer \
             context, the model is not made for one."
        );
    }
    let mut problems: Vec<(u64, &str)> = shown
        .iter()
        .filter_map(|o| o.layout_problem.as_deref().map(|p| (o.total_gpus, p)))
        .collect();
    problems.sort();
    problems.dedup();
    for (n, p) in problems {
        let _ = writeln!(s, "no: layout on {n} GPUs = {p}.");
    }
    if shown.iter().any(|o| o.native_engine == Some(false)) {
        let _ = writeln!(
            s,
            "ROCm = an AMD GPU: iteragpu's native engine is CUDA only; measure --engine torch \
             measures it through PyTorch for ROCm; its ceilings are the datasheet's."
        );
    }
    if shown.iter().any(|o| o.needs_network) {
        let _ = writeln!(
            s,
            "NET = several lots, so several machines (the catalogue promises no more): the \
             layout's tensor-parallel or pipeline traffic crosses the fleet's network \
             (InfiniBand or RoCE), which a lot does not promise; a package of one lot stays on \
             one machine."
        );
    }
    if shown.iter().any(|o| o.example) {
        let _ = writeln!(
            s,
            "* EXAMPLE prices, not real quotes: the catalogue rows say so in their source."
        );
    }
    let _ = writeln!(
        s,
        "Not included{}: {}. A package price is not availability: check the provider's offer.",
        if a.engine.is_some() {
            " in the model memory line (the engine's budget counts activations, non-torch \
             memory and CUDA graphs)"
        } else {
            ""
        },
        e.base.excluded.join(", ")
    );
    s
}
