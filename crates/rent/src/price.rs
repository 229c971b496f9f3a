//! Package prices: what a number of lots costs, and what one accepted useful result costs.
//!
//! The rules are the original kit's. The total is the lot price times the number of lots (a lot
//! price already covers all the GPUs of the lot, so it is never multiplied by the GPU count); the
//! GPU count is `gpus_per_lot x lots`. Money is whole cents in `u64`, multiplied with overflow
//! checked; no hourly rate, no proration, no currency conversion. The unit price divides the
//! *whole* package price by the number of distinct accepted useful results, and is an exact
//! decimal rounded once, half to even, to 1/10000 of a cent ([`unit_price_cents`]).

use rust_decimal::Decimal;
use serde::Serialize;

use crate::catalogue::{Catalogue, DURATIONS};
use crate::units::{CountError, parse_count, ratio_half_even};

/// How the number of lots is named in refusals.
pub const LOTS: &str = "number of lots";
/// How `--accepted-results` is named in refusals.
pub const ACCEPTED_RESULTS: &str = "number of accepted results (distinct accepted useful units)";

/// A package price that cannot be computed as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// A GPU slug the catalogue does not have.
    #[error("{}", unknown_gpu(.gpu, .valid, .nearest.as_deref()))]
    UnknownGpu {
        /// What was asked for.
        gpu: String,
        /// The catalogue's slugs.
        valid: Vec<String>,
        /// The closest slug, if the catalogue has any.
        nearest: Option<String>,
    },
    /// A duration other than 3, 7 or 30 days.
    #[error("duration `{0}` is not an offered package duration; expected 3, 7 or 30 (days)")]
    Days(String),
    /// A bad number of lots or accepted results.
    #[error(transparent)]
    Count(#[from] CountError),
    /// lot price x lots beyond u64 cents.
    #[error(
        "{lots} lots of `{gpu}` at {lot_price_cents} cents each overflow the total (more than \
         18446744073709551615 cents); expected fewer lots"
    )]
    TotalOverflow {
        /// The slug.
        gpu: String,
        /// Lots asked for.
        lots: u64,
        /// Price of one lot.
        lot_price_cents: u64,
    },
    /// So many accepted results that the price of one rounds to 0.0000 cents although the
    /// package costs something: refused rather than printed as a free result.
    #[error(
        "{total_cents} cents over {accepted} accepted results is less than 0.00005 cents a \
         result, which rounds to 0 at the 1/10000 cent the unit price is stated to; a package \
         that costs something is never shown at a price of 0: expected at most {most} accepted \
         results for this package (check the count)"
    )]
    UnitPriceRoundsToZero {
        /// The package's whole price.
        total_cents: u64,
        /// The accepted results given.
        accepted: u64,
        /// The most results whose unit price is still at least 0.0001 cents.
        most: u64,
    },
    /// gpus_per_lot x lots beyond u64.
    #[error(
        "{lots} lots of `{gpu}` with {gpus_per_lot} GPUs each overflow the GPU count; expected \
         fewer lots"
    )]
    GpuCountOverflow {
        /// The slug.
        gpu: String,
        /// Lots asked for.
        lots: u64,
        /// GPUs per lot.
        gpus_per_lot: u32,
    },
}

fn unknown_gpu(gpu: &str, valid: &[String], nearest: Option<&str>) -> String {
    let hint = nearest.map_or(String::new(), |n| format!("; did you mean `{n}`?"));
    format!(
        "unknown GPU `{gpu}`{hint} The catalogue offers: {}",
        if valid.is_empty() {
            "nothing".to_string()
        } else {
            valid.join(", ")
        }
    )
}

/// A priced package, with the JSON keys `price --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quote {
    /// GPU slug.
    pub gpu: String,
    /// Display name.
    pub model: String,
    /// Package duration.
    pub days: u32,
    /// Lots bought.
    pub lots: u64,
    /// GPUs in one lot.
    pub gpus_per_lot: u32,
    /// gpus_per_lot x lots.
    pub total_gpus: u64,
    /// Price of one lot for the whole duration.
    pub lot_price_cents: u64,
    /// lot_price_cents x lots.
    pub total_price_cents: u64,
    /// ISO 4217 code.
    pub currency: String,
    /// Distinct accepted useful results, when given.
    pub accepted_results: Option<u64>,
    /// total_price_cents / accepted_results, half-even to 4 places (a JSON string), or null.
    pub unit_price_cents: Option<Decimal>,
    /// The catalogue's path, or `embedded`.
    pub catalogue: String,
    /// The row's `source` (says "example" for the bundled prices).
    pub source: String,
}

