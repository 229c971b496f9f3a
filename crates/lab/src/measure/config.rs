//! The options of a measurement, checked once, and the model they describe.

use crate::dtype::DType;
use crate::measure::document::{Configuration, Layer, SyntheticModel};
use crate::workspaces::MemoryPolicy;

/// The options as the user gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeasureOptions {
    /// `cuda:N` or `cpu`.
    pub device: String,
    /// Batch size.
    pub batch: usize,
    /// Positions per sequence.
    pub context: usize,
    /// Model width.
    pub width: usize,
    /// Hidden width; `None` means `4 x width`.
    pub hidden: Option<usize>,
    /// Storage type.
    pub dtype: DType,
    /// Warm-up passes.
    pub warmup: usize,
    /// Timed warm passes.
    pub repeats: usize,
    /// Seed of weights and inputs.
    pub seed: u64,
    /// Whether float32 products may use TF32.
    pub allow_tf32: bool,
}

impl MeasureOptions {
    /// A run of the given shape with the command line's defaults for everything else (`hidden`
    /// 4 x width, one warm-up pass, two timed passes, seed 0, strict float32): what a device's
    /// own tests and a quick check need without repeating them.
    pub fn with_defaults(
        device: &str,
        batch: usize,
        context: usize,
        width: usize,
        dtype: DType,
    ) -> MeasureOptions {
        MeasureOptions {
            device: device.to_string(),
            batch,
            context,
            width,
            hidden: None,
            dtype,
            warmup: 1,
            repeats: 2,
            seed: 0,
            allow_tf32: false,
        }
    }
}

/// An option value the measurement cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A dimension or count of zero where at least one is needed.
    #[error("--{option} must be at least 1 (got 0)")]
    Zero {
        /// The option's name.
        option: &'static str,
    },
    /// More warm passes than a document holds.
    #[error(
        "--repeats {value} is more than {limit}, the most one run records; use at most {limit}"
    )]
    TooManyRepeats {
        /// The value given.
        value: usize,
        /// [`MAX_REPEATS`].
        limit: usize,
    },
    /// More warm-up passes than a run needs to reach a steady state.
    #[error(
        "--warmup {value} is more than {limit}: warm-up passes only bring the device to a steady \
         state; use at most {limit}"
    )]
    TooManyWarmup {
        /// The value given.
        value: usize,
        /// [`MAX_WARMUP`].
        limit: usize,
    },
    /// A dimension too large for the arithmetic or for any device.
    #[error(
        "--{option} {value} is too large: {what} would exceed {limit} elements; choose a smaller value"
    )]
    TooLarge {
        /// The option's name.
        option: &'static str,
        /// The value given.
        value: usize,
        /// What overflows.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
}

/// Most timed warm passes one run takes: each is a row in the document (about 1 KiB of JSON),
/// so this bounds the document at about 10 MiB and its memory with it.
pub const MAX_REPEATS: usize = 10_000;

/// Most warm-up passes one run takes (they are one row, timed together): a bound on the run's
/// time as `MAX_REPEATS` is on its document, so no option can keep a run going for years.
pub const MAX_WARMUP: usize = 10_000;

/// Largest element count of one tensor we accept: cuBLAS takes 32-bit dimensions and a 2^31
/// element bound keeps every index within `i32`, as the GPU kernels assume.
pub const MAX_TENSOR_ELEMENTS: u64 = (1 << 31) - 1;

/// The resolved plan of a run: the options plus every derived size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The options, resolved.
    pub options: MeasureOptions,
    /// Resolved hidden width.
    pub hidden: usize,
    /// Rows of every activation: `batch * context`.
    pub rows: usize,
}

