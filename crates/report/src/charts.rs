//! The charts, drawn with plotters' SVG backend into strings.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use lab::measure::document::{Phase, PhaseRow};

use crate::load::{ReportError, Run};
use crate::units::{Unit, bytes_unit, tick};

const FONT: &str = "sans-serif";
const WALL: RGBColor = RGBColor(31, 119, 180);
const DEVICE: RGBColor = RGBColor(255, 127, 14);
/// Allocated baseline, end, peak (blues), then reserved baseline, end, peak (oranges).
const MEMORY: [(RGBColor, &str); 6] = [
    (RGBColor(158, 202, 225), "allocated baseline"),
    (RGBColor(66, 146, 198), "allocated end"),
    (RGBColor(8, 69, 148), "allocated peak"),
    (RGBColor(253, 208, 162), "reserved baseline"),
    (RGBColor(253, 141, 60), "reserved end"),
    (RGBColor(166, 54, 3), "reserved peak"),
];
/// One colour per sweep or run in line charts.
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// An axis whose ticks sit exactly at given values (the phases' centres, a sweep's points)
/// instead of at round numbers, over any f64 axis (linear or logarithmic).
struct Keyed<R> {
    inner: R,
    keys: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Keyed<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Light (unlabelled) grid lines are asked for separately; only the bold ones get keys.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

fn keyed<R: Ranged<ValueType = f64>>(inner: R, keys: Vec<f64>) -> Keyed<R> {
    Keyed { inner, keys }
}

/// An axis fitted to its data: logarithmic over the data's own range when the data spans a
/// decade or more, linear otherwise (a log axis over a small range would flatten it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fit {
    /// Whether the axis is logarithmic.
    pub log: bool,
    /// Its ends.
    pub lo: f64,
    pub hi: f64,
}

impl Fit {
    /// ` (log scale)` or ` (linear)`, for the axis' title.
    pub(crate) fn says(&self) -> &'static str {
        if self.log { "log scale" } else { "linear" }
    }

    fn coord(&self) -> FittedCoord {
        if self.log {
            FittedCoord::Log(LogCoord::from((self.lo..self.hi).log_scale()))
        } else {
            FittedCoord::Linear(RangedCoordf64::from(self.lo..self.hi))
        }
    }
}

/// The range of the positive finite values: log from a little under the smallest to `headroom`
/// times the largest (room for the legend) when they span a decade, else linear from zero
/// (`from_zero`, for bars) or from a little under the smallest, with the same share of room on
/// top.
pub(crate) fn fit(values: impl Iterator<Item = f64>, headroom: f64, from_zero: bool) -> Fit {
    let (min, max) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !min.is_finite() {
        return Fit {
            log: false,
            lo: 0.0,
            hi: 1.0,
        };
    }
    if max / min >= 10.0 {
        return Fit {
            log: true,
            lo: min / 1.25,
            hi: max * headroom,
        };
    }
    let lo = if from_zero {
        0.0
    } else {
        (min - (max - min).max(max * 0.05) * 0.15).max(0.0)
    };
    let span = (max - lo).max(max * 0.05);
    Fit {
        log: false,
        lo,
        hi: max + span * (headroom - 1.0).clamp(0.1, 1.0) * 0.6,
    }
}

/// A linear or logarithmic f64 axis, chosen at run time.
enum FittedCoord {
    Linear(RangedCoordf64),
    Log(LogCoord<f64>),
}

impl Ranged for FittedCoord {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        match self {
            FittedCoord::Linear(r) => r.map(value, limit),
            FittedCoord::Log(r) => r.map(value, limit),
        }
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match self {
            FittedCoord::Linear(r) => r.key_points(hint),
            FittedCoord::Log(r) => r.key_points(hint),
        }
    }

    fn range(&self) -> Range<f64> {
        match self {
            FittedCoord::Linear(r) => r.range(),
            FittedCoord::Log(r) => r.range(),
        }
    }
}

