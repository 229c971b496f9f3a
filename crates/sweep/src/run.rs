//! The sweep loop and its stopping rules, written against [`PointRunner`] so that they are
//! tested without processes or devices.

use std::fmt;

use lab::dtype::DType;
use lab::measure::document::MeasurementDocument;

use crate::summary::{Row, Status};

/// The option a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    /// `--batch`.
    Batch,
    /// `--context`.
    Context,
    /// `--width`.
    Width,
    /// `--hidden`.
    Hidden,
}

impl Dimension {
    /// The option's name without dashes, as in `summary.csv` and file names.
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Batch => "batch",
            Dimension::Context => "context",
            Dimension::Width => "width",
            Dimension::Hidden => "hidden",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One point of a sweep: the shape it measures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The varied option.
    pub dimension: Dimension,
    /// Its value here.
    pub value: usize,
    /// Batch size.
    pub batch: usize,
    /// Context.
    pub context: usize,
    /// Width.
    pub width: usize,
    /// `--hidden`, when given (else `4 x width`, as `measure`).
    pub hidden: Option<usize>,
}

impl Point {
    /// The points of a sweep: the fixed options with the varied one set to each value in turn.
    pub fn all(
        dimension: Dimension,
        values: &[usize],
        batch: usize,
        context: usize,
        width: usize,
        hidden: Option<usize>,
    ) -> Vec<Point> {
        values
            .iter()
            .map(|&value| {
                let mut p = Point {
                    dimension,
                    value,
                    batch,
                    context,
                    width,
                    hidden,
                };
                match dimension {
                    Dimension::Batch => p.batch = value,
                    Dimension::Context => p.context = value,
                    Dimension::Width => p.width = value,
                    Dimension::Hidden => p.hidden = Some(value),
                }
                p
            })
            .collect()
    }

    /// The point's document inside the sweep folder: `point-width-256.json`.
    pub fn file_name(&self) -> String {
        format!("point-{}-{}.json", self.dimension, self.value)
    }

    /// The hidden width `measure` will use.
    pub fn resolved_hidden(&self) -> usize {
        self.hidden.unwrap_or(self.width.saturating_mul(4))
    }

    /// A row for a point that has no document: refused, failed to start, or never run.
    pub fn row_without_document(
        &self,
        device: &str,
        engine: &str,
        dtype: DType,
        status: Status,
        reason: &str,
    ) -> Row {
        Row {
            dimension: self.dimension.name().to_string(),
            value: self.value,
            batch: self.batch,
            context: self.context,
            width: self.width,
            hidden: self.resolved_hidden(),
            dtype,
            peak_allocated_bytes: None,
            peak_reserved_bytes: None,
            warm_forward_median_wall_seconds: None,
            warm_forward_median_device_seconds: None,
            achieved_flops_per_second: None,
            check_passed: None,
            status,
            reason: reason.to_string(),
            file: String::new(),
            device: device.to_string(),
            engine: engine.to_string(),
        }
    }
}

/// What measuring one point gave.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The point's document was written (complete, or incomplete with its reason).
    Measured(Box<MeasurementDocument>),
    /// The pre-flight check refused the point before any device work; the sentence says why.
    WouldNotFit(String),
    /// No document: the measurement could not start or crashed. `unusable` is true when the
    /// device itself cannot be used (no GPU): the sweep then ends as a usage error.
    Failed {
        /// Why, in a sentence.
        reason: String,
        /// The device is not usable at all.
        unusable: bool,
    },
}

/// Measures one point (in production: a fresh child process of the same binary).
pub trait PointRunner {
    /// Runs `point`, whose document goes to `point.file_name()` in the sweep folder.
    fn run(&mut self, point: &Point) -> Outcome;
}

/// Why a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every point ran and passed.
    Finished,
    /// A point would not fit or ran out of memory: the sweep found its memory limit.
    MemoryLimit,
    /// A point failed for another reason.
    Failed,
    /// The device is not usable (the first point could not open it).
    Unusable,
    /// Interrupted (Ctrl-C, SIGTERM) between points.
    Interrupted,
}