impl Plan {
    /// Checks the options and resolves the derived sizes.
    pub fn new(options: MeasureOptions) -> Result<Plan, ConfigError> {
        for (option, value) in [
            ("batch", options.batch),
            ("context", options.context),
            ("width", options.width),
            ("repeats", options.repeats),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { option });
            }
        }
        if options.repeats > MAX_REPEATS {
            return Err(ConfigError::TooManyRepeats {
                value: options.repeats,
                limit: MAX_REPEATS,
            });
        }
        if options.warmup > MAX_WARMUP {
            return Err(ConfigError::TooManyWarmup {
                value: options.warmup,
                limit: MAX_WARMUP,
            });
        }
        if options.hidden == Some(0) {
            return Err(ConfigError::Zero { option: "hidden" });
        }
        let too_large = |option, value, what| ConfigError::TooLarge {
            option,
            value,
            what,
            limit: MAX_TENSOR_ELEMENTS,
        };
        let hidden = match options.hidden {
            Some(h) => h,
            None => options.width.checked_mul(4).ok_or(too_large(
                "width",
                options.width,
                "4 x width",
            ))?,
        };
        let rows = options.batch.checked_mul(options.context).ok_or(too_large(
            "context",
            options.context,
            "batch x context",
        ))?;
        let fits =
            |a: usize, b: usize| (a as u128) * (b as u128) <= u128::from(MAX_TENSOR_ELEMENTS);
        if !fits(rows, hidden) {
            let (option, value) = if options.hidden.is_some() {
                ("hidden", hidden)
            } else {
                ("width", options.width)
            };
            return Err(too_large(
                option,
                value,
                "the hidden activation [batch*context, hidden]",
            ));
        }
        if !fits(rows, options.width) {
            return Err(too_large(
                "context",
                options.context,
                "the input [batch*context, width]",
            ));
        }
        if !fits(options.width, hidden) {
            return Err(too_large(
                "width",
                options.width,
                "a weight [hidden, width]",
            ));
        }
        Ok(Plan {
            options,
            hidden,
            rows,
        })
    }

    /// Element count of every parameter tensor, in load order: w1, b1, w2, b2.
    pub fn parameter_shapes(&self) -> [(usize, usize); 4] {
        let (w, h) = (self.options.width, self.hidden);
        [(h, w), (1, h), (w, h), (1, w)]
    }

    /// The model's Linears as `(name, rows, in_features, out_features)`, in order.
    pub fn linears(&self) -> [(&'static str, usize, usize, usize); 2] {
        let (w, h) = (self.options.width, self.hidden);
        [("linear1", self.rows, w, h), ("linear2", self.rows, h, w)]
    }

    /// The `configuration` section of the document; `memory_policy` gets the path each Linear
    /// takes ([`MemoryPolicy::with_linear_paths`]).
    pub fn configuration(&self, math_mode: &str, memory_policy: MemoryPolicy) -> Configuration {
        let o = &self.options;
        let memory_policy = memory_policy.with_linear_paths(&self.linears(), o.dtype);
        Configuration {
            device: o.device.clone(),
            batch: o.batch,
            context: o.context,
            width: o.width,
            hidden: self.hidden,
            hidden_source: if o.hidden.is_some() {
                "--hidden".to_string()
            } else {
                "4 x width (default)".to_string()
            },
            dtype: o.dtype,
            warmup: o.warmup,
            repeats: o.repeats,
            seed: o.seed,
            allow_tf32: o.allow_tf32,
            math_mode: math_mode.to_string(),
            memory_policy,
        }
    }

    /// The `synthetic_model` section of the document.
    pub fn synthetic_model(&self) -> SyntheticModel {
        let o = &self.options;
        let (w, h) = (o.width as u64, self.hidden as u64);
        let linear = |name: &str, i: u64, out: u64| Layer {
            name: name.to_string(),
            kind: "linear".to_string(),
            in_features: i as usize,
            out_features: out as usize,
            parameters: i * out + out,
        };
        let layers = vec![
            linear("linear1", w, h),
            Layer {
                name: "gelu".to_string(),
                kind: "gelu".to_string(),
                in_features: h as usize,
                out_features: h as usize,
                parameters: 0,
            },
            linear("linear2", h, w),
        ];
        let parameter_count: u64 = layers.iter().map(|l| l.parameters).sum();
        SyntheticModel {
            description:
                "Linear(width -> hidden) -> GELU (exact erf) -> Linear(hidden -> width), with bias"
                    .to_string(),
            layers,
            parameter_count,
            parameter_bytes: parameter_count * o.dtype.size_bytes(),
            input_shape: vec![o.batch, o.context, o.width],
            hidden_shape: vec![o.batch, o.context, self.hidden],
            output_shape: vec![o.batch, o.context, o.width],
            dtype: o.dtype,
            forward_flops: 2 * 2 * (self.rows as u64) * w * h,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn options(
        batch: usize,
        context: usize,
        width: usize,
        dtype: DType,
    ) -> MeasureOptions {
        MeasureOptions::with_defaults("cpu", batch, context, width, dtype)
    }

    #[test]
    fn resolves_hidden_and_counts_parameters() {
        let plan = Plan::new(options(1, 16, 64, DType::Float32)).unwrap();
        assert_eq!(plan.hidden, 256);
        assert_eq!(plan.rows, 16);
        let model = plan.synthetic_model();
        // 64*256 + 256 + 256*64 + 64
        assert_eq!(model.parameter_count, 33_088);
        assert_eq!(model.parameter_bytes, 132_352);
        assert_eq!(model.forward_flops, 4 * 16 * 64 * 256);
    }

    #[test]
    fn refuses_zero_and_overflow() {
        let mut o = options(1, 16, 64, DType::Float32);
        o.batch = 0;
        assert_eq!(
            Plan::new(o).unwrap_err(),
            ConfigError::Zero { option: "batch" }
        );
        let mut o = options(1, 16, 64, DType::Float32);
        o.hidden = Some(0);
        assert!(Plan::new(o).is_err());
        let o = options(1 << 20, 1 << 20, 64, DType::Float32);
        let err = Plan::new(o).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
        let o = options(1, 1, usize::MAX, DType::Float32);
        assert!(Plan::new(o).is_err());
        let mut o = options(1, 16, 64, DType::Float32);
        o.repeats = MAX_REPEATS;
        assert!(Plan::new(o.clone()).is_ok());
        o.repeats = MAX_REPEATS + 1;
        assert_eq!(
            Plan::new(o).unwrap_err().to_string(),
            "--repeats 10001 is more than 10000, the most one run records; use at most 10000"
        );
        let mut o = options(1, 16, 64, DType::Float32);
        o.warmup = MAX_WARMUP;
        assert!(Plan::new(o.clone()).is_ok());
        o.warmup = usize::MAX;
        assert_eq!(
            Plan::new(o).unwrap_err(),
            ConfigError::TooManyWarmup {
                value: usize::MAX,
                limit: MAX_WARMUP
            }
        );
    }
}