/// The smallest text a chart may show on screen, in CSS pixels.
pub(crate) const MIN_TEXT_PX: f64 = 11.0;
/// The smallest font asked of plotters in a chart of the base width (labels, legend).
const BASE_FONT: f64 = 18.0;
/// Plotters' SVG backend writes a font of size s as `font-size` s / 1.24 SVG pixels.
const SVG_FONT_RATIO: f64 = 1.24;
/// Charts up to this width use the base sizes; a wider chart scales its text, margins and
/// label areas up with its width, so every chart is read at the same scale-down.
const BASE_WIDTH: f64 = 640.0;

/// Sizes of one chart: each base size times `k`, the chart's width over [`BASE_WIDTH`] (at
/// least 1).
#[derive(Debug, Clone, Copy)]
struct Sizes {
    k: f64,
    narrow: bool,
}

/// Which drawing of a chart: the one for a frame of [`NARROW_BELOW`] px or more, or the one for
/// a phone. Every chart is drawn both ways; the page's style shows the one its frame fits, so
/// no chart is ever cut off or scrolled, and no text is under [`MIN_TEXT_PX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frame {
    /// The chart's own width (640 px, or more for many bars).
    Wide,
    /// [`NARROW_WIDTH`] px, the base text size, fewer labels.
    Narrow,
}

/// The narrow drawing's width in SVG pixels: shown at a phone's frame (about 330 px at 390 px)
/// its text stays over 11 px (see [`min_width`]).
pub(crate) const NARROW_WIDTH: u32 = 340;

/// A frame narrower than this, in CSS pixels, shows the narrow drawing: every wide drawing fits
/// a frame this wide with its text at 11 px or more.
pub(crate) const NARROW_BELOW: u32 = 500;

impl Sizes {
    fn of(width: u32) -> Sizes {
        Sizes {
            k: (width as f64 / BASE_WIDTH).max(1.0),
            narrow: false,
        }
    }

    /// The width to draw a chart at in `frame` (`wide` in the wide frame), and its sizes.
    fn frame(frame: Frame, wide: u32) -> (u32, Sizes) {
        match frame {
            Frame::Wide => (wide, Sizes::of(wide)),
            Frame::Narrow => (
                NARROW_WIDTH,
                Sizes {
                    k: 1.0,
                    narrow: true,
                },
            ),
        }
    }

    /// A chart's height: its base height, or three quarters of it when narrow.
    fn height(&self, base: f64) -> u32 {
        if self.narrow {
            (base * 0.75).round() as u32
        } else {
            self.px(base)
        }
    }

    /// The title's font: larger than the labels, but no larger when narrow (a long title
    /// would not fit).
    fn title(&self) -> (&'static str, u32) {
        if self.narrow {
            self.font(BASE_FONT)
        } else {
            self.font(24.0)
        }
    }

    fn px(&self, base: f64) -> u32 {
        (base * self.k).round() as u32
    }

    fn font(&self, base: f64) -> (&'static str, u32) {
        (FONT, self.px(base))
    }
}

/// The narrowest a chart of `width` SVG pixels may be shown: its smallest text then renders at
/// [`MIN_TEXT_PX`]. The page lets a figure scroll sideways rather than shrink it further.
pub(crate) fn min_width(width: u32) -> u32 {
    let smallest = BASE_FONT / SVG_FONT_RATIO * Sizes::of(width).k;
    (width as f64 * MIN_TEXT_PX / smallest).ceil() as u32 + 1
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// The series legend every chart draws, on a light box, in the corner its data leaves free.
fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    corner: SeriesLabelPosition,
    z: Sizes,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(corner)
        .label_font(z.font(BASE_FONT))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// The grid, axis titles and labels of a chart with one slot per label along x (phases,
/// figures): no vertical grid lines, each slot named by its label, y ticks in round figures.
fn categorical_mesh<'a, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<Keyed<RangedCoordf64>, Y>>,
    (x_desc, y_desc): (&str, &str),
    labels: &[String],
    z: Sizes,
) -> Drawn
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|v| {
            labels
                .get(v.floor().max(0.0) as usize)
                .cloned()
                .unwrap_or_default()
        })
        .y_label_formatter(&|v| tick(*v))
        .label_style(z.font(BASE_FONT))
        .axis_desc_style(z.font(BASE_FONT))
        .draw()?;
    Ok(())
}

