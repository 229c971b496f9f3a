//! The value of a swept option: one number, a list, or a range with a step.
//!
//! `64` is one value; `64,128,256` a list (in the order given); `64..8192:x2` multiplies by 2 from
//! 64 while the value stays at or below 8192 (64, 128, ..., 8192); `64..512:+64` adds 64 (64, 128,
//! ..., 512). The end is included when a step lands on it and never exceeded.

/// What a swept option accepts, quoted in every refusal.
pub const SPEC_ACCEPTED: &str = "a whole number (64), a list (64,128,256) or a range with a step: \
    START..END:xFACTOR (64..8192:x2 doubles) or START..END:+STEP (64..512:+64)";

/// Most points one sweep may have: more is almost certainly a typing mistake (`1..100000:+1`).
pub const MAX_POINTS: usize = 1000;

/// A parsed option value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// One value: the option is not varied.
    One(usize),
    /// A list or a range: the option is the varied one (even if the range has one point).
    Many(Vec<usize>),
}

impl Spec {
    /// The values, in sweep order.
    pub fn values(&self) -> Vec<usize> {
        match self {
            Spec::One(v) => vec![*v],
            Spec::Many(v) => v.clone(),
        }
    }
}

/// Why an option value is not a value, list or range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing given (or an empty list item such as `64,,128`).
    #[error("`{0}` has an empty value; expected {SPEC_ACCEPTED}")]
    Empty(String),
    /// A part is not a whole number.
    #[error("`{part}` in `{text}` is not a whole number; expected {SPEC_ACCEPTED}")]
    NotANumber {
        /// The whole value given.
        text: String,
        /// The offending part.
        part: String,
    },
    /// Zero where every dimension needs at least 1.
    #[error("`{0}` contains 0; every value must be at least 1 (expected {SPEC_ACCEPTED})")]
    Zero(String),
    /// The same value twice in a list: both points would write the same file.
    #[error("`{text}` lists {value} more than once; each point must be distinct")]
    Duplicate {
        /// The whole value given.
        text: String,
        /// The repeated value.
        value: usize,
    },
    /// A range without a usable step or with its ends the wrong way round.
    #[error("range `{text}` {why}; expected {SPEC_ACCEPTED}")]
    BadRange {
        /// The whole value given.
        text: String,
        /// What is wrong, in words.
        why: String,
    },
    /// More than [`MAX_POINTS`] points.
    #[error(
        "`{text}` has {count} points, more than the {MAX_POINTS} a sweep may have; use a larger step"
    )]
    TooMany {
        /// The whole value given.
        text: String,
        /// How many points it would have (at least).
        count: usize,
    },
}

/// Parses `64`, `64,128,256`, `64..8192:x2` or `64..512:+64`.
pub fn parse_spec(text: &str) -> Result<Spec, SpecError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SpecError::Empty(text.to_string()));
    }
    if let Some((start, rest)) = t.split_once("..") {
        return range(text, start, rest).map(Spec::Many);
    }
    if t.contains(',') {
        let mut values = Vec::new();
        for part in t.split(',') {
            let v = number(text, part)?;
            if values.contains(&v) {
                return Err(SpecError::Duplicate {
                    text: text.to_string(),
                    value: v,
                });
            }
            values.push(v);
            if values.len() > MAX_POINTS {
                return Err(SpecError::TooMany {
                    text: text.to_string(),
                    count: t.split(',').count(),
                });
            }
        }
        return Ok(Spec::Many(values));
    }
    number(text, t).map(Spec::One)
}

/// A positive whole number (ASCII digits only: no sign, no exponent, no suffix).
fn number(text: &str, part: &str) -> Result<usize, SpecError> {
    let p = part.trim();
    if p.is_empty() {
        return Err(SpecError::Empty(text.to_string()));
    }
    if !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SpecError::NotANumber {
            text: text.to_string(),
            part: p.to_string(),
        });
    }
    match p.parse::<usize>() {
        Ok(0) => Err(SpecError::Zero(text.to_string())),
        Ok(v) => Ok(v),
        Err(_) => Err(SpecError::NotANumber {
            text: text.to_string(),
            part: p.to_string(),
        }),
    }
}

