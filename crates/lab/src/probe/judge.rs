//! Each measured figure against its datasheet figure, and each GPU against the rest of its lot.
//!
//! - Pinned host copies are compared with one direction of the PCIe link the model is built for
//!   (transfer rate x lanes x line encoding): a link trained at a lower generation or width, or a
//!   slot narrower than the card, shows here under load.
//! - A device-to-device copy reads and writes every byte: its memory traffic, twice the copy
//!   rate, is compared with the memory bandwidth.
//! - A peer copy is compared with one direction of NVLink when the model has it and NVML reports
//!   active links, else with one direction of PCIe.
//! - A product is compared with the model's dense peak for its data type.
//!
//! Pageable copies are reported and never judged (the host's memory and the driver's staging
//! decide them). A figure under its threshold is a warning with the figures; a GPU more than
//! [`super::LOT_OUTLIER_PERCENT`] below the median of the rest of its lot, on any figure, is the
//! lot's outlier.

use serde_json::json;

use super::{
    CopyFigure, CopyKind, DeviceProbe, FigureStatus, LotOutlierFigure, ProbeDocument, Reference,
};
use crate::lot::{Finding, Severity};
use crate::stats::low_outliers_of_lot;
use rent::datasheet::{Datasheet, DatasheetRow};

fn reference(measured: f64, value: f64, basis: String, threshold: f64) -> Reference {
    let percent = measured / value * 100.0;
    Reference {
        value,
        basis,
        percent,
        threshold_percent: threshold,
        below_threshold: percent < threshold,
    }
}

/// The datasheet reference of a copy on `row` (`nvlink_active`: the source GPU reports active
/// NVLink links), or `None` when the copy is not judged.
fn copy_reference(
    copy: &CopyFigure,
    row: &DatasheetRow,
    nvlink_active: bool,
    threshold: f64,
) -> Option<Reference> {
    let rate = copy.gb_per_s?;
    if !copy.kind.judged() {
        return None;
    }
    let pcie = |what: &str| -> Option<(f64, String)> {
        let link = row.pcie_gb_s_per_direction()?;
        Some((
            link,
            format!(
                "{what}: one direction of the {}'s PCIe Gen{} x{} link, {link:.1} GB/s (transfer rate x lanes x line encoding)",
                row.model, row.pcie_generation, row.pcie_lanes
            ),
        ))
    };
    let (value, basis, measured) = match copy.kind {
        CopyKind::H2dPinned | CopyKind::D2hPinned => {
            let (v, b) = pcie("copy rate")?;
            (v, b, rate)
        }
        CopyKind::D2d => (
            row.memory_bandwidth_gb_s,
            format!(
                "memory traffic (twice the copy rate: every byte is read and written) against the {}'s memory bandwidth, {} GB/s",
                row.model, row.memory_bandwidth_gb_s
            ),
            2.0 * rate,
        ),
        CopyKind::P2p => match row.nvlink_gb_s_per_direction() {
            Some(nv) if nvlink_active => (
                nv,
                format!(
                    "copy rate: one direction of the {}'s NVLink, {nv} GB/s (half the {} GB/s the datasheet gives for both)",
                    row.model,
                    row.nvlink_gb_s.unwrap_or(nv * 2.0)
                ),
                rate,
            ),
            _ => {
                let (v, b) = pcie("copy rate without NVLink")?;
                (v, b, rate)
            }
        },
        _ => return None,
    };
    Some(reference(measured, value, basis, threshold))
}

fn device_row<'d>(device: &DeviceProbe, datasheet: &'d Datasheet) -> Option<&'d DatasheetRow> {
    device
        .facts
        .as_ref()
        .and_then(|f| datasheet.for_cuda_name(&f.name))
}

fn nvlink_active(device: Option<&DeviceProbe>) -> bool {
    device
        .and_then(|d| d.facts.as_ref())
        .and_then(|f| f.nvlink_active_links)
        .is_some_and(|n| n > 0)
}

