//! Human summaries of documents: short tables a person can read at a glance.

use std::fmt::Write;
use std::path::Path;

use lab::alloc::Action;
use lab::measure::document::MeasurementDocument;
use lab::measure::preflight::PlanReport;
use lab::workspaces::{AddmmPath, MemoryPolicy};
use lab_io::bytes::binary as bytes;

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
    if let Some(line) = workspaces_line(&c.memory_policy) {
        let _ = writeln!(s, "{line}");
    }
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

/// The library workspaces in a line, or nothing for a device without any.
fn workspaces_line(p: &MemoryPolicy) -> Option<String> {
    let w = p.workspaces();
    if w.allocations().is_empty() && w.cublaslt_bytes == 0 {
        return None;
    }
    let lt = if w.cublaslt_unified {
        format!("{} inside it (unified)", bytes(w.cublaslt_bytes))
    } else if !p.linear_paths.is_empty() && !p.uses_cublaslt() {
        format!(
            "{} not allocated (no Linear takes the cuBLASLt path)",
            bytes(w.cublaslt_bytes)
        )
    } else {
        bytes(w.cublaslt_bytes)
    };
    Some(format!(
        "library workspaces (first product, kept): cuBLAS {}, cuBLASLt {lt} ({})",
        bytes(w.cublas_bytes),
        p.workspaces_from
    ))
}

/// The table `measure --plan` prints.
pub fn plan(r: &PlanReport) -> String {
    let c = &r.configuration;
    let mut s = String::new();
    let device = match &r.compute_capability {
        Some(cc) => format!("{} (compute capability {cc})", r.device),
        None => r.device.clone(),
    };
    let _ = writeln!(
        s,
        "PLAN (no device opened): {device}  |  {}  |  [batch {} x context {} x width {}] -> hidden {}  |  warmup {}, repeats {}",
        c.dtype, c.batch, c.context, c.width, c.hidden, c.warmup, c.repeats
    );
    let _ = writeln!(
        s,
        "counters of {}'s caching allocator{}",
        c.memory_policy.mirrors,
        workspaces_line(&c.memory_policy)
            .map(|l| format!("; {l}"))
            .unwrap_or_else(|| "; no library workspace".to_string())
    );
    for l in &c.memory_policy.linear_paths {
        let why = match l.path {
            AddmmPath::CublasLt => String::new(),
            AddmmPath::Cublas => format!(" ({})", l.reason),
        };
        let _ = writeln!(s, "{}: {}{why}", l.layer, l.path.describe());
    }
    let _ = writeln!(
        s,
        "\nallocation sequence\n{:<13} {:>3}  {:<8} {:<19} {:>11} {:>11} {:<5} {:>11}",
        "phase", "#", "action", "what", "requested", "block", "pool", "new segment"
    );
    for a in &r.allocations {
        let e = &a.event;
        let (phase, index) = match a.phase {
            Some(p) => (p.name(), a.index.to_string()),
            None => ("(between)", "-".to_string()),
        };
        let _ = writeln!(
            s,
            "{:<13} {:>3}  {:<8} {:<19} {:>11} {:>11} {:<5} {:>11}",
            phase,
            index,
            match e.action {
                Action::Allocate => "allocate",
                Action::Free => "free",
            },
            e.what,
            bytes(e.requested_bytes),
            bytes(e.block_bytes),
            match e.pool {
                lab::alloc::PoolName::Small => "small",
                lab::alloc::PoolName::Large => "large",
            },
            if e.new_segment_bytes > 0 {
                bytes(e.new_segment_bytes)
            } else {
                "-".to_string()
            }
        );
    }
    let _ = writeln!(
        s,
        "\n{:<13} {:>3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "phase", "#", "alloc base", "alloc end", "alloc peak", "resv base", "resv end", "resv peak"
    );
    for p in &r.phases {
        let m = &p.memory;
        let _ = writeln!(
            s,
            "{:<13} {:>3} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
            p.phase.name(),
            p.index,
            bytes(m.baseline_allocated_bytes),
            bytes(m.end_allocated_bytes),
            bytes(m.peak_allocated_bytes),
            bytes(m.baseline_reserved_bytes),
            bytes(m.end_reserved_bytes),
            bytes(m.peak_reserved_bytes),
        );
    }
    let _ = writeln!(
        s,
        "\npeak reserved: {} ({} bytes), what the pre-flight check compares with the free memory",
        bytes(r.peak_reserved_bytes),
        r.peak_reserved_bytes
    );
    s
}
