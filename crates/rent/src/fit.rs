//! Which catalogue packages hold a model: for every GPU and every lot count up to a number of
//! GPUs, the memory each GPU needs under a layout an engine runs (tensor parallel over heads the
//! degree divides, pipeline stages over the layers, [`crate::layout`]), against the memory a
//! CUDA/ROCm process sees on that GPU, with the price; with a model's geometry, the largest
//! context and batch each package holds ([`crate::capacity`]) and its speed ceilings
//! ([`crate::ceiling`]).
//!
//! [`fit`] keeps the plain even split of a byte count; [`fit_with`] takes a [`Plan`] (the
//! workload, per-GPU speeds, the tight threshold), and [`assess`] judges one [`Package`], so that
//! packages from elsewhere than the catalogue are judged by the same rules.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::Serialize;

use crate::capacity::{self, ContextLimit, StageBytes, Workload};
use crate::catalogue::{Catalogue, DURATIONS};
use crate::ceiling::{self, Ceilings, GpuSpeed};
use crate::engine::{self, Budget, EngineOptions, Serve, Shape};
use crate::layout::{self, Layout};
use crate::units::ratio_half_even;

/// The default per-GPU reserve in GiB: CUDA context, library workspaces, activations.
pub const DEFAULT_RESERVE_GIB: u32 = 2;

/// The default threshold under which a fitting package's headroom is marked tight, in GiB.
pub const DEFAULT_TIGHT_GIB: u32 = 1;

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

/// What [`fit_with`] knows beyond [`FitInputs`].
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The model as placed on GPUs (`None`: the plain even split of `model_bytes`).
    pub workload: Option<Workload>,
    /// Per catalogue slug, the figures the ceilings use.
    pub speeds: BTreeMap<String, GpuSpeed>,
    /// Per catalogue slug, whether iteragpu's native engine (CUDA) can measure it.
    pub native_engine: BTreeMap<String, bool>,
    /// A fitting package with less headroom than this is tight.
    pub tight_bytes: u128,
    /// The serving engine whose budget decides (`None`, or `Serve::None`: the raw figure).
    pub engine: Option<EnginePlan>,
}

/// The engine's options and what its budget needs of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct EnginePlan {
    /// The engine and its options.
    pub options: EngineOptions,
    /// The model's shape, for the activation estimate.
    pub shape: Shape,
    /// A fitting package whose KV pool has less than this share of the card to spare is tight.
    pub tight_share: Decimal,
    /// MXFP4 experts (gpt-oss): vLLM pads them per GPU architecture, so a GPU holds more than
    /// the checkpoint's bytes.
    pub mxfp4: Option<engine::Mxfp4Experts>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            workload: None,
            speeds: BTreeMap::new(),
            native_engine: BTreeMap::new(),
            tight_bytes: u128::from(DEFAULT_TIGHT_GIB) << 30,
            engine: None,
        }
    }
}

/// One package and whether the model fits on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitOption {
    /// GPU slug.
    pub gpu: String,
    /// Display name.
    pub model: String,
    /// Lots rented.
    pub lots: u64,
    /// Machines: one per lot, the catalogue promising no more (two lots are two machines).
    pub machines: u64,
    /// The layout spans machines: its tensor-parallel or pipeline traffic crosses the fleet's
    /// network, which a lot does not promise.
    pub needs_network: bool,
    /// lots x GPUs per lot: the GPUs the model is split over (tensor parallel x pipeline
    /// stages, see `layout`).
    pub total_gpus: u64,
    /// Package duration.
    pub days: u32,
    /// The busiest GPU's need under `layout`, the reserve included (without a geometry, or when
    /// no layout runs: ceil(model bytes / total_gpus) + the reserve).
    pub per_gpu_bytes: u128,
    /// usable MiB x 2^20.
    pub usable_bytes_per_gpu: u128,
    /// A layout runs and per_gpu_bytes <= usable_bytes_per_gpu.
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
    /// How the model is split: the largest tensor-parallel degree that fits, else the layout
    /// that needs least (null without a geometry, or when none runs).
    pub layout: Option<Layout>,
    /// Why no layout runs on this many GPUs (null when one does).
    pub layout_problem: Option<String>,
    /// Fits with less headroom than the tight threshold.
    pub tight: bool,
    /// Whether iteragpu's native engine can measure this GPU (it is CUDA only; null: unknown).
    pub native_engine: Option<bool>,
    /// The largest context per sequence at the given batch that fits per GPU (0: not one
    /// token), capped at max_position_embeddings.
    pub largest_context: Option<u64>,
    /// What bounds it.
    pub largest_context_limit: Option<ContextLimit>,
    /// The largest batch at the given context that fits per GPU (with --context).
    pub largest_batch: Option<u64>,
    /// Decode and prefill ceilings, for a package that fits: roofline bounds, not predictions.
    pub ceilings: Option<Ceilings>,
    /// The serving engine's budget on the busiest GPU, term by term (null with `--serve none`
    /// or without a model geometry).
    pub budget: Option<Budget>,
    /// Why the engine would not start, or why it is tight (null when it simply fits).
    pub reason: Option<String>,
}

