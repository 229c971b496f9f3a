//! Units for axes: binary prefixes for bytes, decimal ones for FLOP/s, compact tick labels.

/// A unit an axis is drawn in: values are divided by `scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Unit {
    pub name: &'static str,
    pub scale: f64,
}

/// The largest binary unit (B, KiB, MiB, GiB, TiB) in which `max_bytes` is at least 1.
pub(crate) fn bytes_unit(max_bytes: f64) -> Unit {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut i = 0;
    while i + 1 < units.len() && max_bytes >= 1024f64.powi(i as i32 + 1) {
        i += 1;
    }
    Unit {
        name: units[i],
        scale: 1024f64.powi(i as i32),
    }
}

/// The largest decimal unit of FLOP/s in which `max` is at least 1.
pub(crate) fn flops_unit(max: f64) -> Unit {
    let units = [
        "FLOP/s", "kFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s",
    ];
    let mut i = 0;
    while i + 1 < units.len() && max >= 1000f64.powi(i as i32 + 1) {
        i += 1;
    }
    Unit {
        name: units[i],
        scale: 1000f64.powi(i as i32),
    }
}

/// A tick label with about three significant digits and no float noise (`0.30000000000000004`
/// becomes `0.3`).
pub(crate) fn tick(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor() as i32;
    if !(-4..=6).contains(&magnitude) {
        return format!("{v:.1e}");
    }
    let decimals = (2 - magnitude).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A measured figure for a table cell: `decimals` places while it is below ten million, else
/// scientific notation. A document is only JSON: nothing stops it holding 1e308, whose fixed
/// notation (309 digits) would break the table's layout.
pub(crate) fn figure(v: f64, decimals: usize) -> String {
    if v.is_finite() && v.abs() < 1e7 {
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_ticks() {
        assert_eq!(bytes_unit(512.0).name, "B");
        assert_eq!(bytes_unit(2048.0).name, "KiB");
        assert_eq!(bytes_unit(3.0 * 1024.0 * 1024.0 * 1024.0).name, "GiB");
        assert_eq!(flops_unit(4.2e10).name, "GFLOP/s");
        assert_eq!(flops_unit(12.0).name, "FLOP/s");
        assert_eq!(tick(0.1 + 0.2), "0.3");
        assert_eq!(tick(1000.0), "1000");
        assert_eq!(tick(0.002), "0.002");
        assert_eq!(tick(12.5), "12.5");
        assert_eq!(tick(2.5e-7), "2.5e-7");
    }

    #[test]
    fn absurd_figures_stay_short_in_tables() {
        assert_eq!(figure(1234.567, 1), "1234.6");
        assert_eq!(figure(9_999_999.0, 1), "9999999.0");
        assert_eq!(figure(1e308, 1), "1.000e308");
        assert_eq!(figure(-1e308, 1), "-1.000e308");
        assert_eq!(figure(f64::INFINITY, 1), "inf");
    }
}