/// Draws into an SVG string of `size` pixels.
fn svg(
    title: &str,
    size: (u32, u32),
    z: Sizes,
    f: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Drawn,
) -> Result<String, ReportError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| f(&root))
            .and_then(|()| root.present().map_err(Into::into));
        drawn.map_err(|e| ReportError::Chart {
            chart: title.to_string(),
            message: e.to_string(),
        })?;
    }
    Ok(out.replacen(
        "<svg ",
        &format!(
            "<svg class=\"{}\" style=\"min-width: {}px\" ",
            if z.narrow { "narrow" } else { "wide" },
            min_width(size.0)
        ),
        1,
    ))
}

/// A chart drawn in both frames, the wide drawing first.
fn both(draw: impl Fn(Frame) -> Result<String, ReportError>) -> Result<String, ReportError> {
    Ok(format!("{}\n{}", draw(Frame::Wide)?, draw(Frame::Narrow)?))
}

/// Keys for `n` slots in a chart `width` wide: every slot while each has `each` px (at the base
/// size), else every k-th, always the first.
fn thinned(n: usize, width: u32, each: f64, z: Sizes) -> Vec<f64> {
    let fit = ((width as f64 / (each * z.k)) as usize).max(1);
    let stride = n.div_ceil(fit).max(1);
    (0..n).step_by(stride).map(|i| i as f64 + 0.5).collect()
}

/// Runs whose peak memory is within this factor of each other share a memory scale; a run
/// further from the others gets its own, so a small run's bars never sit flat at zero under a
/// large run's scale.
pub(crate) const SHARED_SCALE_FACTOR: f64 = 10.0;

/// The axes of one run's phase charts: the time axis (logarithmic, so runs of any speed share
/// it), and a memory axis shared with the runs of comparable size.
#[derive(Debug, Clone)]
pub(crate) struct PhaseAxes {
    /// The time axis in milliseconds, the same for every run.
    pub time_ms: Fit,
    /// Unit of the memory axis.
    pub memory: Unit,
    /// Top of the memory axis, in bytes.
    pub memory_max: f64,
    /// The other runs (by index) drawn on this memory scale.
    pub memory_shared_with: Vec<usize>,
}

/// The highest allocated or reserved byte count of a run, over all its phases.
fn memory_peak(run: &Run) -> f64 {
    run.doc
        .phases
        .iter()
        .map(|p| {
            p.memory
                .peak_reserved_bytes
                .max(p.memory.peak_allocated_bytes) as f64
        })
        .fold(0.0, f64::max)
}

/// Groups of comparable values: sorted, a value joins the current group while it is within
/// [`SHARED_SCALE_FACTOR`] of the group's smallest. Returns each value's group number.
pub(crate) fn scale_groups(values: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut group = vec![0; values.len()];
    let mut current = 0;
    let mut floor: Option<f64> = None;
    for i in order {
        let v = values[i].max(1.0);
        match floor {
            Some(f) if v <= f * SHARED_SCALE_FACTOR => {}
            Some(_) => {
                current += 1;
                floor = Some(v);
            }
            None => floor = Some(v),
        }
        group[i] = current;
    }
    group
}

impl PhaseAxes {
    /// The axes of every run, in the order of `runs`.
    pub(crate) fn of(runs: &[&Run]) -> Vec<PhaseAxes> {
        let times = runs.iter().flat_map(|r| {
            r.doc.phases.iter().flat_map(|p| {
                std::iter::once(p.wall_seconds * 1e3).chain(p.device_seconds.map(|d| d * 1e3))
            })
        });
        // Room above the tallest bar for the legend: under a decade, so no decade is empty.
        let time_ms = fit(times, 8.0, true);
        let peaks: Vec<f64> = runs.iter().map(|r| memory_peak(r)).collect();
        let groups = scale_groups(&peaks);
        (0..runs.len())
            .map(|i| {
                let members: Vec<usize> = (0..runs.len())
                    .filter(|&j| groups[j] == groups[i])
                    .collect();
                let memory_max = members.iter().map(|&j| peaks[j]).fold(0.0, f64::max);
                PhaseAxes {
                    time_ms,
                    memory: bytes_unit(memory_max),
                    memory_max: memory_max.max(1.0),
                    memory_shared_with: members.into_iter().filter(|&j| j != i).collect(),
                }
            })
            .collect()
    }
}

