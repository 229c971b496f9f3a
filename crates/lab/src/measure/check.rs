//! The numerical check: a sample of output rows recomputed in float64 on the host from the same
//! weights and inputs, so a wrong kernel, a wrong GEMM mapping or a silent TF32 shows up as a
//! failed run rather than as a fast one.

use crate::dtype::DType;
use crate::measure::config::Plan;
use crate::measure::document::Check;
use crate::measure::synthetic::{
    STREAM_B1, STREAM_B2, STREAM_W1, STREAM_W2, input_value, parameter_value,
};

/// The parameters as the host built them, already rounded to the dtype: exactly what the device
/// holds after the upload.
#[derive(Debug, Clone, PartialEq)]
pub struct HostModel {
    params: [Vec<f32>; 4],
}

impl HostModel {
    /// Builds w1, b1, w2, b2 with PyTorch's `nn.Linear` bounds from the plan's seed, using every
    /// core (large models have hundreds of millions of parameters).
    ///
    /// The memory is obtained with a fallible allocation: a shortage is an error (`Err` with the
    /// bytes asked for), never an abort.
    pub fn build(plan: &Plan) -> Result<HostModel, u64> {
        let o = &plan.options;
        let (w, h) = (o.width, plan.hidden);
        let spec = [
            (STREAM_W1, w, h * w),
            (STREAM_B1, w, h),
            (STREAM_W2, h, w * h),
            (STREAM_B2, h, w),
        ];
        let mut params: [Vec<f32>; 4] = Default::default();
        for (p, (_, _, len)) in params.iter_mut().zip(spec) {
            p.try_reserve_exact(len).map_err(|_| len as u64 * 4)?;
        }
        for (p, (stream, fan_in, len)) in params.iter_mut().zip(spec) {
            p.resize(len, 0.0);
            generate(p, o.seed, stream, fan_in, o.dtype);
        }
        Ok(HostModel { params })
    }

    /// Parameter `i` in load order (w1, b1, w2, b2), row-major.
    pub fn parameter(&self, i: usize) -> &[f32] {
        &self.params[i]
    }
}

fn generate(values: &mut [f32], seed: u64, stream: u64, fan_in: usize, dtype: DType) {
    let len = values.len();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = len.div_ceil(threads).max(1 << 16);
    if len <= chunk {
        for (i, v) in values.iter_mut().enumerate() {
            *v = dtype.round(parameter_value(seed, stream, fan_in, i as u64));
        }
        return;
    }
    let fill = move |c: usize, part: &mut [f32]| {
        let start = (c * chunk) as u64;
        for (i, v) in part.iter_mut().enumerate() {
            *v = dtype.round(parameter_value(seed, stream, fan_in, start + i as u64));
        }
    };
    std::thread::scope(|scope| {
        for (c, part) in values.chunks_mut(chunk).enumerate() {
            // A thread that cannot be started (no memory for its stack) leaves its part to
            // this one: the values are the same either way.
            let (tx, rx) = std::sync::mpsc::channel::<&mut [f32]>();
            if std::thread::Builder::new()
                .spawn_scoped(scope, move || {
                    if let Ok(part) = rx.recv() {
                        fill(c, part);
                    }
                })
                .is_ok()
            {
                let _ = tx.send(part);
            } else {
                fill(c, part);
            }
        }
    });
}

/// The output rows the check recomputes: the first, the last and evenly spread ones between,
/// as many as keep the float64 work near two billion operations (at least two, at most eight).
pub fn sample_rows(plan: &Plan) -> Vec<usize> {
    let per_row = 4 * plan.options.width as u64 * plan.hidden as u64;
    let budget = (2_000_000_000 / per_row.max(1)).clamp(2, 8) as usize;
    let n = budget.min(plan.rows);
    if n <= 1 {
        return vec![0];
    }
    let mut rows: Vec<usize> = (0..n).map(|i| i * (plan.rows - 1) / (n - 1)).collect();
    rows.dedup();
    rows
}

/// The bound on the normwise relative error for the dtype and math mode. Float32 accumulates
/// rounding of order 1e-7 per product; TF32 and the 16-bit types round inputs and intermediates
/// to 10 or fewer mantissa bits.
pub fn bound(dtype: DType, allow_tf32: bool) -> f64 {
    match (dtype, allow_tf32) {
        (DType::Float32, false) => 1e-5,
        _ => 1e-2,
    }
}

