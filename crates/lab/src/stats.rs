//! Timing statistics: the median of repeated timings, their spread, which samples stand out, and
//! which member of a lot of GPUs is slower than the rest.
//!
//! Timed copies and products are noisy in one direction: a sample is slowed by a clock ramp, a
//! page fault or another process, rarely sped up. So every figure is the *median* of its samples
//! (robust to a few slow ones), the spread is reported beside it so a reader can judge the noise,
//! and outliers are named with the median absolute deviation (MAD), which a few bad samples do not
//! inflate the way they inflate a standard deviation.

use serde::{Deserialize, Serialize};

/// The scale that makes the MAD of normally distributed samples estimate their standard
/// deviation (1 / Φ⁻¹(3/4)).
pub const MAD_TO_SIGMA: f64 = 1.482_602_218_505_602;

/// A sample is an outlier when it lies more than this many scaled MADs from the median (the usual
/// robust rule; 3.5 is the threshold Iglewicz and Hoaglin recommend for the modified z-score).
pub const OUTLIER_MADS: f64 = 3.5;

/// The median of finite values (NaN and infinities are left out); `None` when none are left.
/// The middle two are averaged for an even count.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        return None;
    }
    finite.sort_by(f64::total_cmp);
    let n = finite.len();
    Some(if n % 2 == 1 {
        finite[n / 2]
    } else {
        (finite[n / 2 - 1] + finite[n / 2]) / 2.0
    })
}

/// The median absolute deviation from the median.
pub fn mad(values: &[f64]) -> Option<f64> {
    let m = median(values)?;
    let deviations: Vec<f64> = values
        .iter()
        .filter(|v| v.is_finite())
        .map(|v| (v - m).abs())
        .collect();
    median(&deviations)
}

/// Indices of the samples further than [`OUTLIER_MADS`] scaled MADs from the median. When more
/// than half the samples are equal the MAD is 0 and every sample that differs from the median is
/// an outlier (a constant series with one slow sample names that sample).
pub fn outliers(values: &[f64]) -> Vec<usize> {
    let (Some(m), Some(d)) = (median(values), mad(values)) else {
        return Vec::new();
    };
    let limit = OUTLIER_MADS * MAD_TO_SIGMA * d;
    values
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_finite() || (*v - m).abs() > limit)
        .map(|(i, _)| i)
        .collect()
}

/// What a series of timed samples says: its median and how far the samples spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Samples taken.
    pub samples: usize,
    /// Their median: the figure every derived rate uses.
    pub median: f64,
    /// The smallest sample.
    pub min: f64,
    /// The largest sample.
    pub max: f64,
    /// Median absolute deviation from the median.
    pub mad: f64,
    /// (max - min) / median: 0 for identical samples.
    pub relative_spread: f64,
    /// Samples beyond [`OUTLIER_MADS`] scaled MADs from the median (kept: the median is robust).
    pub outliers: usize,
}

impl Summary {
    /// The summary of finite, positive samples; `None` when there is none.
    pub fn of(values: &[f64]) -> Option<Summary> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let median = median(&finite)?;
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Summary {
            samples: finite.len(),
            median,
            min,
            max,
            mad: mad(&finite).unwrap_or(0.0),
            relative_spread: if median > 0.0 {
                (max - min) / median
            } else {
                0.0
            },
            outliers: outliers(&finite).len(),
        })
    }
}

/// A member of a lot whose figure is below the rest of the lot.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LotOutlier {
    /// Its position in the values given.
    pub index: usize,
    /// Its figure.
    pub value: f64,
    /// The median of every other member's figure.
    pub median_of_others: f64,
    /// How far below, in percent of `median_of_others`.
    pub percent_below: f64,
}

/// The members whose figure (higher is better) is more than `tolerance_percent` below the median
/// of the *other* members. Comparing each with the others, not with a median it contributes to,
/// keeps the rule meaningful for a lot of two: the slower of two GPUs is named when it is that
/// far below the faster one, and the faster never is. Non-finite figures are never named.
pub fn low_outliers_of_lot(values: &[f64], tolerance_percent: f64) -> Vec<LotOutlier> {
    let mut out = Vec::new();
    if values.len() < 2 {
        return out;
    }
    // Sort the finite figures once (O(n log n)); the median of the others of the member at
    // sorted position p is then read off the sorted list with p skipped, in O(1), instead of
    // sorting every other member again for each member (O(n^2 log n) for a fleet of n GPUs).
    let mut order: Vec<usize> = (0..values.len())
        .filter(|&i| values[i].is_finite())
        .collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let sorted: Vec<f64> = order.iter().map(|&i| values[i]).collect();
    let mut position = vec![usize::MAX; values.len()];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    let others = sorted.len().saturating_sub(1);
    if others == 0 {
        return out;
    }
    for (i, &v) in values.iter().enumerate() {
        let p = position[i];
        if p == usize::MAX {
            continue;
        }
        // The j-th smallest of the others: the sorted list with position p left out.
        let nth = |j: usize| if j < p { sorted[j] } else { sorted[j + 1] };
        let m = if others % 2 == 1 {
            nth(others / 2)
        } else {
            (nth(others / 2 - 1) + nth(others / 2)) / 2.0
        };
        if m <= 0.0 {
            continue;
        }
        let below = (m - v) / m * 100.0;
        if below > tolerance_percent {
            out.push(LotOutlier {
                index: i,
                value: v,
                median_of_others: m,
                percent_below: below,
            });
        }
    }
    out
}