/// One package to judge: a catalogue row x a lot count, or an offer from elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// GPU slug (the key of the plan's speeds).
    pub gpu: String,
    /// Display name.
    pub model: String,
    /// Lots rented.
    pub lots: u64,
    /// GPUs in all.
    pub gpus: u64,
    /// Duration.
    pub days: u32,
    /// Usable memory of one GPU, MiB.
    pub usable_memory_mib: u64,
    /// The price of the whole package, cents.
    pub total_price_cents: u64,
    /// ISO 4217 code.
    pub currency: String,
    /// The price is an example.
    pub example: bool,
    /// Where the row comes from.
    pub source: String,
}

/// How rows are ordered; fitting rows always come first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sort {
    /// The package price, cheapest first.
    #[default]
    Price,
    /// The price per million decoded tokens at the ceiling, lowest first (rows without a
    /// ceiling last).
    PricePerMtok,
    /// The headroom per GPU, largest first.
    Headroom,
}

impl Sort {
    /// The names `--sort` takes.
    pub const NAMES: [&'static str; 3] = ["price", "price-per-mtok", "headroom"];

    /// Reads a `--sort` value.
    pub fn parse(text: &str) -> Option<Sort> {
        match text.trim() {
            "price" => Some(Sort::Price),
            "price-per-mtok" => Some(Sort::PricePerMtok),
            "headroom" => Some(Sort::Headroom),
            _ => None,
        }
    }
}

/// Which rows to keep, in which order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// Only packages that fit.
    pub fits_only: bool,
    /// Only these GPU slugs.
    pub gpus: Option<Vec<String>>,
    /// The order.
    pub sort: Sort,
    /// At most this many rows.
    pub limit: Option<usize>,
}

/// The layout chosen for a package and its stages.
struct Placement {
    layout: Option<Layout>,
    problem: Option<String>,
    stages: Vec<StageBytes>,
    need: u128,
    budget: Option<(Budget, engine::Verdict)>,
}

fn place(p: &Package, inputs: &FitInputs, plan: &Plan) -> Placement {
    let gpus = p.gpus.max(1);
    let usable = u128::from(p.usable_memory_mib) << 20;
    let even = inputs.model_bytes.div_ceil(u128::from(gpus)) + inputs.reserve_bytes;
    let Some(w) = &plan.workload else {
        return Placement {
            layout: None,
            problem: None,
            stages: Vec::new(),
            need: even,
            budget: None,
        };
    };
    let Some(g) = &w.geometry else {
        // A bare parameter count: split evenly, no KV cache.
        let n = u128::from(gpus);
        return Placement {
            layout: None,
            problem: None,
            stages: vec![StageBytes {
                layers: 0,
                full_layers: 0,
                parameter_bytes: w.parameter_bytes.div_ceil(n),
                weight_bytes: w.weight_bytes.div_ceil(n),
                full_kv_bytes_per_token: 0,
                sliding_kv_bytes_per_token: 0,
                input_embedding_bytes: 0,
            }],
            need: even,
            budget: None,
        };
    };
    let window = capacity::window(w);
    match layout::layouts(&g.heads, gpus) {
        Err(problem) => Placement {
            layout: None,
            problem: Some(problem),
            stages: Vec::new(),
            need: even,
            budget: None,
        },
        Ok(all) => {
            if let Some(e) = plan
                .engine
                .as_ref()
                .filter(|e| e.options.serve != Serve::None)
            {
                return place_engine(p, w, all, e, inputs.reserve_bytes, even);
            }
            let mut best: Option<Placement> = None;
            for l in all {
                let stages = capacity::stages(w, &l);
                let need =
                    capacity::need(&stages, inputs.reserve_bytes, w.context, w.batch, window);
                let candidate = Placement {
                    layout: Some(l),
                    problem: None,
                    stages,
                    need,
                    budget: None,
                };
                if need <= usable {
                    return candidate;
                }
                if best.as_ref().is_none_or(|b| need < b.need) {
                    best = Some(candidate);
                }
            }
            // `layouts` returns at least one layout.
            best.unwrap_or(Placement {
                layout: None,
                problem: None,
                stages: Vec::new(),
                need: even,
                budget: None,
            })
        }
    }
}