/// Compares every measured figure of `doc` with `datasheet`, names the lot's outliers, and puts
/// `lot_findings` (the checks of `environment --device all`) and the probe's own findings into
/// the document, warnings first. Also settles `complete`.
pub fn judge(doc: &mut ProbeDocument, datasheet: &Datasheet, lot_findings: Vec<Finding>) {
    let copy_threshold = doc.configuration.copy_threshold_percent;
    let gemm_threshold = doc.configuration.gemm_threshold_percent;
    let mut findings = lot_findings;
    for device in &mut doc.devices {
        let Some(row) = device_row(device, datasheet).cloned() else {
            continue;
        };
        let links = nvlink_active(Some(device));
        for copy in &mut device.copies {
            copy.reference = copy_reference(copy, &row, links, copy_threshold);
            if let (Some(r), Some(rate)) = (&copy.reference, copy.gb_per_s)
                && r.below_threshold
            {
                findings.push(Finding::warning(
                    "copy_below_datasheet",
                    Some(&device.device),
                    format!(
                        "{} {}: {rate:.1} GB/s is {:.0}% of its datasheet figure (threshold {:.0}%; {})",
                        device.device,
                        copy.kind.label(),
                        r.percent,
                        r.threshold_percent,
                        r.basis
                    ),
                    json!({"kind": copy.kind.name(), "gb_per_s": rate, "reference_gb_per_s": r.value, "percent": r.percent, "threshold_percent": r.threshold_percent}),
                ));
            }
        }
        for gemm in &mut device.gemms {
            let (Some(tflops), Some(peak)) = (gemm.tflops, row.tflops(gemm.kind)) else {
                continue;
            };
            let r = reference(
                tflops,
                peak,
                format!(
                    "the {}'s dense {} peak, {peak} TFLOP/s ({} in the datasheet table)",
                    row.model,
                    gemm.kind,
                    gemm.kind.column()
                ),
                gemm_threshold,
            );
            if r.below_threshold {
                findings.push(Finding::warning(
                    "gemm_below_datasheet",
                    Some(&device.device),
                    format!(
                        "{} {} products: {tflops:.1} TFLOP/s is {:.0}% of the dense datasheet peak {peak} TFLOP/s (threshold {:.0}%)",
                        device.device, gemm.kind, r.percent, r.threshold_percent
                    ),
                    json!({"kind": gemm.kind.name(), "tflops": tflops, "reference_tflops": peak, "percent": r.percent, "threshold_percent": r.threshold_percent}),
                ));
            }
            gemm.reference = Some(r);
        }
        device.datasheet = Some(row);
    }
    for i in 0..doc.peers.len() {
        let from = doc.devices.iter().find(|d| d.device == doc.peers[i].from);
        let Some(row) = from.and_then(|d| device_row(d, datasheet)) else {
            continue;
        };
        let links = nvlink_active(from);
        let peer = &mut doc.peers[i];
        peer.reference = copy_reference(peer, row, links, copy_threshold);
        if let (Some(r), Some(rate)) = (&peer.reference, peer.gb_per_s)
            && r.below_threshold
        {
            findings.push(Finding::warning(
                "copy_below_datasheet",
                Some(&peer.from),
                format!(
                    "peer copy {} -> {}: {rate:.1} GB/s is {:.0}% of its datasheet figure (threshold {:.0}%; {})",
                    peer.from, peer.to, r.percent, r.threshold_percent, r.basis
                ),
                json!({"kind": "p2p", "to": peer.to, "gb_per_s": rate, "reference_gb_per_s": r.value, "percent": r.percent, "threshold_percent": r.threshold_percent}),
            ));
        }
    }
    doc.lot_outliers = lot_outliers(&doc.devices, doc.configuration.lot_outlier_percent);
    let mut outlying: Vec<&str> = Vec::new();
    for o in &doc.lot_outliers {
        if !outlying.contains(&o.device.as_str()) {
            outlying.push(&o.device);
        }
    }
    for device in outlying {
        let mine: Vec<&LotOutlierFigure> = doc
            .lot_outliers
            .iter()
            .filter(|o| o.device == device)
            .collect();
        let parts: Vec<String> = mine
            .iter()
            .map(|o| {
                let unit = if is_copy(&o.figure) {
                    "GB/s"
                } else {
                    "TFLOP/s"
                };
                format!(
                    "{} {:.3} {unit}, {:.0}% below the others' median {:.3}",
                    o.figure, o.value, o.percent_below, o.median_of_others
                )
            })
            .collect();
        findings.push(Finding::warning(
            "lot_outlier",
            Some(device),
            format!(
                "{device} is the lot's outlier, more than {:.0}% below the other GPUs on {} figure(s): {}",
                doc.configuration.lot_outlier_percent,
                mine.len(),
                parts.join("; ")
            ),
            json!({"figures": mine}),
        ));
    }
    findings.sort_by_key(|f| f.severity == Severity::Note);
    doc.warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    doc.findings = findings;
    let failed = doc
        .devices
        .iter()
        .flat_map(|d| {
            d.copies
                .iter()
                .map(|c| c.status)
                .chain(d.gemms.iter().map(|g| g.status))
        })
        .chain(doc.peers.iter().map(|p| p.status))
        .any(|s| s == FigureStatus::Failed);
    let device_error = doc.devices.iter().find_map(|d| d.error.clone());
    if doc.error.is_none() {
        doc.error = device_error.or_else(|| nothing_measured(doc));
    }
    doc.complete = !failed && doc.error.is_none();
}

