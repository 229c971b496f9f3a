//! Which catalogue packages hold a model: for every GPU and every lot count up to a number of
//! GPUs, the memory each GPU needs when the model is split over all of the package's GPUs, against
//! the memory a CUDA/ROCm process sees on that GPU, with the price.

use rust_decimal::Decimal;
use serde::Serialize;

use crate::catalogue::{Catalogue, DURATIONS};
use crate::units::ratio_half_even;

/// The default per-GPU reserve in GiB: CUDA context, library workspaces, activations.
pub const DEFAULT_RESERVE_GIB: u32 = 2;

/// The largest `--max-gpus` accepted.
pub const MAX_GPUS: u32 = 1024;

/// What `fit` compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitInputs {
    /// The model's memory (weights, metadata, KV cache, training states), split over the GPUs.
    pub model_bytes: u128,
    /// Added on every GPU, not split.
    pub reserve_bytes: u128,
    /// Packages of up to this many GPUs.
    pub max_gpus: u32,
    /// One duration, or all three.
    pub days: Option<u32>,
    /// (attention heads, KV heads), to mark a GPU count that does not divide them.
    pub heads: Option<(u64, u64)>,
}

/// One package and whether the model fits on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitOption {
    /// GPU slug.
    pub gpu: String,
    /// Display name.
    pub model: String,
    /// Lots rented.
    pub lots: u64,
    /// lots x GPUs per lot: the tensor-parallel degree.
    pub total_gpus: u64,
    /// Package duration.
    pub days: u32,
    /// ceil(model bytes / total_gpus) + the reserve.
    pub per_gpu_bytes: u128,
    /// usable MiB x 2^20.
    pub usable_bytes_per_gpu: u128,
    /// per_gpu_bytes <= usable_bytes_per_gpu.
    pub fits: bool,
    /// usable - need (negative when it does not fit).
    pub headroom_bytes: i128,
    /// Whether total_gpus divides the attention and KV heads (null when unknown).
    pub heads_divisible: Option<bool>,
    /// Lot price x lots.
    pub total_price_cents: u64,
    /// total price / (GPUs x days), half-even to 1/10000 cent.
    pub price_per_gpu_day_cents: Decimal,
    /// ISO 4217 code.
    pub currency: String,
    /// The row's price is an example, not a quote.
    pub example: bool,
    /// The catalogue row's source.
    pub source: String,
}

/// Every package of `catalogue` up to `inputs.max_gpus` GPUs, cheapest fitting first, then the
/// packages that do not fit, cheapest first.
pub fn fit(catalogue: &Catalogue, inputs: &FitInputs) -> Vec<FitOption> {
    let mut out = Vec::new();
    for t in catalogue.rows() {
        if inputs.days.is_some_and(|d| d != t.days) || !DURATIONS.contains(&t.days) {
            continue;
        }
        let per_lot = u64::from(t.gpus_per_lot);
        let mut lots = 1u64;
        while per_lot * lots <= u64::from(inputs.max_gpus) {
            let gpus = per_lot * lots;
            let Some(total_price_cents) = t.price_cents.checked_mul(lots) else {
                break;
            };
            let need = inputs.model_bytes.div_ceil(u128::from(gpus)) + inputs.reserve_bytes;
            let usable = u128::from(t.usable_memory_mib) << 20;
            let headroom = i128::try_from(usable).unwrap_or(i128::MAX)
                - i128::try_from(need).unwrap_or(i128::MAX);
            out.push(FitOption {
                gpu: t.gpu.clone(),
                model: t.model.clone(),
                lots,
                total_gpus: gpus,
                days: t.days,
                per_gpu_bytes: need,
                usable_bytes_per_gpu: usable,
                fits: need <= usable,
                headroom_bytes: headroom,
                heads_divisible: inputs.heads.map(|(h, kv)| h % gpus == 0 && kv % gpus == 0),
                total_price_cents,
                price_per_gpu_day_cents: ratio_half_even(
                    u128::from(total_price_cents),
                    u128::from(gpus) * u128::from(t.days),
                )
                .unwrap_or_default(),
                currency: t.currency.clone(),
                example: t.is_example(),
                source: t.source.clone(),
            });
            lots += 1;
        }
    }
    // Stable: equal prices keep catalogue order.
    out.sort_by_key(|o| (!o.fits, o.total_price_cents, o.total_gpus));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u128 = 1 << 30;

    fn inputs(model_gib: u128, max_gpus: u32) -> FitInputs {
        FitInputs {
            model_bytes: model_gib * GIB,
            reserve_bytes: 2 * GIB,
            max_gpus,
            days: Some(7),
            heads: Some((64, 8)),
        }
    }

    #[test]
    fn every_lot_count_up_to_max_gpus_is_listed() {
        let c = Catalogue::embedded();
        let options = fit(&c, &inputs(10, 8));
        // 14 one-GPU models x 8 lots + B200 (2 per lot) x 4 lots, 7 days only.
        assert_eq!(options.len(), 14 * 8 + 4);
        let b200: Vec<u64> = options
            .iter()
            .filter(|o| o.gpu == "b200")
            .map(|o| o.total_gpus)
            .collect();
        assert_eq!(b200.len(), 4);
        assert!(b200.iter().all(|g| g % 2 == 0 && *g <= 8));
    }

    #[test]
    fn cheapest_fitting_first_then_the_rest() {
        let c = Catalogue::embedded();
        let options = fit(&c, &inputs(130, 8));
        let first_miss = options.iter().position(|o| !o.fits).unwrap();
        assert!(options[first_miss..].iter().all(|o| !o.fits));
        assert!(options[..first_miss].iter().all(|o| o.fits));
        for pair in options[..first_miss].windows(2) {
            assert!(pair[0].total_price_cents <= pair[1].total_price_cents);
        }
        // The need splits over the GPUs; the reserve does not.
        let one = options
            .iter()
            .find(|o| o.gpu == "h100-sxm" && o.lots == 1)
            .unwrap();
        let two = options
            .iter()
            .find(|o| o.gpu == "h100-sxm" && o.lots == 2)
            .unwrap();
        assert_eq!(one.per_gpu_bytes, 132 * GIB);
        assert_eq!(two.per_gpu_bytes, 67 * GIB);
        assert!(!one.fits && two.fits);
        assert_eq!(two.headroom_bytes, (81106i128 << 20) - (67i128 << 30));
        // 3 GPUs do not divide 64 heads and 8 KV heads.
        let three = options
            .iter()
            .find(|o| o.gpu == "h100-sxm" && o.lots == 3)
            .unwrap();
        assert_eq!(three.heads_divisible, Some(false));
        assert_eq!(two.heads_divisible, Some(true));
    }

    #[test]
    fn price_per_gpu_day_is_exact() {
        let c = Catalogue::embedded();
        let options = fit(&c, &inputs(1, 2));
        let b200 = options.iter().find(|o| o.gpu == "b200").unwrap();
        // 175200 cents for 2 GPUs x 7 days.
        assert_eq!(b200.price_per_gpu_day_cents.to_string(), "12514.2857");
        assert!(b200.example);
    }
}
