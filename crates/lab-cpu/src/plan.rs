//! Every byte the CPU reference device will hold for a run, planned before the run starts, so
//! the pre-flight check compares what the process will really use with what the machine has
//! (and with `--max-memory`), not just the allocator's segments.

use serde::Serialize;

use crate::bf16;
use crate::gemm::last_level_cache_bytes;
use lab::dtype::DType;
use lab::measure::config::Plan;

/// The planned peak of this process's resident memory on the CPU reference device, part by
/// part. Every part is held until the end of the run, so the peak is their sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostMemoryPlan {
    /// Resident when the plan was made: the program, its libraries, the runtime.
    pub resident_at_start_bytes: u64,
    /// The allocator's segments at their predicted peak (the pre-flight estimate of
    /// `reserved`): the tensors themselves.
    pub segments_bytes: u64,
    /// The runner's float32 copy of the parameters, kept for the numerical check.
    pub host_parameters_bytes: u64,
    /// float16 and bfloat16: the parameters' copies for the products, made once at load:
    /// widened to float32, or, for bfloat16 on a CPU with AVX512_BF16, the weights packed for
    /// its instructions and the biases widened.
    pub widened_parameters_bytes: u64,
    /// float16 and bfloat16: the float32 operand and result buffers of the products (on
    /// AVX512_BF16, bfloat16's scratch per thread: packed activations, float32 sums).
    pub product_buffers_bytes: u64,
    /// The part of the GEMM's packing buffer that the two products touch.
    pub packing_bytes: u64,
    /// Stacks and thread-local storage the worker threads touch, and the runtime's heap
    /// besides the big buffers (the document, the check's rows).
    pub threads_and_heap_bytes: u64,
    /// The sum: what `--max-memory` and the machine's available memory are compared with.
    pub total_bytes: u64,
    /// Whether the products run on the bfloat16 instructions (the parts' names in a refusal).
    #[serde(skip)]
    bf16_instructions: bool,
}

/// A run whose host memory plan exceeds what the machine has or what `--max-memory` allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this run needs an estimated {needed} bytes ({needed_gib} GiB) of host memory at its peak \
     ({parts}) but {limit_text}; reduce --batch, --context, --width or --hidden"
)]
pub struct HostWouldNotFit {
    /// The planned peak, or its part that must still be obtained.
    pub needed: u64,
    /// `needed` in GiB.
    pub needed_gib: String,
    /// The parts, in words.
    pub parts: String,
    /// What it was compared with, in words.
    pub limit_text: String,
}

/// What one worker thread touches of its stack and thread-local storage, at most.
const PER_THREAD_BYTES: u64 = 256 << 10;
/// The heap besides the big buffers: the document's rows (bounded by `--repeats`), the check's
/// vectors, the parser and the runtime's bookkeeping.
const HEAP_BYTES: u64 = 8 << 20;
/// Bytes one phase row takes in memory and in its JSON text.
const PER_ROW_BYTES: u64 = 4 << 10;

impl HostMemoryPlan {
    /// The plan of `plan` on `threads` threads, given the allocator's predicted peak and the
    /// memory resident now.
    pub fn new(
        plan: &Plan,
        segments_bytes: u64,
        threads: usize,
        resident_at_start_bytes: u64,
    ) -> HostMemoryPlan {
        let o = &plan.options;
        let (rows, width, hidden) = (plan.rows as u64, o.width as u64, plan.hidden as u64);
        let parameters = plan.synthetic_model().parameter_count;
        let half = o.dtype != DType::Float32;
        let bf16_instructions = o.dtype == DType::Bfloat16 && bf16::instructions().is_some();
        let f32s = |n: u64| n.saturating_mul(4);
        let (widened_parameters_bytes, product_buffers_bytes) = if bf16_instructions {
            (
                bf16::parameter_bytes(o.width, plan.hidden),
                bf16::scratch_bytes(plan.rows, o.width, plan.hidden, threads),
            )
        } else if half {
            // Operand: rows x max(width, hidden) (the GELU output feeds linear2); result: the
            // same.
            let buffer = f32s(rows.saturating_mul(width.max(hidden)));
            (f32s(parameters), 2 * buffer)
        } else {
            (0, 0)
        };
        // bfloat16 on its own instructions never calls faer: only the device's set-up product
        // (32 x 32 x 32, `gemm::reserve_packing`) touches its packing buffer.
        let packing_bytes = if bf16_instructions {
            packing_bytes(32, 32, 32, last_level_cache_bytes())
        } else {
            packing_bytes(rows, width, hidden, last_level_cache_bytes())
        };
        let threads_and_heap_bytes =
            PER_THREAD_BYTES * threads as u64 + HEAP_BYTES + PER_ROW_BYTES * (o.repeats as u64 + 4);
        let mut p = HostMemoryPlan {
            resident_at_start_bytes,
            segments_bytes,
            host_parameters_bytes: f32s(parameters),
            widened_parameters_bytes,
            product_buffers_bytes,
            packing_bytes,
            threads_and_heap_bytes,
            total_bytes: 0,
            bf16_instructions,
        };
        p.total_bytes = [
            p.resident_at_start_bytes,
            p.segments_bytes,
            p.host_parameters_bytes,
            p.widened_parameters_bytes,
            p.product_buffers_bytes,
            p.packing_bytes,
            p.threads_and_heap_bytes,
        ]
        .iter()
        .fold(0u64, |a, &b| a.saturating_add(b));
        p
    }