/// The engine's budget of every stage of a layout, judged; the stage that fares worst speaks
/// for the layout (a failing one first, then the one with least to spare).
fn judge_layout(
    p: &Package,
    w: &Workload,
    l: &Layout,
    stages: &[StageBytes],
    e: &EnginePlan,
    reserve: u128,
) -> (Budget, engine::Verdict, u128) {
    let usable = u128::from(p.usable_memory_mib) << 20;
    let a100 = p.gpu.contains("a100");
    let count = stages.len();
    let mut worst: Option<(Budget, engine::Verdict, u128)> = None;
    for (i, s) in stages.iter().enumerate() {
        let per_token = s.full_kv_bytes_per_token + s.sliding_kv_bytes_per_token;
        // The weights as the engine loads them: MXFP4 experts padded for the GPU's kernels.
        let padding = match (&e.mxfp4, e.options.serve) {
            (Some(m), Serve::Vllm) => engine::mxfp4_padding_bytes(
                m,
                s.layers,
                l.tensor_parallel,
                &format!("{} {}", p.gpu, p.model),
            ),
            _ => 0,
        };
        let b = engine::budget(
            &e.options,
            &e.shape,
            usable,
            a100,
            s.parameter_bytes + padding,
            per_token,
            l.tensor_parallel,
            i + 1 == count,
            reserve,
        );
        let v = engine::judge(&b, w.context, w.batch, e.tight_share);
        let kv = w.context.map_or(0, |c| {
            b.blocks_for(c, w.batch) * per_token * u128::from(b.block_tokens)
        });
        let need = b.before_kv() + kv;
        let rank = |v: &engine::Verdict, b: &Budget| (v.fits, !v.tight, b.kv_pool_bytes);
        let replace = match &worst {
            None => true,
            Some((wb, wv, _)) => rank(&v, &b) < rank(wv, wb),
        };
        if replace {
            worst = Some((b, v, need));
        }
    }
    // `layouts` gives at least one stage.
    worst.unwrap_or_else(|| {
        let b = engine::budget(&e.options, &e.shape, usable, a100, 0, 0, 1, true, reserve);
        let v = engine::judge(&b, w.context, w.batch, e.tight_share);
        (b, v, 0)
    })
}

fn place_engine(
    p: &Package,
    w: &Workload,
    all: Vec<Layout>,
    e: &EnginePlan,
    reserve: u128,
    even: u128,
) -> Placement {
    let mut best: Option<Placement> = None;
    for l in all {
        let stages = capacity::stages(w, &l);
        let (b, v, need) = judge_layout(p, w, &l, &stages, e, reserve);
        let fits = v.fits;
        let candidate = Placement {
            layout: Some(l),
            problem: None,
            stages,
            need,
            budget: Some((b, v)),
        };
        if fits {
            return candidate;
        }
        let pool = |c: &Placement| {
            c.budget
                .as_ref()
                .map_or(i128::MIN, |(b, _)| b.kv_pool_bytes)
        };
        if best.as_ref().is_none_or(|x| pool(&candidate) > pool(x)) {
            best = Some(candidate);
        }
    }
    best.unwrap_or(Placement {
        layout: None,
        problem: None,
        stages: Vec::new(),
        need: even,
        budget: None,
    })
}