impl Quote {
    /// Whether the price comes from an example row (see [`crate::catalogue::Tariff::is_example`]).
    pub fn is_example(&self) -> bool {
        self.source.to_ascii_lowercase().contains("example")
    }
}

/// Reads `--days`: 3, 7 or 30.
pub fn parse_days(text: &str) -> Result<u32, PriceError> {
    let t = text.trim();
    match t.parse::<u32>() {
        Ok(days) if DURATIONS.contains(&days) && t.bytes().all(|b| b.is_ascii_digit()) => Ok(days),
        _ => Err(PriceError::Days(text.to_string())),
    }
}

/// Reads `--lots`: a positive whole number in digits.
pub fn parse_lots(text: &str) -> Result<u64, CountError> {
    parse_count(LOTS, text)
}

/// Reads `--accepted-results`: a positive whole number in digits (no exponent, no fraction).
pub fn parse_accepted_results(text: &str) -> Result<u64, CountError> {
    parse_count(ACCEPTED_RESULTS, text)
}

/// Prices `lots` lots of `gpu` for `days` days from `catalogue`; with `accepted_results`, also the
/// price of one accepted result.
pub fn quote(
    catalogue: &Catalogue,
    gpu: &str,
    days: u32,
    lots: u64,
    accepted_results: Option<u64>,
) -> Result<Quote, PriceError> {
    let tariff = catalogue.find(gpu, days)?;
    if lots == 0 {
        return Err(CountError::Zero {
            what: LOTS,
            value: "0".to_string(),
        }
        .into());
    }
    let total_price_cents =
        tariff
            .price_cents
            .checked_mul(lots)
            .ok_or_else(|| PriceError::TotalOverflow {
                gpu: tariff.gpu.clone(),
                lots,
                lot_price_cents: tariff.price_cents,
            })?;
    let total_gpus = u64::from(tariff.gpus_per_lot)
        .checked_mul(lots)
        .ok_or_else(|| PriceError::GpuCountOverflow {
            gpu: tariff.gpu.clone(),
            lots,
            gpus_per_lot: tariff.gpus_per_lot,
        })?;
    let unit_price_cents = accepted_results
        .map(|n| unit_price_cents(total_price_cents, n))
        .transpose()?;
    Ok(Quote {
        gpu: tariff.gpu.clone(),
        model: tariff.model.clone(),
        days: tariff.days,
        lots,
        gpus_per_lot: tariff.gpus_per_lot,
        total_gpus,
        lot_price_cents: tariff.price_cents,
        total_price_cents,
        currency: tariff.currency.clone(),
        accepted_results,
        unit_price_cents,
        catalogue: catalogue.name().to_string(),
        source: tariff.source.clone(),
    })
}

/// The price of one accepted result: `total_cents / accepted`, an exact decimal rounded half to
/// even to 4 decimal places (1/10000 of a cent). Zero results are refused: there is no price
/// per nothing; and so are results so many that a package that costs something would show a
/// unit price of 0 ([`PriceError::UnitPriceRoundsToZero`]). Shared by every command that divides
/// a package price by results.
pub fn unit_price_cents(total_cents: u64, accepted: u64) -> Result<Decimal, PriceError> {
    if accepted == 0 {
        return Err(CountError::Zero {
            what: ACCEPTED_RESULTS,
            value: "0".to_string(),
        }
        .into());
    }
    // Cannot fail: total x 10^4 <= 1.9e23 fits u128, and the quotient fits a Decimal (< 7.9e28).
    let price = ratio_half_even(u128::from(total_cents), u128::from(accepted)).unwrap_or_default();
    if price.is_zero() && total_cents > 0 {
        // total x 10^4 / n rounds to at least 1 exactly when n < 2 x total x 10^4 (at a half, the
        // even digit is 0).
        let most = (2 * u128::from(total_cents) * 10_000 - 1).min(u128::from(u64::MAX));
        return Err(PriceError::UnitPriceRoundsToZero {
            total_cents,
            accepted,
            most: u64::try_from(most).unwrap_or(u64::MAX),
        });
    }
    Ok(price)
}

