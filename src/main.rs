mod cli;

fn main() {
    // Diagnostics go to stderr; stdout carries results only.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KBDB_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    std::process::exit(cli::run());
}
