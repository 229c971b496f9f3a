//! What `estimate` and `fit` share at the command line beyond the weights: the memory options
//! (`MemoryArgs`, a clap type, so it stays in the binary) as `rent::memory`'s options, and
//! `--model`'s reading with its exit codes. The conversion of the model's facts is
//! `rent::loaded`'s.

use rent::estimate::parse_bits;
use rent::loaded::LoadedModel;
use rent::memory::MemoryOptions;
use rust_decimal::Decimal;

/// The options shared by `estimate` and `fit` beyond the weights.
#[derive(Debug, Clone, clap::Args)]
pub struct MemoryArgs {
    /// Quantisation scales: one scale and one zero point per group of G columns of each packed
    /// matrix (needs --bits), stated as an assumption.
    #[arg(long, value_name = "G", value_parser = parse_positive)]
    pub group_size: Option<u64>,

    /// Width of one quantisation scale in bits (with --group-size).
    #[arg(long, value_name = "BITS", default_value_t = 16, value_parser = parse_bits,
          requires = "group_size")]
    pub scale_bits: u32,

    /// Tokens per sequence held in the KV cache (needs the model's config.json).
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub context: Option<u64>,

    /// Sequences held in the KV cache at once (with --context).
    #[arg(long, value_name = "B", default_value_t = 1, value_parser = parse_positive,
          requires = "context")]
    pub batch: u64,

    /// Width of one cached key or value element in bits (default: the model's stored width).
    #[arg(long, value_name = "BITS", value_parser = parse_bits, requires = "context")]
    pub kv_bits: Option<u32>,

    /// Add fine-tuning memory: `adam` (mixed precision: gradients, float32 master weights and
    /// two Adam moments, each line labelled).
    #[arg(long, value_name = "OPTIMIZER", value_parser = ["adam"])]
    pub training: Option<String>,
}

/// A positive whole number written in digits.
fn parse_positive(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(v) if v > 0 && text.trim().bytes().all(|b| b.is_ascii_digit()) => Ok(v),
        _ => Err(format!(
            "`{text}` is not accepted; expected a positive whole number written in digits"
        )),
    }
}

/// Reads a model folder; any fault is a data fault (exit 1) named by file.
pub fn load(path: &std::path::Path, context: Option<u64>) -> anyhow::Result<LoadedModel> {
    // A Hub id (`org/name`) that is not a path is looked up offline in the local cache.
    let path = &model::hub::locate(path).map_err(|e| crate::exit::usage(e.to_string()))?;
    Ok(LoadedModel::new(model::inspect(path)?, context))
}

/// The lab options from the command line.
pub fn memory_options(bits: Option<u32>, reserve: Decimal, m: &MemoryArgs) -> MemoryOptions {
    MemoryOptions {
        bits,
        group_size: m.group_size,
        scale_bits: m.scale_bits,
        context: m.context,
        batch: m.batch,
        kv_bits: m.kv_bits,
        training: m.training.is_some(),
        reserve_gib: reserve,
    }
}