/// Judges one package.
pub fn assess(p: &Package, inputs: &FitInputs, plan: &Plan) -> FitOption {
    let gpus = p.gpus.max(1);
    let usable = u128::from(p.usable_memory_mib) << 20;
    let placed = place(p, inputs, plan);
    let need = placed.need;
    // Under an engine, the budget (total x utilisation) is what the need is held against.
    let against = placed
        .budget
        .as_ref()
        .map_or(usable, |(b, _)| b.budget_bytes);
    let headroom =
        i128::try_from(against).unwrap_or(i128::MAX) - i128::try_from(need).unwrap_or(i128::MAX);
    let runs = placed.problem.is_none();
    let fits = match &placed.budget {
        Some((_, v)) => runs && v.fits,
        None => runs && need <= usable,
    };
    let geometry = plan.workload.as_ref().and_then(|w| w.geometry.as_ref());
    let window = plan.workload.as_ref().and_then(capacity::window);
    let (largest_context, largest_context_limit, largest_batch) =
        match (plan.workload.as_ref(), geometry, placed.layout.is_some()) {
            (Some(w), Some(g), true) if placed.budget.is_some() => {
                let b = placed.budget.as_ref().map(|(b, _)| b);
                let tokens = b.map_or(0, |b| engine::largest_context(b, w.batch));
                let (c, limit) = match g.max_positions {
                    Some(m) if tokens > m => (m, ContextLimit::MaxPositionEmbeddings),
                    _ => (tokens, ContextLimit::Memory),
                };
                let batch = w
                    .context
                    .map(|ctx| b.map_or(0, |b| engine::largest_batch(b, ctx)));
                (Some(c), Some(limit), batch)
            }
            (Some(w), Some(g), true) => {
                let c = capacity::largest_context(
                    &placed.stages,
                    inputs.reserve_bytes,
                    usable,
                    w.batch,
                    window,
                    g.max_positions,
                );
                let b = w.context.map(|ctx| {
                    capacity::largest_batch(
                        &placed.stages,
                        inputs.reserve_bytes,
                        usable,
                        ctx,
                        window,
                    )
                });
                (c.tokens, Some(c.limit), b)
            }
            _ => (None, None, None),
        };
    let ceilings = match (&plan.workload, plan.speeds.get(&p.gpu)) {
        (Some(w), Some(speed)) if fits && !placed.stages.is_empty() => Some(ceiling::ceilings(
            w,
            &placed.stages,
            window,
            gpus,
            speed,
            p.total_price_cents,
            p.days,
        )),
        _ => None,
    };
    FitOption {
        gpu: p.gpu.clone(),
        model: p.model.clone(),
        lots: p.lots,
        machines: p.lots.max(1),
        needs_network: p.lots > 1 && gpus > 1,
        total_gpus: gpus,
        days: p.days,
        per_gpu_bytes: need,
        usable_bytes_per_gpu: usable,
        fits,
        headroom_bytes: headroom,
        heads_divisible: inputs.heads.map(|(h, kv)| h % gpus == 0 && kv % gpus == 0),
        total_price_cents: p.total_price_cents,
        price_per_gpu_day_cents: ratio_half_even(
            u128::from(p.total_price_cents),
            u128::from(gpus) * u128::from(p.days),
        )
        .unwrap_or_default(),
        currency: p.currency.clone(),
        example: p.example,
        source: p.source.clone(),
        layout: placed.layout,
        layout_problem: placed.problem,
        tight: match &placed.budget {
            Some((_, v)) => fits && v.tight,
            None => fits && headroom < i128::try_from(plan.tight_bytes).unwrap_or(i128::MAX),
        },
        native_engine: plan.native_engine.get(&p.gpu).copied(),
        largest_context,
        largest_context_limit,
        largest_batch,
        ceilings,
        reason: placed
            .budget
            .as_ref()
            .map(|(_, v)| v.reason.clone())
            .filter(|r| !r.is_empty()),
        budget: placed.budget.map(|(b, _)| b),
    }
}

/// Every package of `catalogue` up to `inputs.max_gpus` GPUs, cheapest fitting first, then the
/// packages that do not fit, cheapest first: the model's bytes split evenly over each package's
/// GPUs.
pub fn fit(catalogue: &Catalogue, inputs: &FitInputs) -> Vec<FitOption> {
    fit_with(catalogue, inputs, &Plan::default())
}