/// A device that planned figures but measured none (every one skipped, typically because the
/// time budget ran out while its buffers were being filled) has told the renter nothing: the
/// probe must not pass for complete then, or a script reading the exit code would take silence
/// for a healthy card.
fn nothing_measured(doc: &ProbeDocument) -> Option<String> {
    doc.devices.iter().find_map(|d| {
        let statuses: Vec<(FigureStatus, Option<&str>)> = d
            .copies
            .iter()
            .map(|c| (c.status, c.note.as_deref()))
            .chain(d.gemms.iter().map(|g| (g.status, g.note.as_deref())))
            .collect();
        if statuses.is_empty() || statuses.iter().any(|(s, _)| *s == FigureStatus::Measured) {
            return None;
        }
        let why = statuses
            .iter()
            .find_map(|(_, note)| *note)
            .unwrap_or("no reason recorded");
        Some(format!(
            "{}: nothing was measured, all {} planned figures were skipped (the first: {why}); give it more --seconds or smaller sizes",
            d.device,
            statuses.len()
        ))
    })
}

fn is_copy(figure: &str) -> bool {
    [
        CopyKind::H2dPinned,
        CopyKind::H2dPageable,
        CopyKind::D2hPinned,
        CopyKind::D2hPageable,
        CopyKind::D2d,
    ]
    .iter()
    .any(|k| k.name() == figure)
}