/// `0.5 x (1 + erf(x / sqrt 2))` in float64.
pub fn gelu64(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// Recomputes `rows` in float64 and compares them with the device's values (`device_rows` holds
/// the rows one after another).
pub fn compare(plan: &Plan, host: &HostModel, rows: &[usize], device_rows: &[f32]) -> Check {
    let o = &plan.options;
    let (w, h) = (o.width, plan.hidden);
    let (w1, b1, w2, b2) = (
        host.parameter(0),
        host.parameter(1),
        host.parameter(2),
        host.parameter(3),
    );
    let mut max_abs_error = 0f64;
    let mut max_ref = 0f64;
    let mut finite = device_rows.len() == rows.len() * w;
    let mut x = vec![0f64; w];
    let mut g = vec![0f64; h];
    for (n, &r) in rows.iter().enumerate() {
        for (j, xj) in x.iter_mut().enumerate() {
            *xj = f64::from(o.dtype.round(input_value(o.seed, (r * w + j) as u64)));
        }
        for (i, gi) in g.iter_mut().enumerate() {
            let row = &w1[i * w..(i + 1) * w];
            let dot: f64 = row.iter().zip(&x).map(|(&a, &b)| f64::from(a) * b).sum();
            *gi = gelu64(dot + f64::from(b1[i]));
        }
        for k in 0..w {
            let row = &w2[k * h..(k + 1) * h];
            let dot: f64 = row.iter().zip(&g).map(|(&a, &b)| f64::from(a) * b).sum();
            let reference = dot + f64::from(b2[k]);
            let got = device_rows
                .get(n * w + k)
                .copied()
                .map_or(f64::NAN, f64::from);
            finite &= got.is_finite();
            max_abs_error = max_abs_error.max((got - reference).abs());
            max_ref = max_ref.max(reference.abs());
        }
    }
    let relative_error = if max_ref > 0.0 {
        max_abs_error / max_ref
    } else {
        max_abs_error
    };
    let bound = bound(o.dtype, o.allow_tf32);
    Check {
        method: "output rows recomputed in float64 on the host from the same dtype-rounded weights and inputs; normwise relative error max|device - reference| / max|reference|".to_string(),
        rows: rows.to_vec(),
        max_abs_error,
        relative_error,
        bound,
        passed: finite && relative_error.is_finite() && relative_error <= bound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::config::tests::options;

    #[test]
    fn rows_cover_first_and_last() {
        let plan = Plan::new(options(2, 128, 1024, DType::Float32)).unwrap();
        let rows = sample_rows(&plan);
        assert_eq!(rows.first(), Some(&0));
        assert_eq!(rows.last(), Some(&255));
        assert!(rows.len() >= 2 && rows.len() <= 8);
        let single = Plan::new(options(1, 1, 8, DType::Float32)).unwrap();
        assert_eq!(sample_rows(&single), vec![0]);
    }

    #[test]
    fn gelu_matches_known_values() {
        assert_eq!(gelu64(0.0), 0.0);
        assert!((gelu64(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((gelu64(-1.0) + 0.158_655_253_931_457_05).abs() < 1e-15);
    }

    #[test]
    fn a_wrong_output_fails_and_a_right_one_passes() {
        let plan = Plan::new(options(1, 4, 16, DType::Float32)).unwrap();
        let host = HostModel::build(&plan).unwrap();
        let rows = sample_rows(&plan);
        // Reference rows rounded to f32 pass the float32 bound.
        let exact = reference_rows(&plan, &host, &rows);
        assert!(compare(&plan, &host, &rows, &exact).passed);
        let mut wrong = exact.clone();
        wrong[3] += 0.05;
        let c = compare(&plan, &host, &rows, &wrong);
        assert!(!c.passed && c.relative_error > 1e-5);
        let mut nan = exact;
        nan[0] = f32::NAN;
        assert!(!compare(&plan, &host, &rows, &nan).passed);
        assert!(!compare(&plan, &host, &rows, &[]).passed);
    }

    #[allow(clippy::needless_range_loop)] // index loops keep this reference obviously independent
    fn reference_rows(plan: &Plan, host: &HostModel, rows: &[usize]) -> Vec<f32> {
        // Independent of `compare`: a straightforward per-element loop.
        let (w, h, seed) = (plan.options.width, plan.hidden, plan.options.seed);
        let mut out = Vec::new();
        for &r in rows {
            let x: Vec<f64> = (0..w)
                .map(|j| f64::from(input_value(seed, (r * w + j) as u64)))
                .collect();
            let g: Vec<f64> = (0..h)
                .map(|i| {
                    let mut s = f64::from(host.parameter(1)[i]);
                    for j in 0..w {
                        s += f64::from(host.parameter(0)[i * w + j]) * x[j];
                    }
                    gelu64(s)
                })
                .collect();
            for k in 0..w {
                let mut s = f64::from(host.parameter(3)[k]);
                for i in 0..h {
                    s += f64::from(host.parameter(2)[k * h + i]) * g[i];
                }
                out.push(s as f32);
            }
        }
        out
    }

    #[test]
    fn host_model_is_rounded_and_seeded() {
        let plan = Plan::new(options(1, 1, 8, DType::Bfloat16)).unwrap();
        let a = HostModel::build(&plan).unwrap();
        assert_eq!(a, HostModel::build(&plan).unwrap());
        for v in a.parameter(0) {
            assert_eq!(*v, DType::Bfloat16.round(*v));
        }
        assert_eq!(a.parameter(0).len(), 32 * 8);
        assert_eq!(a.parameter(3).len(), 8);
    }
}