/// [`fit`] under a [`Plan`]: layouts, largest context and batch, ceilings.
pub fn fit_with(catalogue: &Catalogue, inputs: &FitInputs, plan: &Plan) -> Vec<FitOption> {
    let mut out = Vec::new();
    for t in catalogue.rows() {
        if inputs.days.is_some_and(|d| d != t.days) || !DURATIONS.contains(&t.days) {
            continue;
        }
        let per_lot = u64::from(t.gpus_per_lot);
        let mut lots = 1u64;
        while per_lot * lots <= u64::from(inputs.max_gpus) {
            let Some(total_price_cents) = t.price_cents.checked_mul(lots) else {
                break;
            };
            let package = Package {
                gpu: t.gpu.clone(),
                model: t.model.clone(),
                lots,
                gpus: per_lot * lots,
                days: t.days,
                usable_memory_mib: t.usable_memory_mib,
                total_price_cents,
                currency: t.currency.clone(),
                example: t.is_example(),
                source: t.source.clone(),
            };
            out.push(assess(&package, inputs, plan));
            lots += 1;
        }
    }
    sort(&mut out, Sort::Price);
    out
}

/// Orders rows: fitting first, then by `by` (stable: equal rows keep catalogue order).
pub fn sort(rows: &mut [FitOption], by: Sort) {
    match by {
        Sort::Price => rows.sort_by_key(|o| (!o.fits, o.total_price_cents, o.total_gpus)),
        Sort::PricePerMtok => rows.sort_by_key(|o| {
            let per = o
                .ceilings
                .as_ref()
                .and_then(|c| c.decode_price_per_mtok_cents);
            (
                !o.fits,
                per.is_none(),
                per.unwrap_or_default(),
                o.total_price_cents,
                o.total_gpus,
            )
        }),
        Sort::Headroom => rows.sort_by_key(|o| {
            (
                !o.fits,
                std::cmp::Reverse(o.headroom_bytes),
                o.total_price_cents,
            )
        }),
    }
}

