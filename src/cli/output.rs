//! Printing results and errors, and the exit codes (documented in docs/cli.md).

use std::io::Write;

use kbdb::KbError;
use serde::Serialize;

use super::args::Format;

pub const EXIT_OK: i32 = 0;
pub const EXIT_INTERNAL: i32 = 1;
/// The command line could not be parsed (clap's code).
pub const EXIT_USAGE: i32 = 2;
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
        Format::Text => print_stderr(&format!("error: {e}")),
    }
    exit_code(e)
}

pub fn print_json<T: Serialize>(value: &T, pretty: bool) {
    print_text(&json_text(value, pretty));
}

/// `value` as JSON text, as `print_json` prints it (for output gathered before it is printed).
pub fn json_text<T: Serialize>(value: &T, pretty: bool) -> String {
    if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .expect("result types serialise")
}

pub fn print_text(text: &str) {
    let mut line = Vec::with_capacity(text.len() + 1);
    line.extend_from_slice(text.as_bytes());
    line.push(b'\n');
    print_bytes(&line);
}

/// The exit status when stdout is a pipe whose reader went away (`kbdb … | head -1`): what a
/// shell reports for a process ended by SIGPIPE (128 + 13), the usual way such a command stops.
pub const EXIT_BROKEN_PIPE: i32 = 141;

/// Write to stdout. Rust ignores SIGPIPE, so a closed pipe is an EPIPE error here, which
/// `println!` would turn into a panic: the command stops quietly instead, as one killed by
/// SIGPIPE would. (SIGPIPE is not reset to its default: the same process writes to the
/// daemon's socket, where a vanished peer must be an error, not death.) Whatever was written
/// before stays written, and every write the command made is already durable.
pub fn print_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_BROKEN_PIPE);
        }
        // Another write error (a full disk behind a redirection): say so, never panic.
        print_stderr(&format!("error: cannot write the output: {e}"));
        std::process::exit(EXIT_INTERNAL);
    }
}

/// Write a line to stderr, ignoring failures (`eprintln!` panics when stderr is closed).
pub fn print_stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}