/// The reason of a point that was being measured when the summary was written.
pub const RUNNING_REASON: &str = "being measured when this summary was written; if the sweep has \
     ended, it was killed before it could read this point's document";

/// The device and the engine every point of a sweep runs on, as the rows name them.
#[derive(Debug, Clone, Copy)]
pub struct RunsOn<'a> {
    /// `cpu` or `cuda:N`.
    pub device: &'a str,
    /// `native` or `torch`.
    pub engine: &'a str,
}

/// Runs the points in order and stops at the first one that is not `ok`: later points are not
/// run (a larger point would not fit either). When `interrupted()` turns true the point in
/// progress finishes and every remaining point gets an `interrupted` row. `before_each` sees the
/// rows so far plus a `running` row for the point about to start (so that a summary written then
/// names every document that may appear, even if the sweep is killed during the point);
/// `after_each` sees the rows so far after every point. Either may end the sweep with an error.
pub fn run_points<E>(
    points: &[Point],
    runs_on: RunsOn<'_>,
    dtype: DType,
    runner: &mut dyn PointRunner,
    interrupted: impl Fn() -> bool,
    mut before_each: impl FnMut(&[Row]) -> Result<(), E>,
    mut after_each: impl FnMut(usize, &[Row]) -> Result<(), E>,
) -> Result<(Vec<Row>, Stop), E> {
    let mut rows = Vec::with_capacity(points.len());
    for (i, point) in points.iter().enumerate() {
        if interrupted() {
            for rest in &points[i..] {
                rows.push(rest.row_without_document(
                    runs_on.device,
                    runs_on.engine,
                    dtype,
                    Status::Interrupted,
                    "not run: the sweep was interrupted (Ctrl-C or SIGTERM) before this point",
                ));
            }
            after_each(i, &rows)?;
            return Ok((rows, Stop::Interrupted));
        }
        let mut running = point.row_without_document(
            runs_on.device,
            runs_on.engine,
            dtype,
            Status::Running,
            RUNNING_REASON,
        );
        running.file = point.file_name();
        rows.push(running);
        before_each(&rows)?;
        rows.pop();
        let (row, stop) = match runner.run(point) {
            Outcome::Measured(doc) => {
                let row = Row::from_document(
                    point.dimension.name(),
                    point.value,
                    &point.file_name(),
                    &doc,
                );
                let stop = match row.status {
                    Status::Ok => None,
                    Status::OutOfMemory | Status::WouldNotFit => Some(Stop::MemoryLimit),
                    Status::Failed | Status::Interrupted | Status::Running => Some(Stop::Failed),
                };
                (row, stop)
            }
            Outcome::WouldNotFit(reason) => (
                point.row_without_document(
                    runs_on.device,
                    runs_on.engine,
                    dtype,
                    Status::WouldNotFit,
                    &reason,
                ),
                Some(Stop::MemoryLimit),
            ),
            Outcome::Failed { reason, unusable } => (
                point.row_without_document(
                    runs_on.device,
                    runs_on.engine,
                    dtype,
                    Status::Failed,
                    &reason,
                ),
                Some(if unusable {
                    Stop::Unusable
                } else {
                    Stop::Failed
                }),
            ),
        };
        rows.push(row);
        after_each(i, &rows)?;
        if let Some(stop) = stop {
            return Ok((rows, stop));
        }
    }
    Ok((rows, Stop::Finished))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use lab::measure::config::{MeasureOptions, Plan};
    use lab::measure::document::{Preflight, RunError};
    use lab::measure::runner::{self, Mode, RunInfo, Silent};
    use lab::tool::ToolInfo;
    use lab_cpu::CpuDevice;

    use super::*;

    /// A real document of the CPU reference device for `point`.
    fn measured(point: &Point) -> MeasurementDocument {
        let plan = Plan::new(MeasureOptions {
            device: "cpu".into(),
            batch: point.batch,
            context: point.context,
            width: point.width,
            hidden: point.hidden,
            dtype: DType::Float32,
            warmup: 1,
            repeats: 3,
            seed: 0,
            allow_tf32: false,
        })
        .unwrap();
        let tool = ToolInfo::new(None);
        let mut device = CpuDevice::new(tool.clone());
        let info = RunInfo {
            tool,
            started_utc: "2026-01-01T00:00:00Z".into(),
            device_init_seconds: 0.0,
            preflight: Preflight {
                estimated_peak_reserved_bytes: 0,
                device_free_bytes: None,
            },
        };
        runner::run(&mut device, &plan, info, Mode::Measure, &mut Silent)
    }

    /// Measures for real up to `limit` (exclusive), then answers `at_limit`.
    struct Scripted {
        limit: usize,
        at_limit: fn(&Point) -> Outcome,
        calls: Vec<usize>,
    }

    impl PointRunner for Scripted {
        fn run(&mut self, point: &Point) -> Outcome {
            self.calls.push(point.value);
            if point.value < self.limit {
                Outcome::Measured(Box::new(measured(point)))
            } else {
                (self.at_limit)(point)
            }
        }
    }

    fn points() -> Vec<Point> {
        Point::all(Dimension::Width, &[8, 16, 32, 64], 1, 4, 99, None)
    }

    fn sweep(runner: &mut Scripted, stop_after: Option<usize>) -> (Vec<Row>, Stop, Vec<usize>) {
        let done = Cell::new(0);
        let mut seen = Vec::new();
        let (rows, stop) = run_points::<()>(
            &points(),
            RunsOn {
                device: "cpu",
                engine: "native",
            },
            DType::Float32,
            runner,
            || stop_after.is_some_and(|n| done.get() >= n),
            |rows: &[Row]| {
                // The point about to run is listed, with its file, before it runs.
                let last = rows.last().unwrap();
                assert_eq!(last.status, Status::Running);
                assert_eq!(last.file, format!("point-width-{}.json", last.value));
                assert_eq!(rows.len(), done.get() + 1);
                Ok(())
            },
            |_, rows: &[Row]| {
                done.set(done.get() + 1);
                seen.push(rows.len());
                Ok(())
            },
        )
        .unwrap();
        (rows, stop, seen)
    }

    #[test]
    fn points_vary_one_option_and_name_their_files() {
        let p = Point::all(Dimension::Hidden, &[100, 200], 2, 3, 64, None);
        assert_eq!(p[1].hidden, Some(200));
        assert_eq!(p[1].width, 64);
        assert_eq!(p[1].file_name(), "point-hidden-200.json");
        let w = Point::all(Dimension::Width, &[32], 2, 3, 64, None);
        assert_eq!((w[0].width, w[0].resolved_hidden()), (32, 128));
    }

    #[test]
    fn a_full_sweep_has_one_ok_row_per_point_with_real_figures() {
        let mut runner = Scripted {
            limit: usize::MAX,
            at_limit: |_| unreachable!(),
            calls: vec![],
        };
        let (rows, stop, seen) = sweep(&mut runner, None);
        assert_eq!(stop, Stop::Finished);
        assert_eq!(seen, [1, 2, 3, 4]);
        for (row, width) in rows.iter().zip([8, 16, 32, 64]) {
            assert_eq!(row.status, Status::Ok);
            // The device is named in every row (a CPU sweep says it ran on the CPU).
            assert_eq!(row.device, "cpu");
            assert_eq!(
                (row.width, row.hidden, row.value),
                (width, 4 * width, width)
            );
            assert_eq!(row.check_passed, Some(true));
            assert!(row.peak_reserved_bytes >= row.peak_allocated_bytes);
            // The CPU has no device clock: FLOP/s come from the wall median.
            assert_eq!(row.warm_forward_median_device_seconds, None);
            let wall = row.warm_forward_median_wall_seconds.unwrap();
            let flops = 4.0 * 4.0 * width as f64 * 4.0 * width as f64;
            assert!((row.achieved_flops_per_second.unwrap() * wall - flops).abs() < 1e-6 * flops);
        }
        // Peak memory grows with the width.
        assert!(
            rows.windows(2)
                .all(|w| w[0].peak_allocated_bytes < w[1].peak_allocated_bytes)
        );
    }

    #[test]
    fn stops_at_the_first_point_that_would_not_fit_and_keeps_the_rest() {
        let mut runner = Scripted {
            limit: 32,
            at_limit: |p| Outcome::WouldNotFit(format!("width {} needs too much", p.value)),
            calls: vec![],
        };
        let (rows, stop, seen) = sweep(&mut runner, None);
        assert_eq!(stop, Stop::MemoryLimit);
        assert_eq!(runner.calls, [8, 16, 32], "nothing after the refusal runs");
        assert_eq!(seen, [1, 2, 3]);
        let statuses: Vec<_> = rows.iter().map(|r| r.status).collect();
        assert_eq!(statuses, [Status::Ok, Status::Ok, Status::WouldNotFit]);
        assert_eq!(rows[2].reason, "width 32 needs too much");
        assert_eq!(rows[2].file, "");
        assert_eq!(rows[2].peak_reserved_bytes, None);
    }

    #[test]
    fn an_out_of_memory_document_stops_the_sweep_with_its_reason() {
        let mut runner = Scripted {
            limit: 16,
            at_limit: |p| {
                let mut doc = measured(p);
                doc.phases.truncate(2);
                doc.check = None;
                doc.complete = false;
                doc.error = Some(RunError {
                    phase: Some(lab::measure::document::Phase::ColdForward),
                    kind: "out_of_memory".into(),
                    message: "out of memory in cold_forward".into(),
                    allocated_bytes: None,
                    reserved_bytes: None,
                });
                Outcome::Measured(Box::new(doc))
            },
            calls: vec![],
        };
        let (rows, stop, _) = sweep(&mut runner, None);
        assert_eq!(stop, Stop::MemoryLimit);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].status, Status::OutOfMemory);
        assert_eq!(rows[1].reason, "out of memory in cold_forward");
        assert_eq!(rows[1].file, "point-width-16.json");
        assert!(
            rows[1].peak_allocated_bytes.is_some(),
            "finished phases count"
        );
        assert_eq!(rows[1].check_passed, None);
    }

    #[test]
    fn other_failures_and_an_unusable_device_stop_too() {
        let mut runner = Scripted {
            limit: 0,
            at_limit: |_| Outcome::Failed {
                reason: "no usable GPU".into(),
                unusable: true,
            },
            calls: vec![],
        };
        let (rows, stop, _) = sweep(&mut runner, None);
        assert_eq!(stop, Stop::Unusable);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].status, Status::Failed);
        let mut runner = Scripted {
            limit: 16,
            at_limit: |p| {
                let mut doc = measured(p);
                doc.complete = false;
                doc.error = Some(RunError {
                    phase: None,
                    kind: "check_failed".into(),
                    message: "relative error above the bound".into(),
                    allocated_bytes: None,
                    reserved_bytes: None,
                });
                Outcome::Measured(Box::new(doc))
            },
            calls: vec![],
        };
        let (rows, stop, _) = sweep(&mut runner, None);
        assert_eq!((stop, rows[1].status), (Stop::Failed, Status::Failed));
    }

    #[test]
    fn an_interruption_finishes_the_current_point_and_lists_the_rest() {
        let mut runner = Scripted {
            limit: usize::MAX,
            at_limit: |_| unreachable!(),
            calls: vec![],
        };
        let (rows, stop, seen) = sweep(&mut runner, Some(2));
        assert_eq!(stop, Stop::Interrupted);
        assert_eq!(runner.calls, [8, 16]);
        assert_eq!(seen, [1, 2, 4]);
        let statuses: Vec<_> = rows.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [
                Status::Ok,
                Status::Ok,
                Status::Interrupted,
                Status::Interrupted
            ]
        );
    }
}