/// Whole cents as an amount in the currency's main unit, `123456` -> `1234.56`.
pub fn cents_to_amount(cents: u64) -> Decimal {
    Decimal::from_i128_with_scale(i128::from(cents), 2)
}

/// A decimal number of cents as an amount in the main unit, exactly (`1234.5678` -> `12.345678`).
pub fn decimal_cents_to_amount(cents: Decimal) -> Decimal {
    let mut amount = cents;
    // Scale 4 + 2 is far below the maximum of 28: exact.
    if amount.set_scale(cents.scale() + 2).is_err() {
        return cents / Decimal::ONE_HUNDRED;
    }
    amount
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn b200_two_lots_is_four_gpus_and_twice_the_lot_price() {
        let c = Catalogue::embedded();
        let lot = c.find("b200", 7).unwrap().price_cents;
        let q = quote(&c, "b200", 7, 2, None).unwrap();
        assert_eq!(q.total_gpus, 4);
        assert_eq!(q.gpus_per_lot, 2);
        assert_eq!(q.total_price_cents, 2 * lot);
        assert_eq!(q.unit_price_cents, None);
        assert!(q.is_example());
        let json = serde_json::to_value(&q).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut want = vec![
            "gpu",
            "model",
            "days",
            "lots",
            "gpus_per_lot",
            "total_gpus",
            "lot_price_cents",
            "total_price_cents",
            "currency",
            "accepted_results",
            "unit_price_cents",
            "catalogue",
            "source",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert!(json["accepted_results"].is_null());
        assert!(json["unit_price_cents"].is_null());
        assert_eq!(json["catalogue"], "embedded");
    }

    #[test]
    fn unit_price_is_exact_and_stated_to_four_places() {
        assert_eq!(unit_price_cents(100, 3).unwrap().to_string(), "33.3333");
        assert_eq!(unit_price_cents(200, 3).unwrap().to_string(), "66.6667");
        assert_eq!(unit_price_cents(100, 1).unwrap().to_string(), "100.0000");
        // 3 / 20000 cents is exactly one and a half of the last place: ties to even (2).
        assert_eq!(unit_price_cents(3, 20_000).unwrap().to_string(), "0.0002");
        assert_eq!(unit_price_cents(1, 19_999).unwrap().to_string(), "0.0001");
        // 1 / 20000 cents is exactly half of the last place, which would round to 0: a package
        // that costs something never has a unit price of 0.
        let err = unit_price_cents(1, 20_000).unwrap_err();
        assert!(
            matches!(err, PriceError::UnitPriceRoundsToZero { most: 19_999, .. }),
            "{err}"
        );
        let err = unit_price_cents(60_000, u64::MAX).unwrap_err().to_string();
        assert!(
            err.contains("18446744073709551615 accepted results"),
            "{err}"
        );
        assert!(err.contains("at most 1199999999 accepted results"), "{err}");
        // A free package is free per result.
        assert_eq!(unit_price_cents(0, u64::MAX).unwrap().to_string(), "0.0000");
        assert!(unit_price_cents(100, 0).is_err());
        let c = Catalogue::embedded();
        let q = quote(&c, "b200", 7, 2, Some(1000)).unwrap();
        let json = serde_json::to_value(&q).unwrap();
        assert_eq!(json["accepted_results"], 1000);
        assert_eq!(
            json["unit_price_cents"],
            unit_price_cents(q.total_price_cents, 1000)
                .unwrap()
                .to_string()
        );
    }

    #[test]
    fn bad_requests_are_refused() {
        let c = Catalogue::embedded();
        assert!(
            quote(&c, "b200", 7, 0, None)
                .unwrap_err()
                .to_string()
                .contains("`0` is zero")
        );
        assert!(quote(&c, "b200", 7, 1, Some(0)).is_err());
        let err = quote(&c, "b200", 7, u64::MAX, None).unwrap_err();
        assert!(matches!(err, PriceError::TotalOverflow { .. }), "{err}");
        assert!(
            err.to_string().contains("18446744073709551615 lots"),
            "{err}"
        );
        assert!(matches!(
            quote(&c, "b200", 5, 1, None),
            Err(PriceError::Days(_))
        ));
        let err = quote(&c, "nvidia-b200", 7, 1, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unknown GPU `nvidia-b200`; did you mean"),
            "{err}"
        );
        assert!(err.contains("b200, h200"), "{err}");
        for (text, says) in [
            ("5", "`5`"),
            ("0", "`0`"),
            ("-7", "`-7`"),
            ("seven", "`seven`"),
            ("7.0", "`7.0`"),
        ] {
            let err = parse_days(text).unwrap_err().to_string();
            assert!(err.contains(says) && err.contains("3, 7 or 30"), "{err}");
        }
        assert_eq!(parse_days("30"), Ok(30));
        for (text, says) in [
            ("0", "is zero"),
            ("-3", "is negative"),
            ("2.5", "is not a whole number"),
            ("1e3", "uses an exponent"),
        ] {
            let err = parse_accepted_results(text).unwrap_err().to_string();
            assert!(
                err.contains(says) && err.contains("accepted results"),
                "{err}"
            );
            assert!(err.contains(&format!("`{text}`")), "{err}");
        }
        for (text, says) in [("0", "is zero"), ("-1", "is negative")] {
            let err = parse_lots(text).unwrap_err().to_string();
            assert!(
                err.contains(says) && err.contains("number of lots"),
                "{err}"
            );
        }
    }

    #[test]
    fn amounts() {
        assert_eq!(cents_to_amount(123_456).to_string(), "1234.56");
        assert_eq!(cents_to_amount(5).to_string(), "0.05");
        assert_eq!(
            decimal_cents_to_amount(unit_price_cents(100, 3).unwrap()).to_string(),
            "0.333333"
        );
    }

    proptest! {
        /// Against an independent computation on u128: q x accepted is within half a last place
        /// of the total, and ties go to the even digit.
        /// Never a price of 0 for a package that costs something: a count that would round it
        /// to 0 is refused, and the bound the refusal gives is exact.
        #[test]
        fn a_priced_package_never_has_a_unit_price_of_zero(
            total in prop_oneof![1u64..1_000, 1u64..],
            accepted in prop_oneof![1u64..100_000_000, (u64::MAX - 1000)..=u64::MAX, 1u64..],
        ) {
            match unit_price_cents(total, accepted) {
                Ok(q) => prop_assert!(q > Decimal::ZERO),
                Err(PriceError::UnitPriceRoundsToZero { most, .. }) => {
                    prop_assert!(accepted > most);
                    prop_assert!(unit_price_cents(total, most).unwrap() > Decimal::ZERO);
                }
                Err(e) => prop_assert!(false, "{}", e),
            }
        }

        #[test]
        fn unit_price_matches_integer_bounds(total in 0u64.., accepted in 1u64..) {
            let Ok(q) = unit_price_cents(total, accepted) else {
                // Refused only when it would round to 0 (the test above).
                prop_assert!(total > 0 && (accepted as u128) >= 2 * total as u128 * 10_000);
                return Ok(());
            };
            prop_assert_eq!(q.scale(), 4);
            let scaled = q.mantissa();
            let diff = scaled * accepted as i128 - total as i128 * 10_000;
            prop_assert!(2 * diff.abs() <= accepted as i128);
            if 2 * diff.abs() == accepted as i128 {
                prop_assert_eq!(scaled % 2, 0);
            }
        }

        #[test]
        fn totals_are_lot_price_times_lots(gpu_index in 0usize..15, d in 0usize..3, lots in 1u64..1_000_000) {
            let c = Catalogue::embedded();
            let gpu = c.gpus()[gpu_index].to_string();
            let days = DURATIONS[d];
            let t = c.find(&gpu, days).unwrap().clone();
            let q = quote(&c, &gpu, days, lots, None).unwrap();
            prop_assert_eq!(q.total_price_cents as u128, t.price_cents as u128 * lots as u128);
            prop_assert_eq!(q.total_gpus as u128, t.gpus_per_lot as u128 * lots as u128);
        }

        #[test]
        fn overflow_is_an_error_not_a_wrap(lots in (u64::MAX / 1_000)..=u64::MAX) {
            let c = Catalogue::embedded();
            // Every bundled lot costs more than 1000 cents, so these lots overflow.
            let overflowed = matches!(quote(&c, "l4", 30, lots, None), Err(PriceError::TotalOverflow { .. }));
            prop_assert!(overflowed);
        }
    }
}