fn phase_label(row: &PhaseRow) -> String {
    match row.phase {
        Phase::ModelLoad => "load".to_string(),
        Phase::Inputs => "inputs".to_string(),
        Phase::ColdForward => "cold".to_string(),
        Phase::Warmup => "warmup".to_string(),
        Phase::WarmForward => format!("warm {}", row.index),
    }
}

/// Chart width for `categories` bars: 80 px each, at least 600 and at most 1200 (the page
/// scales charts down to its width; past 1200 px bars would be too thin to read anyway).
fn width_for(categories: usize) -> u32 {
    (80 * categories as u32).clamp(600, 1200)
}

/// The phase-axis keys: a label under every bar while they fit (about 70 px each at the base
/// size), else under every k-th bar, always the first.
fn phase_keys(n: usize, width: u32) -> Vec<f64> {
    let each = 70.0 * Sizes::of(width).k;
    let fit = ((width as f64 / each) as usize).max(1);
    let stride = n.div_ceil(fit).max(1);
    (0..n).step_by(stride).map(|i| i as f64 + 0.5).collect()
}

/// Wall-clock vs device time of every phase row, bars on a log axis.
pub(crate) fn phase_time(run: &Run, axes: &PhaseAxes) -> Result<String, ReportError> {
    let rows = &run.doc.phases;
    let n = rows.len().max(1);
    let labels: Vec<String> = rows.iter().map(phase_label).collect();
    let has_device = rows.iter().any(|r| r.device_seconds.is_some());
    let title = "Time per phase: wall clock vs device";
    both(|frame| {
        let (width, z) = Sizes::frame(frame, width_for(n));
        svg(title, (width, z.height(360.0)), z, |root| {
            let lo = axes.time_ms.lo;
            let keys = phase_keys(n, width);
            let mut chart = ChartBuilder::on(root)
                .caption(title, z.title())
                .margin(z.px(12.0))
                .x_label_area_size(z.px(46.0))
                .y_label_area_size(z.px(72.0))
                .build_cartesian_2d(
                    keyed(RangedCoordf64::from(0f64..n as f64), keys),
                    axes.time_ms.coord(),
                )?;
            categorical_mesh(
                &mut chart,
                ("phase", &format!("time (ms, {})", axes.time_ms.says())),
                &labels,
                z,
            )?;
            let (w0, w1) = if has_device { (0.1, 0.5) } else { (0.2, 0.8) };
            chart
                .draw_series(rows.iter().enumerate().map(|(i, r)| {
                    let x = i as f64;
                    Rectangle::new(
                        [(x + w0, lo), (x + w1, (r.wall_seconds * 1e3).max(lo))],
                        WALL.filled(),
                    )
                }))?
                .label("wall clock (host)")
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], WALL.filled()));
            if has_device {
                chart
                    .draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
                        let x = i as f64;
                        r.device_seconds.map(|d| {
                            Rectangle::new(
                                [(x + 0.5, lo), (x + 0.9, (d * 1e3).max(lo))],
                                DEVICE.filled(),
                            )
                        })
                    }))?
                    .label("device (CUDA events)")
                    .legend(|(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], DEVICE.filled())
                    });
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight, z)?;
            Ok(())
        })
    })
}

