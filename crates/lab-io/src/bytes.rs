//! Byte counts as a person reads them, in one place for every crate: a figure in GiB at a stated
//! precision ([`gib`]), a figure in the largest binary unit that keeps it at least 1
//! ([`binary`]), and a limit as it is stated ([`exact`]). The exact count is always in the JSON;
//! these are for sentences and tables. GiB = 2^30 bytes throughout.

/// A byte count of any of the integer widths the crates keep them in (a budget's shortfall is
/// negative), as the float the formatters divide.
pub trait Count: Copy {
    /// The count as a float (exact below 2^53, the nearest float above).
    fn as_f64(self) -> f64;
}

macro_rules! count {
    ($($t:ty),*) => {$(
        impl Count for $t {
            fn as_f64(self) -> f64 {
                self as f64
            }
        }
    )*};
}
count!(u64, u128, i128, usize);

/// Bytes per GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// `bytes` in GiB with `decimals` places and no unit: `gib(14_000_000_000u64, 2)` is `13.04`.
pub fn gib(bytes: impl Count, decimals: usize) -> String {
    format!("{:.decimals$}", bytes.as_f64() / GIB)
}

/// Bytes in the largest binary unit (KiB to TiB) in which the figure is at least 1, with two
/// decimals (`129.50 KiB`); below 1 KiB, whole bytes (`512 B`).
pub fn binary(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// A byte count as the limits are stated: `16 MiB`, `64 KiB`, or bytes.
pub fn exact(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn gib_at_the_precision_asked() {
        assert_eq!(gib(14_000_000_000u64, 2), "13.04");
        assert_eq!(gib(14_000_000_000u128, 1), "13.0");
        assert_eq!(gib(-(1i128 << 29), 2), "-0.50");
        assert_eq!(gib(0u64, 2), "0.00");
        assert_eq!(gib(3usize << 30, 0), "3");
    }

    #[test]
    fn binary_units() {
        assert_eq!(binary(0), "0 B");
        assert_eq!(binary(512), "512 B");
        assert_eq!(binary(1023), "1023 B");
        assert_eq!(binary(1024), "1.00 KiB");
        assert_eq!(binary(132_608), "129.50 KiB");
        assert_eq!(binary(20 << 20), "20.00 MiB");
        assert_eq!(binary(256 << 20), "256.00 MiB");
        assert_eq!(binary(3 << 30), "3.00 GiB");
        assert_eq!(binary(5 << 40), "5.00 TiB");
        assert_eq!(binary(5 << 50), "5120.00 TiB");
    }

    #[test]
    fn exact_limits() {
        assert_eq!(exact(16 << 20), "16 MiB");
        assert_eq!(exact(64 << 10), "64 KiB");
        assert_eq!(exact(1 << 30), "1 GiB");
        assert_eq!(exact(1000), "1000 bytes");
        assert_eq!(exact((1 << 20) + 1), "1048577 bytes");
    }

    proptest! {
        /// The unit is the largest in which the figure is at least 1: the printed figure is in
        /// [1, 1024) except in bytes and past TiB, and it reads back to the count within the
        /// rounding of two decimals.
        #[test]
        fn binary_reads_back(b in 0u64..) {
            let s = binary(b);
            let (figure, unit) = s.split_once(' ').unwrap();
            let scale = match unit {
                "B" => 1.0,
                "KiB" => 1024.0,
                "MiB" => 1024f64.powi(2),
                "GiB" => 1024f64.powi(3),
                "TiB" => 1024f64.powi(4),
                other => panic!("{other}"),
            };
            let v: f64 = figure.parse().unwrap();
            if unit == "B" {
                prop_assert!(b < 1024);
                prop_assert_eq!(v as u64, b);
            } else {
                prop_assert!(v >= 1.0);
                prop_assert!(unit == "TiB" || v <= 1024.0);
                prop_assert!((v * scale - b as f64).abs() <= 0.005 * scale + 1.0);
            }
        }

        /// An exact limit reads back to the count it states.
        #[test]
        fn exact_reads_back(b in 0u64..) {
            let s = exact(b);
            let (figure, unit) = s.split_once(' ').unwrap();
            let n: u64 = figure.parse().unwrap();
            let shift = match unit { "GiB" => 30, "MiB" => 20, "KiB" => 10, "bytes" => 0, other => panic!("{other}") };
            prop_assert_eq!(u128::from(n) << shift, u128::from(b));
        }
    }
}
