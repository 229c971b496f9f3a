//! Human summaries of documents: short tables a person can read at a glance.

use std::fmt::Write;
use std::path::Path;

use lab::measure::document::MeasurementDocument;

/// Bytes with a binary prefix (the exact figure is in the JSON).
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// The table `measure` prints.
pub fn measurement(doc: &MeasurementDocument, path: &Path) -> String {
    let c = &doc.configuration;
    let m = &doc.synthetic_model;
    let mut s = String::new();
    let env = &doc.environment;
    if env.reference_device {
        let _ = writeln!(
            s,
            "CPU REFERENCE DEVICE: real arithmetic on the host CPU, not a GPU measurement"
        );
    }
    let name = env
        .details
        .get("gpu")
        .and_then(|g| g.get("name"))
        .or_else(|| env.details.get("cpu_model"));
    let _ = writeln!(
        s,
        "device {}{}  |  {}  |  [batch {} x context {} x width {}] -> hidden {}  |  seed {}",
        c.device,
        name.and_then(|n| n.as_str())
            .map(|n| format!(" ({n})"))
            .unwrap_or_default(),
        c.dtype,
        c.batch,
        c.context,
        c.width,
        c.hidden,
        c.seed
    );
    let _ = writeln!(
        s,
        "{} parameters ({}), {}; device set-up {:.3} s (not in any phase)",
        m.parameter_count,
        bytes(m.parameter_bytes),
        c.math_mode,
        doc.device_init_seconds
    );
    let _ = writeln!(
        s,
        "\n{:<13} {:>3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "phase",
        "#",
        "wall ms",
        "device ms",
        "alloc end",
        "alloc peak",
        "resv end",
        "resv peak",
        "free after"
    );
    for r in &doc.phases {
        let mem = &r.memory;
        let _ = writeln!(
            s,
            "{:<13} {:>3} {:>11.3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
            r.phase.name(),
            r.index,
            r.wall_seconds * 1e3,
            r.device_seconds
                .map_or("-".to_string(), |d| format!("{:.3}", d * 1e3)),
            bytes(mem.end_allocated_bytes),
            bytes(mem.peak_allocated_bytes),
            bytes(mem.end_reserved_bytes),
            bytes(mem.peak_reserved_bytes),
            mem.device_after
                .map_or("-".to_string(), |d| bytes(d.free_bytes)),
        );
    }
    let (wall, device) = doc.warm_forward_medians();
    if let Some(w) = wall {
        let _ = write!(s, "\nwarm forward median: {:.3} ms wall", w * 1e3);
        if let Some(d) = device {
            let _ = write!(s, ", {:.3} ms device", d * 1e3);
        }
        if let Some(flops) = doc.achieved_flops_per_second() {
            let _ = write!(s, "; {:.2} GFLOP/s achieved", flops / 1e9);
        }
        s.push('\n');
    }
    match &doc.check {
        Some(ch) => {
            let _ = writeln!(
                s,
                "check: {} (relative error {:.2e}, bound {:.0e}, {} rows vs float64 reference)",
                if ch.passed { "passed" } else { "FAILED" },
                ch.relative_error,
                ch.bound,
                ch.rows.len()
            );
        }
        None => s.push_str("check: not run (no forward pass finished)\n"),
    }
    let _ = writeln!(
        s,
        "{}: {}",
        if doc.complete {
            "complete"
        } else {
            "INCOMPLETE"
        },
        path.display()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_prefixes() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(132_608), "129.50 KiB");
        assert_eq!(bytes(20 << 20), "20.00 MiB");
    }
}