/// Baseline, end and peak of allocated and reserved bytes for every phase row.
pub(crate) fn phase_memory(run: &Run, axes: &PhaseAxes) -> Result<String, ReportError> {
    let rows = &run.doc.phases;
    let n = rows.len().max(1);
    let labels: Vec<String> = rows.iter().map(phase_label).collect();
    let unit = axes.memory;
    let title = "Memory per phase: allocated and reserved";
    both(|frame| {
        let (width, z) = Sizes::frame(frame, width_for(n));
        svg(title, (width, z.height(400.0)), z, |root| {
            let top = axes.memory_max / unit.scale * 1.75;
            let keys = phase_keys(n, width);
            let mut chart = ChartBuilder::on(root)
                .caption(title, z.title())
                .margin(z.px(12.0))
                .x_label_area_size(z.px(46.0))
                .y_label_area_size(z.px(72.0))
                .build_cartesian_2d(keyed(RangedCoordf64::from(0f64..n as f64), keys), 0f64..top)?;
            categorical_mesh(
                &mut chart,
                ("phase", &format!("bytes ({}, linear)", unit.name)),
                &labels,
                z,
            )?;
            for (k, (color, name)) in MEMORY.iter().enumerate() {
                let bar = 0.8 / 6.0;
                let color = *color;
                chart
                    .draw_series(rows.iter().enumerate().map(|(i, r)| {
                        let m = &r.memory;
                        let v = [
                            m.baseline_allocated_bytes,
                            m.end_allocated_bytes,
                            m.peak_allocated_bytes,
                            m.baseline_reserved_bytes,
                            m.end_reserved_bytes,
                            m.peak_reserved_bytes,
                        ][k] as f64
                            / unit.scale;
                        let x = i as f64 + 0.1 + bar * k as f64;
                        Rectangle::new([(x, 0.0), (x + bar * 0.9, v)], color.filled())
                    }))?
                    .label(*name)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            legend(&mut chart, SeriesLabelPosition::UpperLeft, z)?;
            Ok(())
        })
    })
}

/// One curve of a line chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub dashed: bool,
}

/// A line chart with a tick at every x value the series have; each axis fitted to the data
/// (logarithmic where it spans a decade or more, else linear), which its title says.
pub(crate) fn line_chart(
    title: &str,
    x_name: &str,
    y_name: &str,
    series: &[Series],
) -> Result<String, ReportError> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| *x > 0.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    // At most 12 ticks on x (5 in the narrow drawing), always the first value.
    let keys = |most: usize| -> Vec<f64> {
        let stride = xs.len().div_ceil(most).max(1);
        xs.iter().step_by(stride).copied().collect()
    };
    let x = match (xs.first(), xs.last()) {
        (Some(&a), Some(&b)) if b / a >= 10.0 => Fit {
            log: true,
            lo: a / 1.3,
            hi: b * 1.3,
        },
        (Some(&a), Some(&b)) => {
            let pad = (b - a).max(a * 0.1) * 0.08;
            Fit {
                log: false,
                lo: (a - pad).max(0.0),
                hi: b + pad,
            }
        }
        _ => Fit {
            log: false,
            lo: 0.0,
            hi: 1.0,
        },
    };
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let y = fit(ys, 4.0, false);
    both(|frame| {
        let (width, z) = Sizes::frame(frame, 640);
        svg(title, (width, z.height(400.0)), z, |root| {
            let mut chart = ChartBuilder::on(root)
                .caption(title, z.title())
                .margin(z.px(12.0))
                .x_label_area_size(z.px(46.0))
                .y_label_area_size(z.px(72.0))
                .build_cartesian_2d(
                    keyed(x.coord(), keys(if z.narrow { 5 } else { 12 })),
                    y.coord(),
                )?;
            chart
                .configure_mesh()
                .x_desc(format!("{x_name} ({})", x.says()))
                .y_desc(format!("{y_name} ({})", y.says()))
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .label_style(z.font(BASE_FONT))
                .axis_desc_style(z.font(BASE_FONT))
                .draw()?;
            for s in series {
                let style = s.color.stroke_width(2);
                let color = s.color;
                let dashed = s.dashed;
                let anno = if dashed {
                    chart.draw_series(DashedLineSeries::new(
                        s.points.iter().copied(),
                        6,
                        4,
                        style,
                    ))?
                } else {
                    chart.draw_series(LineSeries::new(s.points.iter().copied(), style))?
                };
                anno.label(s.label.as_str()).legend(move |(x, y)| {
                    if dashed {
                        PathElement::new(vec![(x, y), (x + 6, y)], color.stroke_width(2))
                    } else {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    }
                });
                chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
            legend(&mut chart, SeriesLabelPosition::UpperLeft, z)?;
            Ok(())
        })
    })
}

/// One bar of a probe chart: a device's figure and the datasheet figure it is held against.
#[derive(Debug, Clone)]
pub(crate) struct ProbeBar {
    /// Index of the device (its colour and legend entry).
    pub device: usize,
    pub value: f64,
    pub reference: Option<f64>,
}

