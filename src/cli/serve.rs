//! `kbdb serve` (MCP over streamable HTTP) and `kbdb token` (its bearer tokens): parse, call
//! `kbdb::serve`, print.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use kbdb::KbError;
use kbdb::serve::{ServeOptions, tls::TlsFiles, tokens};

use super::args::Format;
use super::output::{EXIT_OK, print_json, print_text};

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address and port to listen on (port 0: any free port; the address is printed)
    #[arg(long, value_name = "ADDR:PORT", default_value = kbdb::serve::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// PEM certificate chain: serve HTTPS (needs --tls-key)
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum TokenAction {
    /// Make a token and print it (once: only its hash is stored)
    Create {
        /// A name for the token (who or what uses it): letters, digits, '.', '_', '-'
        name: String,
        /// The token may call only tools that read
        #[arg(long)]
        read_only: bool,
    },
    /// List the tokens (names, read-only, created; never the tokens themselves)
    List,
    /// Revoke a token: requests with it are refused from now on, open sessions included
    Revoke {
        /// The token's name
        name: String,
    },
}

/// `kbdb serve`: serve until SIGTERM or ctrl-c. The MCP URL is printed on stdout once
/// listening.
pub fn serve(db: &Path, format: Format, args: ServeArgs) -> kbdb::Result<i32> {
    let options = ServeOptions {
        db_dir: db.to_path_buf(),
        listen: args.listen,
        tls: match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            _ => None,
        },
    };
    kbdb::serve::run(options, |server| {
        let url = server.mcp_url();
        let sign_in = server.sign_in_url();
        match format {
            Format::Json => print_json(
                &serde_json::json!({
                    "listening": server.local_addr().to_string(),
                    "url": url,
                    "web": sign_in,
                }),
                false,
            ),
            Format::Text => print_text(&format!("kbdb serve: MCP at {url}")),
        }
        // The page's sign-in link, as Jupyter prints its own: on stderr, with the secret.
        super::output::print_stderr(&format!(
            "kbdb serve: web page at {sign_in} (a one-time sign-in link; see docs/web.md)"
        ));
    })?;
    Ok(EXIT_OK)
}

/// `kbdb token create|list|revoke`.
pub fn token(db: &Path, format: Format, action: TokenAction) -> kbdb::Result<i32> {
    if !db.join(kbdb::store::DB_FILE).exists() {
        return Err(KbError::NotInitialized(db.to_path_buf()));
    }
    match action {
        TokenAction::Create { name, read_only } => {
            let t = tokens::create(db, &name, read_only)?;
            match format {
                Format::Json => print_json(&t, false),
                Format::Text => {
                    print_text(&t.token);
                    super::output::print_stderr(&format!(
                        "token {:?}{} made; it is shown this once (only its hash is kept)",
                        t.name,
                        if t.read_only { " (read-only)" } else { "" }
                    ));
                }
            }
        }
        TokenAction::List => {
            let list = tokens::list(db)?;
            match format {
                Format::Json => print_json(&list, false),
                Format::Text if list.is_empty() => print_text("no tokens"),
                Format::Text => {
                    for t in list {
                        let access = if t.read_only {
                            "read-only"
                        } else {
                            "read-write"
                        };
                        print_text(&format!("{}\t{access}\t{}", t.name, t.created));
                    }
                }
            }
        }
        TokenAction::Revoke { name } => {
            tokens::revoke(db, &name)?;
            match format {
                Format::Json => print_json(&serde_json::json!({"revoked": name}), false),
                Format::Text => print_text(&format!("revoked {name}")),
            }
        }
    }
    Ok(EXIT_OK)
}
