//! The command-line adapter: parse (args), call the `Kb` API (commands), shape output (output).

pub mod args;
mod backend;
mod collections;
mod commands;
mod learn;
mod maintenance;
pub mod output;
mod recall;
mod serve;
mod skills;
mod sync;

use clap::{CommandFactory, Parser};

/// Parse the command line, run the command, return the process exit code.
pub fn run() -> i32 {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            return invalid_utf8_argument();
        }
        Err(e) => return usage_error(e),
    };
    init_tracing(&cli);
    commands::dispatch(cli)
}

/// Whether the command line asks for `--format json` (read before clap, for errors clap
/// raises itself).
fn wants_json(args: &[std::ffi::OsString]) -> bool {
    // Options end at `--`: what follows is content, even `--format json`.
    let args = args
        .iter()
        .position(|a| a == "--")
        .map_or(args, |end| &args[..end]);
    args.iter().any(|a| a == "--format=json")
        || args
            .windows(2)
            .any(|w| w[0] == "--format" && w[1] == "json")
}

/// A command line clap refused: its message (with kbdb's hints), as a JSON error object on
/// stdout with `--format json` (the shape of every other error), else clap's text on stderr;
/// exit code 2. Help and version requests are printed as clap does.
fn usage_error(mut e: clap::Error) -> i32 {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        e.exit();
    }
    let usage = e
        .get(ContextKind::Usage)
        .map(ToString::to_string)
        .unwrap_or_default();
    // `kbdb learn "- buy milk"`: content that starts with a dash reads as an option. Unless it
    // looks like a mistyped option clap found a match for (`--titel`): clap's tip covers that.
    let invalid = e
        .get(ContextKind::InvalidArg)
        .map(ToString::to_string)
        .unwrap_or_default();
    let option_typo = e.get(ContextKind::SuggestedArg).is_some()
        && invalid.starts_with("--")
        && !invalid.contains(char::is_whitespace);
    if e.kind() == ErrorKind::UnknownArgument && usage.contains("kbdb learn") && !option_typo {
        e.remove(ContextKind::SuggestedArg);
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![
                "content that starts with '-' reads as an option: use \"kbdb learn -\" to read \
                 it from stdin, or \"--\" before the content (kbdb learn -- \"- buy milk\")"
                    .into(),
            ]),
        );
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if !wants_json(&args) {
        e.exit();
    }
    let message = if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        "'kbdb' requires a subcommand (see kbdb --help)".to_string()
    } else {
        // clap's text without its `error: ` prefix, usage block and `--help` pointer; its tips
        // kept after the message.
        let text = e.render().to_string();
        let mut parts: Vec<String> = Vec::new();
        for para in text.split("\n\n") {
            let para = para.trim();
            if para.is_empty() || para.starts_with("Usage:") || para.starts_with("For more") {
                continue;
            }
            let para = para.strip_prefix("error: ").unwrap_or(para);
            parts.push(
                para.split('\n')
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
        parts.join("; ")
    };
    let mut err = serde_json::json!({"code": "usage", "message": message});
    if let Some(u) = usage.strip_prefix("Usage: ") {
        err["usage"] = u.trim().into();
    }
    output::print_json(&serde_json::json!({ "error": err }), false);
    output::EXIT_USAGE
}

/// clap only says "invalid UTF-8 was detected in one or more arguments": name the argument
/// (the option it is the value of, else its position) and fail as invalid input (exit 3).
fn invalid_utf8_argument() -> i32 {
    use std::os::unix::ffi::OsStrExt;
    // Options taking paths accept any bytes: their values are not the culprit.
    fn path_options(cmd: &clap::Command, out: &mut Vec<String>) {
        let path = clap::builder::ValueParser::path_buf().type_id();
        for a in cmd.get_arguments() {
            if a.get_value_parser().type_id() == path
                && let Some(long) = a.get_long()
            {
                out.push(long.to_string());
            }
        }
        for sub in cmd.get_subcommands() {
            path_options(sub, out);
        }
    }
    let mut paths = Vec::new();
    path_options(&args::Cli::command(), &mut paths);
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let json = wants_json(&args);
    let mut err = kbdb::KbError::invalid("argument", "is not valid UTF-8");
    for (i, arg) in args.iter().enumerate() {
        let bytes = arg.as_bytes();
        let Err(bad) = std::str::from_utf8(bytes) else {
            continue;
        };
        let inline = bytes
            .strip_prefix(b"--")
            .and_then(|f| f.iter().position(|&b| b == b'=').map(|p| &f[..p]))
            .filter(|name| name.len() + 2 < bad.valid_up_to());
        let (option, start) = match inline {
            Some(name) => (
                Some(String::from_utf8_lossy(name).into_owned()),
                name.len() + 3,
            ),
            None => (
                i.checked_sub(1)
                    .and_then(|p| args[p].to_str())
                    .and_then(|p| p.strip_prefix("--"))
                    .map(str::to_string),
                0,
            ),
        };
        if option.as_ref().is_some_and(|o| paths.contains(o)) {
            continue;
        }
        let field = option.unwrap_or_else(|| format!("argument {}", i + 1));
        err = kbdb::KbError::invalid(
            &field,
            format!(
                "is not valid UTF-8 (first invalid byte at offset {}); only paths may be other bytes",
                bad.valid_up_to() - start
            ),
        );
        break;
    }
    let format = if json {
        args::Format::Json
    } else {
        args::Format::Text
    };
    output::report_error(format, &err)
}

/// Diagnostics go to stderr (stdout carries results only); the daemon logs to a file in the
/// database folder instead, since nobody reads its stderr.
fn init_tracing(cli: &args::Cli) {
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("KBDB_LOG")
            .unwrap_or_else(|_| "warn,rmcp=error".into())
    };
    let daemon_run = matches!(
        cli.command,
        args::Command::Daemon {
            action: None | Some(args::DaemonAction::Run)
        }
    );
    if daemon_run {
        let db = cli
            .db
            .clone()
            .unwrap_or_else(|| commands::DEFAULT_DB.into());
        let log = kbdb::daemon::open_log(&db);
        if let Ok(file) = log {
            tracing_subscriber::fmt()
                .with_writer(std::sync::Mutex::new(file))
                .with_ansi(false)
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("KBDB_LOG")
                        .unwrap_or_else(|_| "info".into()),
                )
                .init();
            // Nobody reads a daemon's stderr: a panic goes to its log too.
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                tracing::error!("{info}");
                default(info);
            }));
            return;
        }
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter())
        .init();
}
