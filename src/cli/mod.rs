//! The command-line adapter: parse (args), call the `Kb` API (commands), shape output (output).

pub mod args;
mod backend;
mod collections;
mod commands;
mod learn;
mod maintenance;
pub mod output;
mod recall;
mod skills;
mod sync;

use clap::Parser;

/// Parse the command line, run the command, return the process exit code.
pub fn run() -> i32 {
    let cli = args::Cli::parse();
    init_tracing(&cli);
    commands::dispatch(cli)
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
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(db.join(kbdb::daemon::LOG_FILE));
        if let Ok(file) = log {
            tracing_subscriber::fmt()
                .with_writer(std::sync::Mutex::new(file))
                .with_ansi(false)
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_env("KBDB_LOG")
                        .unwrap_or_else(|_| "info".into()),
                )
                .init();
            return;
        }
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter())
        .init();
}
