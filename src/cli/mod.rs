//! The command-line adapter: parse (args), call the `Kb` API (commands), shape output (output).

pub mod args;
mod commands;
mod learn;
mod maintenance;
pub mod output;
mod recall;

use clap::Parser;

/// Parse the command line, run the command, return the process exit code.
pub fn run() -> i32 {
    let cli = args::Cli::parse();
    commands::dispatch(cli)
}