/// One figure (`h2d_pinned`, `bfloat16`, ...) with a bar per GPU.
#[derive(Debug, Clone)]
pub(crate) struct ProbeGroup {
    pub label: String,
    pub bars: Vec<ProbeBar>,
}

/// Per-GPU bars of each figure, each with a black line at its datasheet figure: how far every
/// card of the lot is from what its model should do, and from the other cards.
pub(crate) fn probe_bars(
    title: &str,
    y_desc: &str,
    devices: &[String],
    groups: &[ProbeGroup],
) -> Result<String, ReportError> {
    let n = groups.len().max(1);
    let labels: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
    let top = groups
        .iter()
        .flat_map(|g| g.bars.iter())
        .flat_map(|b| std::iter::once(b.value).chain(b.reference))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.5;
    let per_group = devices.len().max(1) as f64;
    let has_reference = groups
        .iter()
        .any(|g| g.bars.iter().any(|b| b.reference.is_some()));
    both(|frame| {
        let (width, z) = Sizes::frame(frame, width_for(n * devices.len().max(1)));
        svg(title, (width, z.height(400.0)), z, |root| {
            // Narrow: a label under every k-th slot only, so that none overlaps the next.
            let keys: Vec<f64> = if z.narrow {
                thinned(n, width, 90.0, z)
            } else {
                (0..n).map(|i| i as f64 + 0.5).collect()
            };
            let mut chart = ChartBuilder::on(root)
                .caption(title, z.title())
                .margin(z.px(12.0))
                .x_label_area_size(z.px(46.0))
                .y_label_area_size(z.px(72.0))
                .build_cartesian_2d(keyed(RangedCoordf64::from(0f64..n as f64), keys), 0f64..top)?;
            categorical_mesh(&mut chart, ("figure", y_desc), &labels, z)?;
            let bar = 0.8 / per_group;
            for (d, name) in devices.iter().enumerate() {
                let color = PALETTE[d % PALETTE.len()];
                chart
                    .draw_series(groups.iter().enumerate().flat_map(|(i, g)| {
                        g.bars.iter().filter(|b| b.device == d).map(move |b| {
                            let x = i as f64 + 0.1 + bar * d as f64;
                            Rectangle::new([(x, 0.0), (x + bar * 0.9, b.value)], color.filled())
                        })
                    }))?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            if has_reference {
                chart
                    .draw_series(groups.iter().enumerate().flat_map(|(i, g)| {
                        g.bars.iter().filter_map(move |b| {
                            let x = i as f64 + 0.1 + bar * b.device as f64;
                            b.reference.map(|r| {
                                PathElement::new(
                                    vec![(x, r), (x + bar * 0.9, r)],
                                    BLACK.stroke_width(3),
                                )
                            })
                        })
                    }))?
                    .label("datasheet figure")
                    .legend(|(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(3))
                    });
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight, z)?;
            Ok(())
        })
    })
}

/// One GPU of a fleet chart: its figure, the datasheet figure, and whether it is the fleet's
/// outlier on it.
#[derive(Debug, Clone)]
pub(crate) struct FleetBar {
    /// `n0/cuda:1`.
    pub label: String,
    pub value: f64,
    pub reference: Option<f64>,
    pub outlier: bool,
}

