//! The bounded sampling loop: warm up, then take timed samples until there are enough, the
//! figure's share of the budget is spent, or the run's deadline has passed.
//!
//! Each sample is timed by the operation itself (CUDA events around one copy or product on the
//! GPU, the host clock on the CPU) and returned in seconds; the loop only decides how many to
//! take, with a clock of its own so the rule is tested without waiting. A run is bounded: no
//! operation starts after the deadline, so a run ends at most one operation past it.

use std::time::Instant;

/// Seconds since some fixed start.
pub trait Clock {
    /// Seconds elapsed.
    fn now(&self) -> f64;
}

/// The host's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Monotonic(Instant);

impl Monotonic {
    /// Starts counting now.
    pub fn start() -> Monotonic {
        Monotonic(Instant::now())
    }
}

impl Default for Monotonic {
    fn default() -> Monotonic {
        Monotonic::start()
    }
}

impl Clock for Monotonic {
    fn now(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// How many samples to take and how long to warm up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplePlan {
    /// Timed samples to take before the figure's share of time may end the loop.
    pub min_samples: usize,
    /// Timed samples never exceeded.
    pub max_samples: usize,
    /// Untimed runs before the first sample, at least.
    pub min_warmups: usize,
    /// Warm-up lasts this share of the figure's time ...
    pub warmup_share: f64,
    /// ... but no longer than this many seconds (clocks ramp up well within it).
    pub max_warmup_seconds: f64,
}

impl SamplePlan {
    /// The probe's plan: at least `min`, at most `max` samples, one warm-up at least, warm-up up
    /// to a fifth of the figure's time and half a second.
    pub fn new(min_samples: usize, max_samples: usize) -> SamplePlan {
        SamplePlan {
            min_samples,
            max_samples: max_samples.max(1),
            min_warmups: 1,
            warmup_share: 0.2,
            max_warmup_seconds: 0.5,
        }
    }
}

/// Why the loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// `max_samples` were taken.
    Enough,
    /// At least `min_samples` were taken and the figure's time was spent.
    SliceSpent,
    /// The run's deadline passed (possibly before `min_samples`).
    Deadline,
}

/// What one figure's loop produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Timed samples, seconds each.
    pub samples: Vec<f64>,
    /// Untimed runs before them.
    pub warmups: usize,
    /// Why it stopped.
    pub stop: Stop,
}

/// The time a figure may take: what is left of the budget shared among the figures left.
pub fn slice(remaining_seconds: f64, figures_left: usize) -> f64 {
    if figures_left == 0 || remaining_seconds <= 0.0 {
        0.0
    } else {
        remaining_seconds / figures_left as f64
    }
}

/// Runs `op` (which returns the seconds it measured) under `plan`, for about `slice` seconds and
/// never starting after `deadline` (both on `clock`). Errors of `op` end the loop at once.
pub fn sample<E>(
    clock: &dyn Clock,
    deadline: f64,
    slice: f64,
    plan: &SamplePlan,
    mut op: impl FnMut() -> Result<f64, E>,
) -> Result<Sampled, E> {
    let start = clock.now();
    let slice_end = (start + slice.max(0.0)).min(deadline);
    let warm_end = start + (slice.max(0.0) * plan.warmup_share).min(plan.max_warmup_seconds);
    let mut warmups = 0;
    loop {
        let now = clock.now();
        if now >= deadline {
            return Ok(Sampled {
                samples: Vec::new(),
                warmups,
                stop: Stop::Deadline,
            });
        }
        if warmups >= plan.min_warmups && now >= warm_end {
            break;
        }
        op()?;
        warmups += 1;
    }
    let mut samples = Vec::new();
    let stop = loop {
        if samples.len() >= plan.max_samples {
            break Stop::Enough;
        }
        let now = clock.now();
        if now >= deadline {
            break Stop::Deadline;
        }
        if samples.len() >= plan.min_samples && now >= slice_end {
            break Stop::SliceSpent;
        }
        samples.push(op()?);
    };
    Ok(Sampled {
        samples,
        warmups,
        stop,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock that moves only when an operation "runs".
    pub(crate) struct FakeClock(pub Cell<f64>);

    impl Clock for FakeClock {
        fn now(&self) -> f64 {
            self.0.get()
        }
    }

    fn run(deadline: f64, slice: f64, op_seconds: f64, plan: SamplePlan) -> (Sampled, f64) {
        let clock = FakeClock(Cell::new(0.0));
        let s = sample::<()>(&clock, deadline, slice, &plan, || {
            clock.0.set(clock.0.get() + op_seconds);
            Ok(op_seconds)
        })
        .unwrap();
        (s, clock.0.get())
    }

    #[test]
    fn fast_operations_stop_at_the_sample_cap() {
        let (s, end) = run(60.0, 6.0, 0.001, SamplePlan::new(3, 50));
        assert_eq!(s.stop, Stop::Enough);
        assert_eq!(s.samples.len(), 50);
        // Warm-up: a fifth of the slice, capped at half a second.
        assert!((499..=501).contains(&s.warmups), "{}", s.warmups);
        assert!(end < 0.6);
    }

    #[test]
    fn slow_operations_stop_when_their_time_is_spent() {
        let (s, end) = run(60.0, 2.0, 0.5, SamplePlan::new(3, 50));
        assert_eq!(s.stop, Stop::SliceSpent);
        assert_eq!(s.warmups, 1);
        assert_eq!(s.samples.len(), 3);
        assert!((end - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_minimum_is_kept_past_the_slice_but_never_past_the_deadline() {
        let (s, _) = run(60.0, 0.1, 1.0, SamplePlan::new(3, 50));
        assert_eq!((s.stop, s.samples.len()), (Stop::SliceSpent, 3));
        let (s, end) = run(2.5, 0.1, 1.0, SamplePlan::new(3, 50));
        assert_eq!((s.stop, s.samples.len()), (Stop::Deadline, 2));
        // Bounded: at most one operation past the deadline.
        assert!(end <= 2.5 + 1.0);
    }

    #[test]
    fn nothing_runs_after_the_deadline() {
        let clock = FakeClock(Cell::new(10.0));
        let mut calls = 0;
        let s = sample::<()>(&clock, 5.0, 1.0, &SamplePlan::new(3, 50), || {
            calls += 1;
            Ok(1.0)
        })
        .unwrap();
        assert_eq!((calls, s.stop, s.samples.len()), (0, Stop::Deadline, 0));
    }

    #[test]
    fn an_error_ends_the_loop() {
        let clock = FakeClock(Cell::new(0.0));
        let mut n = 0;
        let r = sample(&clock, 60.0, 1.0, &SamplePlan::new(3, 50), || {
            n += 1;
            clock.0.set(clock.0.get() + 0.01);
            if n == 3 { Err("copy failed") } else { Ok(0.01) }
        });
        assert_eq!(r, Err("copy failed"));
    }

    #[test]
    fn slices_share_what_is_left() {
        assert_eq!(slice(60.0, 10), 6.0);
        assert_eq!(slice(0.0, 3), 0.0);
        assert_eq!(slice(5.0, 0), 0.0);
    }
}