/// [`low_outliers_of_lot`] as the rule says it, each member's others sorted anew: quadratic,
/// kept to prove the fast one gives the same answer.
#[cfg(test)]
fn low_outliers_of_lot_naive(values: &[f64], tolerance_percent: f64) -> Vec<LotOutlier> {
    let mut out = Vec::new();
    if values.len() < 2 {
        return out;
    }
    for (i, &v) in values.iter().enumerate() {
        if !v.is_finite() {
            continue;
        }
        let others: Vec<f64> = values
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, x)| *x)
            .collect();
        let Some(m) = median(&others) else {
            continue;
        };
        if m <= 0.0 {
            continue;
        }
        let below = (m - v) / m * 100.0;
        if below > tolerance_percent {
            out.push(LotOutlier {
                index: i,
                value: v,
                median_of_others: m,
                percent_below: below,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn one_slow_sample_is_named_and_does_not_move_the_median() {
        let samples = [1.00, 1.01, 0.99, 1.02, 0.98, 1.00, 3.50];
        let s = Summary::of(&samples).unwrap();
        assert_eq!(s.median, 1.00);
        assert_eq!(s.outliers, 1);
        assert_eq!(outliers(&samples), vec![6]);
        assert_eq!((s.min, s.max), (0.98, 3.50));
        assert!((s.relative_spread - 2.52).abs() < 1e-12);
    }

    #[test]
    fn identical_samples_have_no_spread_and_no_outlier() {
        let s = Summary::of(&[2.0; 5]).unwrap();
        assert_eq!((s.mad, s.relative_spread, s.outliers), (0.0, 0.0, 0));
        // With a zero MAD, the one sample that differs stands out.
        assert_eq!(outliers(&[2.0, 2.0, 2.0, 2.5]), vec![3]);
    }

    #[test]
    fn the_slower_of_two_gpus_is_named_the_faster_never() {
        let lot = low_outliers_of_lot(&[100.0, 80.0], 10.0);
        assert_eq!(lot.len(), 1);
        assert_eq!(lot[0].index, 1);
        assert_eq!(lot[0].median_of_others, 100.0);
        assert!((lot[0].percent_below - 20.0).abs() < 1e-12);
        assert!(low_outliers_of_lot(&[100.0, 95.0], 10.0).is_empty());
        assert!(low_outliers_of_lot(&[100.0], 10.0).is_empty());
    }

    #[test]
    fn one_slow_gpu_in_eight_is_named_alone() {
        let mut lot = vec![990.0, 1000.0, 1010.0, 995.0, 1005.0, 1000.0, 998.0];
        lot.insert(3, 700.0);
        let named: Vec<usize> = low_outliers_of_lot(&lot, 10.0)
            .iter()
            .map(|o| o.index)
            .collect();
        assert_eq!(named, vec![3]);
    }

    proptest! {
        #[test]
        fn the_median_lies_between_min_and_max(values in proptest::collection::vec(-1e9f64..1e9, 1..40)) {
            let s = Summary::of(&values).unwrap();
            prop_assert!(s.min <= s.median && s.median <= s.max);
            prop_assert_eq!(s.samples, values.len());
        }

        #[test]
        fn the_median_ignores_order(mut values in proptest::collection::vec(0.0f64..1e6, 1..40), seed in 0u64..1000) {
            let before = median(&values.clone());
            // A deterministic shuffle.
            let n = values.len();
            for i in 0..n {
                let j = ((seed as usize).wrapping_mul(31).wrapping_add(i * 17)) % n;
                values.swap(i, j);
            }
            prop_assert_eq!(before, median(&values));
        }

        #[test]
        fn scaling_the_samples_scales_the_summary(values in proptest::collection::vec(1e-6f64..1.0, 1..30), k in 1e-3f64..1e3) {
            let a = Summary::of(&values).unwrap();
            let scaled: Vec<f64> = values.iter().map(|v| v * k).collect();
            let b = Summary::of(&scaled).unwrap();
            prop_assert!((b.median - a.median * k).abs() <= 1e-9 * b.median.abs().max(1e-12));
            prop_assert!((b.relative_spread - a.relative_spread).abs() < 1e-6);
            prop_assert_eq!(a.outliers, b.outliers);
        }

        #[test]
        fn fewer_than_half_are_ever_outliers(values in proptest::collection::vec(-1e6f64..1e6, 1..50)) {
            prop_assert!(outliers(&values).len() * 2 <= values.len());
        }

        #[test]
        fn a_lot_never_names_its_best_member(values in proptest::collection::vec(1.0f64..1e4, 2..16), tol in 0.0f64..50.0) {
            let best = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            for o in low_outliers_of_lot(&values, tol) {
                prop_assert!(o.value < best);
                prop_assert!(o.percent_below > tol);
            }
        }
    }

    proptest! {
        #[test]
        fn the_sorted_outlier_rule_is_the_naive_one(
            values in proptest::collection::vec(
                prop_oneof![8 => 0.0f64..100.0, 1 => Just(f64::NAN), 1 => Just(50.0), 1 => -5.0f64..0.0],
                0..40,
            ),
            tolerance in 0.0f64..60.0,
        ) {
            let fast = low_outliers_of_lot(&values, tolerance);
            let naive = low_outliers_of_lot_naive(&values, tolerance);
            prop_assert_eq!(fast.len(), naive.len());
            for (a, b) in fast.iter().zip(&naive) {
                prop_assert_eq!(a.index, b.index);
                prop_assert_eq!(a.median_of_others, b.median_of_others);
            }
        }
    }
}