/// The rows `selection` keeps, in its order.
pub fn select(mut rows: Vec<FitOption>, selection: &Selection) -> Vec<FitOption> {
    rows.retain(|o| {
        (!selection.fits_only || o.fits)
            && selection
                .gpus
                .as_ref()
                .is_none_or(|list| list.contains(&o.gpu))
    });
    sort(&mut rows, selection.sort);
    if let Some(n) = selection.limit {
        rows.truncate(n);
    }
    rows
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

    /// Mixtral 8x7B's shape, in bfloat16, at 32768 x 8.
    fn mixtral_plan(tight_gib: u128) -> (FitInputs, Plan) {
        use crate::capacity::{Embedding, Geometry};
        use crate::layout::Heads;
        let weights = 46_702_792_704u128 * 2;
        let kv = 2 * 32 * 8 * 128 * 2 * 32_768 * 8u128;
        let workload = Workload {
            parameters: 46_702_792_704,
            active_parameters: 12_879_925_248,
            experts: Some((8, 2)),
            parameter_bytes: weights,
            weight_bytes: weights,
            geometry: Some(Geometry {
                heads: Heads {
                    layers: 32,
                    heads: 32,
                    kv_heads: 8,
                },
                head_dim: 128,
                sliding: None,
                latent_kv: None,
                kv_bits: 16,
                embedding: Some(Embedding {
                    vocab: 32_000,
                    hidden: 4096,
                    tied: false,
                }),
                max_positions: Some(32_768),
            }),
            context: Some(32_768),
            batch: 8,
        };
        let speeds = Catalogue::embedded()
            .gpus()
            .iter()
            .filter_map(|g| {
                crate::ceiling::from_datasheet(
                    &crate::datasheet::Datasheet::embedded(),
                    g,
                    16,
                    Some("bfloat16"),
                )
                .map(|s| (g.to_string(), s))
            })
            .collect();
        (
            FitInputs {
                model_bytes: weights + kv,
                reserve_bytes: 2 * GIB,
                max_gpus: 8,
                days: Some(7),
                heads: Some((32, 8)),
            },
            Plan {
                workload: Some(workload),
                speeds,
                native_engine: BTreeMap::new(),
                tight_bytes: tight_gib * GIB,
                engine: None,
            },
        )
    }

    #[test]
    fn a_gpu_count_the_heads_refuse_runs_as_pipeline_stages() {
        let (inputs, plan) = mixtral_plan(2);
        let rows = fit_with(&Catalogue::embedded(), &inputs, &plan);
        for o in &rows {
            if let Some(l) = &o.layout {
                assert_eq!(l.tensor_parallel * l.pipeline_parallel, o.total_gpus);
                assert!(32 % l.tensor_parallel == 0, "{o:?}");
            }
            assert_eq!(o.tight, o.fits && o.headroom_bytes < 2 << 30);
            // Ceilings only where the model fits.
            assert_eq!(o.ceilings.is_some(), o.fits);
        }
        let three = rows
            .iter()
            .find(|o| o.gpu == "rtx-a6000" && o.total_gpus == 3)
            .unwrap();
        let l = three.layout.as_ref().unwrap();
        assert_eq!((l.tensor_parallel, l.pipeline_parallel), (1, 3));
        assert_eq!(three.heads_divisible, Some(false));
        // Stage 0: 11 of 32 layers' share of the body and the embedding; its KV cache of 11
        // layers x 8 KV heads x 128 x 2 x 2 bytes x 32768 x 8.
        let body = 46_702_792_704u128 - 2 * 32_000 * 4096;
        let weights = (2 * (body * 11 + 32_000 * 4096 * 32)).div_ceil(32);
        let kv = 11 * 8 * 128 * 2 * 2 * 32_768 * 8u128;
        assert_eq!(three.per_gpu_bytes, weights + kv + 2 * GIB);
        // The decode ceiling: 3 micro-batches of 8/3 sequences each reading their experts.
        let c = three.ceilings.as_ref().unwrap();
        assert!(c.decode_tokens_per_s > 0.0);
        assert!(c.decode_experts_read_per_layer.unwrap() > 2.0);
    }

    #[test]
    fn selection_filters_orders_and_limits() {
        let (inputs, plan) = mixtral_plan(1);
        let rows = fit_with(&Catalogue::embedded(), &inputs, &plan);
        let five = select(
            rows.clone(),
            &Selection {
                fits_only: true,
                limit: Some(5),
                ..Selection::default()
            },
        );
        assert_eq!(five.len(), 5);
        assert!(five.iter().all(|o| o.fits));
        let some = select(
            rows.clone(),
            &Selection {
                gpus: Some(vec!["l4".to_string(), "h200".to_string()]),
                sort: Sort::Headroom,
                ..Selection::default()
            },
        );
        assert!(some.iter().all(|o| o.gpu == "l4" || o.gpu == "h200"));
        let fitting: Vec<i128> = some
            .iter()
            .filter(|o| o.fits)
            .map(|o| o.headroom_bytes)
            .collect();
        assert!(fitting.windows(2).all(|w| w[0] >= w[1]));
        let cheap = select(
            rows,
            &Selection {
                fits_only: true,
                sort: Sort::PricePerMtok,
                ..Selection::default()
            },
        );
        let per: Vec<Decimal> = cheap
            .iter()
            .map(|o| {
                o.ceilings
                    .as_ref()
                    .unwrap()
                    .decode_price_per_mtok_cents
                    .unwrap()
            })
            .collect();
        assert!(per.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(Sort::parse("price-per-mtok"), Some(Sort::PricePerMtok));
        assert_eq!(Sort::parse("cheap"), None);
    }

    #[test]
    fn without_a_layout_a_package_does_not_fit_and_says_why() {
        let (inputs, mut plan) = mixtral_plan(1);
        // Two layers: three GPUs can be neither tensor parallel (3 does not divide 32 heads)
        // nor three stages.
        if let Some(g) = plan.workload.as_mut().and_then(|w| w.geometry.as_mut()) {
            g.heads.layers = 2;
        }
        let rows = fit_with(&Catalogue::embedded(), &inputs, &plan);
        let three = rows
            .iter()
            .find(|o| o.gpu == "mi325x" && o.total_gpus == 3)
            .unwrap();
        assert!(!three.fits && three.layout.is_none());
        assert!(
            three
                .layout_problem
                .as_deref()
                .unwrap()
                .contains("3 does not divide the 32 attention heads")
        );
        assert_eq!(
            three.per_gpu_bytes,
            inputs.model_bytes.div_ceil(3) + 2 * GIB
        );
    }
}