/// For every figure measured on two GPUs or more, the GPUs more than `tolerance_percent` below
/// the median of the others (copies by kind in GB/s, products by data type in TFLOP/s).
pub fn lot_outliers(devices: &[DeviceProbe], tolerance_percent: f64) -> Vec<LotOutlierFigure> {
    // (figure, device, value), GPUs only, in run order.
    let mut flat: Vec<(&str, &str, f64)> = Vec::new();
    for d in devices.iter().filter(|d| d.facts.is_some()) {
        for c in &d.copies {
            if let Some(v) = c.gb_per_s {
                flat.push((c.kind.name(), &d.device, v));
            }
        }
        for g in &d.gemms {
            if let Some(v) = g.tflops {
                flat.push((g.kind.name(), &d.device, v));
            }
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for (n, _, _) in &flat {
        if !names.contains(n) {
            names.push(n);
        }
    }
    let mut out = Vec::new();
    for name in names {
        let members: Vec<(&str, f64)> = flat
            .iter()
            .filter(|(n, _, _)| *n == name)
            .map(|(_, d, v)| (*d, *v))
            .collect();
        let values: Vec<f64> = members.iter().map(|(_, v)| *v).collect();
        for o in low_outliers_of_lot(&values, tolerance_percent) {
            out.push(LotOutlierFigure {
                device: members[o.index].0.to_string(),
                figure: name.to_string(),
                value: o.value,
                median_of_others: o.median_of_others,
                percent_below: o.percent_below,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::{ENVIRONMENT_SCHEMA, Environment};
    use crate::lot::GpuFacts;
    use crate::probe::{
        COPY_THRESHOLD_PERCENT, CopyFigure, GEMM_THRESHOLD_PERCENT, GemmFigure,
        LOT_OUTLIER_PERCENT, PROBE_SCHEMA, ProbeConfiguration,
    };
    use crate::tool::ToolInfo;
    use rent::datasheet::GemmKind;

    fn env(device: &str) -> Environment {
        Environment {
            schema: ENVIRONMENT_SCHEMA.into(),
            tool: ToolInfo::new(None),
            requested_device: device.into(),
            backend: "cuda".into(),
            reference_device: false,
            usable: true,
            problem: None,
            details: json!({}),
        }
    }

    /// An H200 whose copies and products took the given seconds (figures computed by `record`
    /// from the sizes, as the device does).
    fn h200(device: &str, h2d_seconds: f64, d2d_seconds: f64, bf16_seconds: f64) -> DeviceProbe {
        let bytes = 1u64 << 30;
        let mut h2d = CopyFigure::new(CopyKind::H2dPinned, "host pinned", device, bytes);
        h2d.record(&[h2d_seconds; 5]);
        let mut pageable = CopyFigure::new(CopyKind::H2dPageable, "host pageable", device, bytes);
        pageable.record(&[1.0; 5]);
        let mut d2d = CopyFigure::new(CopyKind::D2d, device, device, bytes);
        d2d.record(&[d2d_seconds; 5]);
        let mut bf16 = GemmFigure::square(GemmKind::Bfloat16, 16384, "test".into());
        bf16.record(&[bf16_seconds; 5]);
        DeviceProbe {
            device: device.into(),
            environment: env(device),
            facts: Some(GpuFacts {
                device: device.into(),
                name: "NVIDIA H200".into(),
                nvlink_active_links: Some(18),
                ..GpuFacts::default()
            }),
            datasheet: None,
            copies: vec![h2d, pageable, d2d],
            gemms: vec![bf16],
            pcie_after_copies: None,
            elapsed_seconds: 1.0,
            error: None,
        }
    }

    fn doc(devices: Vec<DeviceProbe>) -> ProbeDocument {
        ProbeDocument {
            schema: PROBE_SCHEMA.into(),
            tool: ToolInfo::new(None),
            started_utc: "2026-12-01T00:00:00Z".into(),
            requested_device: "all".into(),
            reference_device: false,
            configuration: ProbeConfiguration {
                seconds_per_gpu: 60.0,
                concurrent: false,
                copy_bytes: 1 << 30,
                gemm_size: None,
                min_samples: 3,
                max_samples: 50,
                copy_threshold_percent: COPY_THRESHOLD_PERCENT,
                gemm_threshold_percent: GEMM_THRESHOLD_PERCENT,
                lot_outlier_percent: LOT_OUTLIER_PERCENT,
                timing: "test".into(),
            },
            datasheet: "embedded".into(),
            package: None,
            node: None,
            visible_devices: Some(devices.len()),
            devices,
            peer_access: vec![],
            peers: vec![],
            lot_outliers: vec![],
            findings: vec![],
            warnings: 0,
            elapsed_seconds: 1.0,
            complete: false,
            error: None,
        }
    }

    /// Seconds for `bytes` at `gb_s`.
    fn at(gb_s: f64) -> f64 {
        (1u64 << 30) as f64 / (gb_s * 1e9)
    }

    fn bf16_at(tflops: f64) -> f64 {
        2.0 * 16384f64.powi(3) / (tflops * 1e12)
    }

    #[test]
    fn percentages_against_the_h200_datasheet() {
        let mut d = doc(vec![h200("cuda:0", at(55.0), at(2000.0), bf16_at(790.0))]);
        judge(&mut d, &Datasheet::embedded(), vec![]);
        let dev = &d.devices[0];
        assert_eq!(dev.datasheet.as_ref().unwrap().gpu, "h200");
        let h2d = dev.copies[0].reference.as_ref().unwrap();
        // 55 GB/s of one direction of PCIe Gen5 x16 (63.0 GB/s).
        assert!(
            (h2d.percent - 55.0 / 63.015_384 * 100.0).abs() < 0.01,
            "{}",
            h2d.percent
        );
        assert!(!h2d.below_threshold);
        // Pageable copies are not judged.
        assert!(dev.copies[1].reference.is_none());
        // A 2000 GB/s copy moves 4000 GB/s of memory traffic: 83% of 4800.
        let d2d = dev.copies[2].reference.as_ref().unwrap();
        assert!((d2d.percent - 4000.0 / 4800.0 * 100.0).abs() < 1e-9);
        // The figure: about 790 of 989 TFLOP/s dense bf16 is about 80%.
        let bf16 = dev.gemms[0].reference.as_ref().unwrap();
        assert!((bf16.percent - 790.0 / 989.4 * 100.0).abs() < 1e-6);
        assert!(d.findings.is_empty() && d.complete);
    }

    #[test]
    fn a_slow_link_and_a_slow_gpu_are_warned_and_the_outlier_named() {
        let mut d = doc(vec![
            h200("cuda:0", at(55.0), at(2000.0), bf16_at(790.0)),
            h200("cuda:1", at(7.0), at(2000.0), bf16_at(400.0)),
        ]);
        judge(&mut d, &Datasheet::embedded(), vec![]);
        let codes: Vec<(&str, Option<&str>)> = d
            .findings
            .iter()
            .map(|f| (f.code.as_str(), f.device.as_deref()))
            .collect();
        assert_eq!(
            codes,
            [
                ("copy_below_datasheet", Some("cuda:1")),
                ("gemm_below_datasheet", Some("cuda:1")),
                ("lot_outlier", Some("cuda:1")),
            ]
        );
        assert_eq!(d.warnings, 3);
        assert!(
            d.findings[2].message.contains(
                "on 2 figure(s): h2d_pinned 7.000 GB/s, 87% below the others' median 55.000"
            ),
            "{}",
            d.findings[2].message
        );
        let figures: Vec<&str> = d.lot_outliers.iter().map(|o| o.figure.as_str()).collect();
        assert_eq!(figures, ["h2d_pinned", "bfloat16"]);
        assert!(
            d.findings[1]
                .message
                .contains("400.0 TFLOP/s is 40% of the dense datasheet peak 989.4")
        );
    }

    #[test]
    fn a_device_with_every_figure_skipped_makes_it_incomplete() {
        let mut dev = h200("cuda:0", at(55.0), at(2000.0), bf16_at(790.0));
        for c in &mut dev.copies {
            c.give_up(FigureStatus::Skipped, "the time budget ran out".into());
        }
        for g in &mut dev.gemms {
            g.give_up(FigureStatus::Skipped, "the time budget ran out".into());
        }
        let mut d = doc(vec![dev]);
        judge(&mut d, &Datasheet::embedded(), vec![]);
        assert!(!d.complete);
        let e = d.error.expect("an error naming the silent device");
        assert!(
            e.starts_with("cuda:0: nothing was measured") && e.contains("time budget ran out"),
            "{e}"
        );
        // One measured figure is enough: skipping the rest for a stated reason stays complete.
        let mut dev = h200("cuda:0", at(55.0), at(2000.0), bf16_at(790.0));
        dev.gemms[0].give_up(FigureStatus::Skipped, "no FP8 on this card".into());
        let mut d = doc(vec![dev]);
        judge(&mut d, &Datasheet::embedded(), vec![]);
        assert!(d.complete && d.error.is_none());
    }

    #[test]
    fn lot_findings_come_first_among_warnings_and_failures_make_it_incomplete() {
        let mut dev = h200("cuda:0", at(55.0), at(2000.0), bf16_at(790.0));
        dev.gemms[0].give_up(FigureStatus::Failed, "cublasLtMatmul failed".into());
        let mut d = doc(vec![dev]);
        let lot = vec![Finding::warning("gpu_missing", None, "x".into(), json!({}))];
        judge(&mut d, &Datasheet::embedded(), lot);
        assert_eq!(d.findings[0].code, "gpu_missing");
        assert!(!d.complete);
    }
}
