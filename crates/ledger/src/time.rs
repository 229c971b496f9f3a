//! UTC times as the ledger writes them.

use std::time::SystemTime;

/// `2026-09-24T08:15:00Z`.
pub(crate) fn utc_seconds(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `2026-09-24`.
pub(crate) fn utc_date(t: SystemTime) -> String {
    utc_seconds(t)[..10].to_string()
}

/// Reads an RFC 3339 UTC time (`Z` or `+00:00`, `T` or a space, fractions allowed).
pub(crate) fn parse_utc(s: &str) -> Option<SystemTime> {
    let s = s.trim();
    let s = s
        .strip_suffix("+00:00")
        .map_or_else(|| s.to_string(), |b| format!("{b}Z"));
    humantime::parse_rfc3339_weak(&s).ok()
}

/// True for a real calendar date written `YYYY-MM-DD`.
pub(crate) fn is_date(s: &str) -> bool {
    s.len() == 10 && humantime::parse_rfc3339(&format!("{s}T00:00:00Z")).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses() {
        let t = humantime::parse_rfc3339("2026-09-24T08:15:00.123Z").unwrap();
        assert_eq!(utc_seconds(t), "2026-09-24T08:15:00Z");
        assert_eq!(utc_date(t), "2026-09-24");
        assert!(parse_utc("2026-09-24T08:15:00+00:00").is_some());
        assert!(parse_utc("2026-09-24T08:15:00Z").is_some());
        assert!(parse_utc("yesterday").is_none());
        assert!(is_date("2026-02-28"));
        assert!(!is_date("2026-02-30"));
        assert!(!is_date("24/09/2026"));
    }
}