fn range(text: &str, start: &str, rest: &str) -> Result<Vec<usize>, SpecError> {
    let bad = |why: &str| SpecError::BadRange {
        text: text.to_string(),
        why: why.to_string(),
    };
    let Some((end, step)) = rest.split_once(':') else {
        return Err(bad("has no step (add :x2 to double or :+64 to add 64)"));
    };
    let start = number(text, start)?;
    let end = number(text, end)?;
    if start > end {
        return Err(bad("starts above its end"));
    }
    let step = step.trim();
    let next: Box<dyn Fn(usize) -> Option<usize>> = if let Some(f) = step.strip_prefix('x') {
        let factor = number(text, f)?;
        if factor < 2 {
            return Err(bad("multiplies by 1, which never moves"));
        }
        Box::new(move |v: usize| v.checked_mul(factor))
    } else if let Some(s) = step.strip_prefix('+') {
        let add = number(text, s)?;
        Box::new(move |v: usize| v.checked_add(add))
    } else {
        return Err(bad(&format!(
            "has step `{step}`, which is neither xFACTOR nor +STEP"
        )));
    };
    let mut values = vec![start];
    let mut v = start;
    while let Some(n) = next(v).filter(|&n| n <= end) {
        if values.len() == MAX_POINTS {
            return Err(SpecError::TooMany {
                text: text.to_string(),
                count: MAX_POINTS + 1,
            });
        }
        values.push(n);
        v = n;
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_forms() {
        assert_eq!(parse_spec("64"), Ok(Spec::One(64)));
        assert_eq!(parse_spec(" 64 "), Ok(Spec::One(64)));
        assert_eq!(parse_spec("256,64,128"), Ok(Spec::Many(vec![256, 64, 128])));
        assert_eq!(
            parse_spec("64..1024:x2"),
            Ok(Spec::Many(vec![64, 128, 256, 512, 1024]))
        );
        assert_eq!(
            parse_spec("64..1000:x2"),
            Ok(Spec::Many(vec![64, 128, 256, 512]))
        );
        assert_eq!(
            parse_spec("64..256:+64"),
            Ok(Spec::Many(vec![64, 128, 192, 256]))
        );
        assert_eq!(parse_spec("5..5:x3"), Ok(Spec::Many(vec![5])));
        assert_eq!(parse_spec("3..100:x10"), Ok(Spec::Many(vec![3, 30])));
    }

    #[test]
    fn refusals_name_the_value() {
        for (text, wanted) in [
            ("", "empty value"),
            ("64,,128", "empty value"),
            ("64,", "empty value"),
            ("sixty", "`sixty` in `sixty` is not a whole number"),
            ("-3", "`-3` in `-3` is not a whole number"),
            ("1e3", "not a whole number"),
            ("0", "contains 0"),
            ("0..64:x2", "contains 0"),
            ("64,128,64", "lists 64 more than once"),
            ("64..512", "has no step"),
            ("512..64:x2", "starts above its end"),
            ("64..512:x1", "multiplies by 1"),
            ("64..512:+0", "contains 0"),
            ("64..512:*2", "neither xFACTOR nor +STEP"),
            ("1..5000:+1", "more than the 1000"),
            ("99999999999999999999999", "not a whole number"),
        ] {
            let err = parse_spec(text).unwrap_err().to_string();
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
    }

    #[test]
    fn ranges_stop_before_overflow() {
        let top = usize::MAX / 2 + 1;
        assert_eq!(
            parse_spec(&format!("{top}..{}:x2", usize::MAX)),
            Ok(Spec::Many(vec![top]))
        );
    }

    proptest! {
        #[test]
        fn geometric_ranges_are_exact(start in 1usize..10_000, factor in 2usize..9, count in 1u32..8) {
            let end = start * factor.pow(count - 1);
            let values = parse_spec(&format!("{start}..{end}:x{factor}")).unwrap().values();
            prop_assert_eq!(values.len(), count as usize);
            prop_assert_eq!(values[0], start);
            prop_assert_eq!(*values.last().unwrap(), end);
            for w in values.windows(2) {
                prop_assert_eq!(w[1], w[0] * factor);
            }
        }

        #[test]
        fn additive_ranges_never_pass_the_end(start in 1usize..5000, step in 1usize..500, end_off in 0usize..20_000) {
            let end = start + end_off;
            let parsed = parse_spec(&format!("{start}..{end}:+{step}"));
            if end_off / step + 1 > MAX_POINTS {
                prop_assert!(matches!(parsed, Err(SpecError::TooMany { .. })), "{parsed:?}");
                return Ok(());
            }
            let values = parsed.unwrap().values();
            prop_assert_eq!(values.len(), end_off / step + 1);
            prop_assert!(*values.last().unwrap() <= end);
            prop_assert!(values.last().unwrap() + step > end);
            for w in values.windows(2) {
                prop_assert_eq!(w[1] - w[0], step);
            }
        }

        #[test]
        fn lists_round_trip(set in proptest::collection::btree_set(1usize..1_000_000, 1..50)) {
            let values: Vec<usize> = set.into_iter().rev().collect();
            let text = values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",");
            let parsed = parse_spec(&text).unwrap();
            let expected = if values.len() == 1 { Spec::One(values[0]) } else { Spec::Many(values) };
            prop_assert_eq!(parsed, expected);
        }

        #[test]
        fn arbitrary_text_never_panics(text in ".{0,40}") {
            let _ = parse_spec(&text);
        }
    }
}
