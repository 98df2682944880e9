//! Time as kbdb records it: RFC 3339 timestamps with milliseconds, and elapsed milliseconds.

use std::time::Instant;

/// Now, as stored in records (`2026-12-04T18:54:29.123Z`).
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Milliseconds since `start`, to the microsecond (the `elapsed_ms` of results).
pub(crate) fn elapsed_ms(start: Instant) -> f64 {
    (start.elapsed().as_secs_f64() * 1e6).round() / 1e3
}