    /// Bytes the plan holds outside the allocator's segments: what a `--max-memory` bound has
    /// to leave free for them.
    pub fn outside_segments_bytes(&self) -> u64 {
        self.total_bytes - self.segments_bytes
    }
}

impl HostMemoryPlan {
    /// Compares the plan with the machine's available memory (times `fraction`) and with
    /// `max_memory`. The memory already resident is not in what the OS reports available, so
    /// only the rest is compared with it; `max_memory` bounds the whole process.
    pub fn check(
        &self,
        available: Option<u64>,
        fraction: f64,
        max_memory: Option<u64>,
    ) -> Result<(), HostWouldNotFit> {
        let gib = |b: u64| lab_io::bytes::gib(b, 2);
        let parts = self.parts();
        if let Some(free) = available {
            let limit = (free as f64 * fraction).floor() as u64;
            let needed = self.total_bytes - self.resident_at_start_bytes;
            if needed > limit {
                return Err(HostWouldNotFit {
                    needed,
                    needed_gib: gib(needed),
                    parts,
                    limit_text: format!(
                        "the machine has {limit} bytes ({} GiB) available{}",
                        gib(limit),
                        if fraction < 1.0 {
                            format!(" (free memory x {fraction})")
                        } else {
                            String::new()
                        }
                    ),
                });
            }
        }
        if let Some(cap) = max_memory
            && self.total_bytes > cap
        {
            return Err(HostWouldNotFit {
                needed: self.total_bytes,
                needed_gib: gib(self.total_bytes),
                parts,
                limit_text: format!(
                    "the run may use at most --max-memory {cap} bytes ({} GiB)",
                    gib(cap)
                ),
            });
        }
        Ok(())
    }

    fn parts(&self) -> String {
        let mut parts = vec![
            format!("tensors {}", self.segments_bytes),
            format!("host copy of the parameters {}", self.host_parameters_bytes),
        ];
        if self.bf16_instructions {
            parts.push(format!(
                "packed bfloat16 weights and float32 biases {}",
                self.widened_parameters_bytes
            ));
            parts.push(format!("product buffers {}", self.product_buffers_bytes));
        } else if self.widened_parameters_bytes > 0 {
            parts.push(format!(
                "float32 parameters {}",
                self.widened_parameters_bytes
            ));
            parts.push(format!("product buffers {}", self.product_buffers_bytes));
        }
        parts.push(format!("GEMM packing {}", self.packing_bytes));
        parts.push(format!("threads and heap {}", self.threads_and_heap_bytes));
        parts.push(format!("already resident {}", self.resident_at_start_bytes));
        parts.join(", ")
    }
}

