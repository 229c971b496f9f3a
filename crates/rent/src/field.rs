//! One field of a CSV row, read alike by the catalogue and the offers file: what can be wrong
//! with it ([`FieldProblem`], one sentence each, the same words in both files), and the readers of
//! their numeric cells (a positive whole number, an exact decimal). Each table's reader adds the
//! file, the row and the column to the problem; the CSV reader and the row numbers all three
//! tables share are in `rows`.

use rust_decimal::Decimal;

/// What is wrong with one field of a row of the catalogue or the offers file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    /// The row ends before this column.
    #[error("is missing (the row has {found} fields, the header {expected})")]
    Missing {
        /// Fields on the row.
        found: usize,
        /// Columns in the header.
        expected: usize,
    },
    /// The row has more fields than the header.
    #[error("is extra (the row has {found} fields, the header {expected})")]
    Extra {
        /// Fields on the row.
        found: usize,
        /// Columns in the header.
        expected: usize,
    },
    /// A line break, NUL or another control character (or a bidirectional control) in a text
    /// field: such a value would end a comment of the script or the YAML that `fleet` writes
    /// and run or add what follows, and would move a terminal's cursor. Shown escaped.
    #[error(
        "`{}` holds a line break or another control character, which a generated script, a YAML file or a terminal line cannot carry safely; expected {expected} on one line of printable text",
        lab_io::text::printable(.value)
    )]
    Control {
        /// The field, as read.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// Nothing in the field.
    #[error("is empty; expected {expected}")]
    Empty {
        /// What the column holds.
        expected: &'static str,
    },
    /// A negative number.
    #[error("`{value}` is negative; expected {expected}")]
    Negative {
        /// The field.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// A number with a fractional part (or a decimal point).
    #[error("`{value}` is not a whole number; expected {expected}")]
    Fractional {
        /// The field.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// Zero.
    #[error("`{value}` is zero; expected {expected}")]
    Zero {
        /// The field.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// Not a number at all.
    #[error("`{value}` is not a number; expected {expected}")]
    NotANumber {
        /// The field.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// A number beyond what the column can hold.
    #[error("`{value}` is too large; expected {expected}")]
    TooLarge {
        /// The field.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// A whole number the column does not allow (a PCIe generation past 6, 12 lanes).
    #[error("`{value}` is not {what}; expected {expected}")]
    NotAllowed {
        /// The field.
        value: String,
        /// What the column holds.
        what: &'static str,
        /// The values it allows.
        expected: &'static str,
    },
    /// A duration other than 3, 7 or 30.
    #[error("`{value}` days is not an offered duration; expected 3, 7 or 30")]
    Duration {
        /// The field.
        value: String,
    },
    /// A slug with characters other than lowercase letters, digits and `-`.
    #[error(
        "`{value}` is not a GPU slug; expected lowercase letters, digits and `-`, such as h100-sxm"
    )]
    Slug {
        /// The field.
        value: String,
    },
    /// Not three capital letters.
    #[error("`{value}` is not a currency code; expected three capital letters such as USD")]
    Currency {
        /// The field.
        value: String,
    },
    /// Not a calendar date written YYYY-MM-DD.
    #[error("`{value}` is not a date; expected a calendar date written YYYY-MM-DD")]
    Date {
        /// The field.
        value: String,
    },
    /// The same GPU and duration twice.
    #[error(
        "duplicates row {first_row}: `{gpu}` for {days} days is already priced there; expected one row per GPU and duration"
    )]
    Duplicate {
        /// GPU slug.
        gpu: String,
        /// Duration.
        days: u32,
        /// The earlier row.
        first_row: u64,
    },
    /// A per-model column that differs between the rows of one model.
    #[error(
        "`{value}` differs from `{first_value}` on row {first_row} for GPU `{gpu}`; expected the same value on every row of a GPU"
    )]
    Inconsistent {
        /// The field.
        value: String,
        /// GPU slug.
        gpu: String,
        /// The value on the model's first row.
        first_value: String,
        /// That row.
        first_row: u64,
    },
    /// More digits than an exact decimal holds (28), or a count beyond 2^32 - 1 (offers).
    #[error("`{value}` is too large or too long to hold exactly; expected {expected}")]
    Inexact {
        /// The field.
        value: String,
        /// What the column holds.
        expected: &'static str,
    },
    /// A GPU count without a GPU name.
    #[error(
        "is empty although AcceleratorCount is `{count}`; expected the accelerator's name, or both cells empty for an instance without one"
    )]
    Unnamed {
        /// The count on the row.
        count: String,
    },
    /// Neither an instance type nor an accelerator: nothing is offered.
    #[error(
        "is empty and so is AcceleratorName; expected the instance type (an empty one is only for an accelerator priced apart from its host)"
    )]
    Nothing,
}