/// One probe figure on one axis: a bar per GPU of every node, the outliers in red, each with
/// a black line at its datasheet figure.
pub(crate) fn fleet_bars(
    title: &str,
    y_desc: &str,
    bars: &[FleetBar],
) -> Result<String, ReportError> {
    let n = bars.len().max(1);
    let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
    let top = bars
        .iter()
        .flat_map(|b| std::iter::once(b.value).chain(b.reference))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.5;
    let has_reference = bars.iter().any(|b| b.reference.is_some());
    let has_outlier = bars.iter().any(|b| b.outlier);
    both(|frame| {
        let (width, z) = Sizes::frame(frame, width_for(n));
        svg(title, (width, z.height(400.0)), z, |root| {
            // Narrow: a label under every k-th slot only, so that none overlaps the next.
            let keys: Vec<f64> = if z.narrow {
                thinned(n, width, 90.0, z)
            } else {
                (0..n).map(|i| i as f64 + 0.5).collect()
            };
            let mut chart = ChartBuilder::on(root)
                .caption(title, z.title())
                .margin(z.px(12.0))
                .x_label_area_size(z.px(46.0))
                .y_label_area_size(z.px(72.0))
                .build_cartesian_2d(keyed(RangedCoordf64::from(0f64..n as f64), keys), 0f64..top)?;
            categorical_mesh(&mut chart, ("node/GPU", y_desc), &labels, z)?;
            for (outlier, name, color) in [
                (false, "GPU", PALETTE[0]),
                (
                    true,
                    "outlier: more than 10% below the fleet's median of the others",
                    PALETTE[1],
                ),
            ] {
                if outlier && !has_outlier {
                    continue;
                }
                chart
                    .draw_series(
                        bars.iter()
                            .enumerate()
                            .filter(|(_, b)| b.outlier == outlier)
                            .map(|(i, b)| {
                                let x = i as f64 + 0.15;
                                Rectangle::new([(x, 0.0), (x + 0.7, b.value)], color.filled())
                            }),
                    )?
                    .label(name)
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                    });
            }
            if has_reference {
                chart
                    .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                        b.reference.map(|r| {
                            let x = i as f64 + 0.15;
                            PathElement::new(vec![(x, r), (x + 0.7, r)], BLACK.stroke_width(3))
                        })
                    }))?
                    .label("datasheet figure")
                    .legend(|(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(3))
                    });
            }
            legend(&mut chart, SeriesLabelPosition::UpperRight, z)?;
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_within_ten_times_share_a_scale_others_get_their_own() {
        // 2 MiB and 3 MiB compare; 95 MiB is 47 times 2 MiB: its own scale.
        let mib = 1024.0 * 1024.0;
        assert_eq!(scale_groups(&[2.0 * mib, 95.0 * mib, 3.0 * mib]), [0, 1, 0]);
        assert_eq!(scale_groups(&[5.0, 50.0, 500.0]), [0, 0, 1]);
        assert_eq!(scale_groups(&[7.0]), [0]);
        assert!(scale_groups(&[]).is_empty());
        // Zero (a run with no allocation) groups as one byte, never divides by zero.
        assert_eq!(scale_groups(&[0.0, 5.0, 100.0]), [0, 0, 1]);
    }

    #[test]
    fn axes_fit_the_data_linear_under_a_decade_log_from_one() {
        // 2 to 9: under a decade, linear, no empty decade below or above.
        let f = fit([2.0, 5.0, 9.0].into_iter(), 4.0, false);
        assert!(
            !f.log && f.lo > 0.0 && f.lo < 2.0 && f.hi > 9.0 && f.hi < 20.0,
            "{f:?}"
        );
        // Bars start at zero.
        assert_eq!(fit([2.0, 9.0].into_iter(), 3.0, true).lo, 0.0);
        // 0.003 to 40: log, from just under the smallest to the headroom over the largest.
        let f = fit([0.003, 40.0].into_iter(), 3.0, true);
        assert!(
            f.log && f.lo > 0.002 && f.lo < 0.003 && f.hi == 120.0,
            "{f:?}"
        );
        // Nothing positive: a plain unit axis.
        assert!(!fit([0.0, f64::NAN].into_iter(), 3.0, false).log);
    }

    #[test]
    fn a_chart_is_never_shown_so_narrow_its_text_is_under_11_px() {
        for width in [600, 640, 900, 1200] {
            let k = Sizes::of(width).k;
            let smallest = BASE_FONT / SVG_FONT_RATIO * k * min_width(width) as f64 / width as f64;
            assert!(smallest >= MIN_TEXT_PX, "{width}: {smallest}");
        }
        // Wider charts scale their text up, so all of them may shrink to about the same width.
        assert!(min_width(1200).abs_diff(min_width(640)) <= 2);
    }

    #[test]
    fn phase_labels_thin_out_when_bars_are_many() {
        assert_eq!(phase_keys(3, 600).len(), 3);
        let many = phase_keys(60, width_for(60));
        assert_eq!(width_for(60), 1200);
        assert!(many.len() <= 1200 / 70, "{}", many.len());
        assert_eq!(many[0], 0.5);
    }
}