/// The GEMM packs panels of at most 512 steps of the inner dimension, one for each operand,
/// each no larger than the last-level cache, into a buffer it keeps and reuses: the touched part
/// is the largest panel of each operand over the two products (one product's `m x k` with
/// `n x k`, the other's), each rounded up to whole pages.
fn packing_bytes(rows: u64, width: u64, hidden: u64, l3: u64) -> u64 {
    let panel = |outer: u64, inner: u64| {
        (outer.saturating_mul(inner.min(512)).saturating_mul(4))
            .min(l3)
            .next_multiple_of(4096)
    };
    let activations = panel(rows, width).max(panel(rows, hidden));
    let weights = panel(hidden, width).max(panel(width, hidden));
    activations + weights
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(
        batch: usize,
        context: usize,
        width: usize,
        dtype: DType,
    ) -> lab::measure::config::MeasureOptions {
        lab::measure::config::MeasureOptions::with_defaults("cpu", batch, context, width, dtype)
    }

    #[test]
    fn half_precision_counts_widened_parameters_and_buffers() {
        let f32_plan = Plan::new(options(2, 128, 1024, DType::Float32)).unwrap();
        let p = HostMemoryPlan::new(&f32_plan, 100, 2, 10);
        let params = f32_plan.synthetic_model().parameter_count;
        assert_eq!(p.host_parameters_bytes, 4 * params);
        assert_eq!(p.widened_parameters_bytes, 0);
        assert_eq!(p.product_buffers_bytes, 0);
        let half = Plan::new(options(2, 128, 1024, DType::Float16)).unwrap();
        let q = HostMemoryPlan::new(&half, 100, 2, 10);
        assert_eq!(q.widened_parameters_bytes, 4 * params);
        assert_eq!(q.product_buffers_bytes, 2 * 4 * 256 * 4096);
        assert_eq!(
            q.total_bytes - p.total_bytes,
            q.widened_parameters_bytes + q.product_buffers_bytes
        );
        assert_eq!(q.outside_segments_bytes(), q.total_bytes - 100);
    }

    #[test]
    fn bfloat16_counts_what_its_products_hold() {
        let plan = Plan::new(options(2, 128, 1024, DType::Bfloat16)).unwrap();
        let q = HostMemoryPlan::new(&plan, 100, 2, 10);
        let params = plan.synthetic_model().parameter_count;
        if bf16::instructions().is_some() {
            // Both weights packed (4096 x 1024 in whole panels, two bfloat16 to a word), the
            // biases widened; two threads' scratch: 132 rows (whole 12-row tiles) x 2048 pairs
            // of activations (the second Linear's k, 4096, in one block: no float32 sums).
            assert_eq!(
                q.widened_parameters_bytes,
                2 * 4096 * 1024 * 2 + 4 * (4096 + 1024)
            );
            assert_eq!(q.product_buffers_bytes, 2 * 4 * 132 * 2048);
            let e = q.check(Some(0), 1.0, None).unwrap_err().to_string();
            assert!(
                e.contains("packed bfloat16 weights and float32 biases"),
                "{e}"
            );
        } else {
            assert_eq!(q.widened_parameters_bytes, 4 * params);
            assert_eq!(q.product_buffers_bytes, 2 * 4 * 256 * 4096);
        }
    }

    #[test]
    fn check_compares_the_new_part_with_available_and_the_whole_with_max_memory() {
        let plan = Plan::new(options(2, 128, 1024, DType::Float32)).unwrap();
        let p = HostMemoryPlan::new(&plan, 1 << 20, 2, 10 << 20);
        let new_part = p.total_bytes - p.resident_at_start_bytes;
        assert!(p.check(Some(new_part), 1.0, None).is_ok());
        let e = p.check(Some(new_part - 1), 1.0, None).unwrap_err();
        assert_eq!(e.needed, new_part);
        assert!(e.to_string().contains("host copy of the parameters"), "{e}");
        assert!(p.check(Some(2 * new_part), 0.5, None).is_ok());
        assert!(p.check(Some(2 * new_part), 0.49, None).is_err());
        assert!(p.check(None, 1.0, Some(p.total_bytes)).is_ok());
        let e = p.check(None, 1.0, Some(p.total_bytes - 1)).unwrap_err();
        assert!(e.to_string().contains("at most --max-memory"), "{e}");
        assert!(e.to_string().contains(" GiB) of host memory"), "{e}");
    }

    #[test]
    fn packing_is_bounded_by_the_operands_and_the_cache() {
        // 256 rows x 512 steps and 4096 x 512, in float32.
        assert_eq!(
            packing_bytes(256, 1024, 4096, 32 << 20),
            (256 + 4096) * 512 * 4
        );
        // Large operands: one cache-sized panel each.
        assert_eq!(
            packing_bytes(1 << 20, 1 << 14, 1 << 16, 32 << 20),
            2 * (32 << 20)
        );
        // Tiny: whole pages.
        assert_eq!(packing_bytes(1, 1, 4, 32 << 20), 2 * 4096);
    }
}