/// A positive whole number, digits with an optional `+`: zero, a number past `u64`, a negative
/// or fractional one and anything else are each their own problem. Empty is a problem too.
pub(crate) fn positive(value: &str, expected: &'static str) -> Result<u64, FieldProblem> {
    let problem =
        |make: fn(String, &'static str) -> FieldProblem| make(value.to_string(), expected);
    if value.is_empty() {
        return Err(FieldProblem::Empty { expected });
    }
    let digits = value.strip_prefix('+').unwrap_or(value);
    if digits.bytes().all(|b| b.is_ascii_digit()) && !digits.is_empty() {
        return match digits.parse::<u64>() {
            Ok(0) => Err(problem(|value, expected| FieldProblem::Zero {
                value,
                expected,
            })),
            Ok(v) => Ok(v),
            Err(_) => Err(problem(|value, expected| FieldProblem::TooLarge {
                value,
                expected,
            })),
        };
    }
    let numeric = |s: &str| {
        s.bytes().any(|b| b.is_ascii_digit())
            && s.bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    };
    Err(if value.starts_with('-') && numeric(&value[1..]) {
        problem(|value, expected| FieldProblem::Negative { value, expected })
    } else if numeric(value) {
        problem(|value, expected| FieldProblem::Fractional { value, expected })
    } else {
        problem(|value, expected| FieldProblem::NotANumber { value, expected })
    })
}

/// A positive whole number among `allowed` (`expected` lists them): a number of another kind
/// is [`positive`]'s problem, a number outside them is [`FieldProblem::NotAllowed`].
pub(crate) fn one_of(
    value: &str,
    what: &'static str,
    allowed: &[u32],
    expected: &'static str,
) -> Result<u32, FieldProblem> {
    let number = positive(value, expected)?;
    u32::try_from(number)
        .ok()
        .filter(|n| allowed.contains(n))
        .ok_or_else(|| FieldProblem::NotAllowed {
            value: value.to_string(),
            what,
            expected,
        })
}

/// Text on one line: empty is [`FieldProblem::Empty`], a control character (a line break
/// among them) [`FieldProblem::Control`].
pub(crate) fn text(value: &str, expected: &'static str) -> Result<(), FieldProblem> {
    if value.is_empty() {
        return Err(FieldProblem::Empty { expected });
    }
    if value.chars().any(lab_io::text::is_unsafe_char) {
        return Err(FieldProblem::Control {
            value: value.to_string(),
            expected,
        });
    }
    Ok(())
}

/// An empty cell (`None`), or an exact non-negative decimal: digits with at most one point,
/// or pandas' exponent form (`1e-05`). `positive` refuses zero.
pub(crate) fn decimal(
    value: &str,
    expected: &'static str,
    positive: bool,
) -> Result<Option<Decimal>, FieldProblem> {
    if value.is_empty() {
        return Ok(None);
    }
    let problem =
        |make: fn(String, &'static str) -> FieldProblem| make(value.to_string(), expected);
    let unsigned = value.strip_prefix('+').unwrap_or(value);
    let (negative, digits) = match unsigned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, unsigned),
    };
    let Some(parsed) = exact_decimal(digits) else {
        return Err(problem(|value, expected| FieldProblem::NotANumber {
            value,
            expected,
        }));
    };
    let Ok(parsed) = parsed else {
        return Err(problem(|value, expected| FieldProblem::Inexact {
            value,
            expected,
        }));
    };
    if negative && !parsed.is_zero() {
        return Err(problem(|value, expected| FieldProblem::Negative {
            value,
            expected,
        }));
    }
    if positive && parsed.is_zero() {
        return Err(problem(|value, expected| FieldProblem::Zero {
            value,
            expected,
        }));
    }
    Ok(Some(parsed))
}

/// `None` when `text` is not a plain decimal (`12`, `12.5`, `.5`, `12.`) or an exponent form
/// (`1e-05`, `1.5E+3`); `Some(Err)` when it is one but does not fit a [`Decimal`] exactly.
pub(crate) fn exact_decimal(text: &str) -> Option<Result<Decimal, ()>> {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(e) => {
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !all_digits(digits) || digits.len() > 4 {
                return None;
            }
            let n: i64 = digits.parse().ok()?;
            if e.starts_with('-') { -n } else { n }
        }
    };
    // All the digits as one integer, then the point moved by the exponent.
    let joined = format!("{whole}{fraction}");
    let joined = joined.trim_start_matches('0');
    let scale = fraction.len() as i64 - exponent;
    let fits = || -> Option<Decimal> {
        let mut number: i128 = if joined.is_empty() {
            0
        } else {
            joined.parse().ok()?
        };
        let mut scale = scale;
        while scale < 0 {
            number = number.checked_mul(10)?;
            scale += 1;
        }
        let scale = u32::try_from(scale).ok()?;
        Decimal::try_from_i128_with_scale(number, scale).ok()
    };
    Some(fits().ok_or(()))
}
