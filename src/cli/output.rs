//! Printing results and errors, and the exit codes (documented in docs/cli.md).

use std::io::Write;

use kbdb::KbError;
use serde::Serialize;

use super::args::Format;

pub const EXIT_OK: i32 = 0;
pub const EXIT_INTERNAL: i32 = 1;
pub const EXIT_INVALID: i32 = 3;
pub const EXIT_NOT_FOUND: i32 = 4;
pub const EXIT_UNAVAILABLE: i32 = 5;
pub const EXIT_PARTIAL: i32 = 6;
pub const EXIT_CHECK_FAILED: i32 = 7;
/// An edit refused because the document's file changed on disk (docs/sync.md).
pub const EXIT_CONFLICT: i32 = 8;

pub fn exit_code(e: &KbError) -> i32 {
    // By code, so errors that crossed the daemon's wire map the same way.
    match e.code() {
        "invalid_input" | "config" | "bad_import" | "EMBEDDING_PROVIDER_NOT_CONFIGURED" => {
            EXIT_INVALID
        }
        "not_found" => EXIT_NOT_FOUND,
        "conflict" => EXIT_CONFLICT,
        "not_initialized" | "not_a_directory" | "locked" | "plain_layout" | "daemon"
        | "embedding_failed" | "unsafe_folder" => EXIT_UNAVAILABLE,
        "damaged" => kbdb::error::EXIT_DAMAGED,
        _ => EXIT_INTERNAL,
    }
}

/// The JSON object for an error: `{"error": {"code", "message", "field"?}}`.
pub fn error_json(e: &KbError) -> serde_json::Value {
    let mut err = serde_json::json!({ "code": e.code(), "message": e.to_string() });
    if let Some(f) = e.field() {
        err["field"] = f.into();
    }
    serde_json::json!({ "error": err })
}

/// Report an error: JSON on stdout with --format json (so a pipe sees it), text on stderr.
pub fn report_error(format: Format, e: &KbError) -> i32 {
    match format {
        Format::Json => print_json(&error_json(e), false),
        Format::Text => eprintln!("error: {e}"),
    }
    exit_code(e)
}

pub fn print_json<T: Serialize>(value: &T, pretty: bool) {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .expect("result types serialise");
    let mut out = std::io::stdout().lock();
    // A closed pipe (e.g. `| head`) is not an error worth a panic.
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

pub fn print_text(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}
