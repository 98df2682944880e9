//! `kbdb serve`: the MCP server over streamable HTTP for a team (docs/serve.md). The MCP
//! handler is the stdio one (`mcp::sessions`), one per session, every session a client of the
//! database's daemon; this module adds what the network needs in front of it: bearer tokens
//! (`tokens`), the Origin check, the session limit, TLS (`tls`), and graceful shutdown.

mod guard;
pub mod tls;
pub mod tokens;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::error::{KbError, Result};
use crate::mcp::sessions::{HttpOptions, http_service};

/// The default listen address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7411";
/// How long a TLS handshake may take before the connection is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for open connections (streams included) to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What `kbdb serve` is asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub db_dir: PathBuf,
    pub listen: SocketAddr,
    /// PEM certificate chain and private key: serve HTTPS.
    pub tls: Option<tls::TlsFiles>,
}

/// A bound server, ready to run.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    router: axum::Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    cancel: CancellationToken,
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    web: Arc<crate::web::WebState>,
}

/// What to warn about when listening on `addr`: an address other machines reach (the risk it
/// brings), and every address with no `serve.allowed_hosts` (only loopback names would pass).
pub fn listen_warnings(addr: &SocketAddr, tls: bool, allowed_hosts: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if !addr.ip().is_loopback() {
        out.push(format!(
            "listening on {addr}, which is not a loopback address: anyone who can reach it may \
             try tokens{}; see docs/serve.md",
            if tls {
                ""
            } else {
                ", and without --tls-cert tokens and knowledge cross the network unencrypted"
            }
        ));
    }
    if addr.ip().is_unspecified() && allowed_hosts.is_empty() {
        out.push(
            "listening on every address, but requests are accepted only with a Host of \
             localhost, 127.0.0.1 or ::1: list the names and addresses clients use in \
             serve.allowed_hosts (worker.toml)"
                .into(),
        );
    }
    out
}

impl Server {
    /// Check the database, the configuration and the TLS files, connect to the daemon and bind
    /// the address (port 0: any free port, see [`Server::local_addr`]).
    pub async fn bind(options: ServeOptions) -> Result<Server> {
        if !options.db_dir.join(crate::store::DB_FILE).exists() {
            return Err(KbError::NotInitialized(options.db_dir.clone()));
        }
        let config = crate::Config::load(&options.db_dir)?.serve;
        let tls = options.tls.as_ref().map(tls::acceptor).transpose()?;
        let listener = TcpListener::bind(options.listen)
            .await
            .map_err(|e| KbError::io(format!("cannot listen on {}", options.listen), e))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| KbError::io("cannot read the bound address", e))?;
        for warning in listen_warnings(&local_addr, tls.is_some(), &config.allowed_hosts) {
            tracing::warn!("{warning}");
        }
        let tokens = Arc::new(tokens::TokenStore::open(&options.db_dir)?);
        if tokens.count()? == 0 {
            tracing::warn!(
                "the database has no tokens, so every request is refused; make one with \
                 `kbdb token create NAME`"
            );
        }
        let scheme = if tls.is_some() { "https" } else { "http" };
        let origins = guard::allowed_origins(scheme, &local_addr, &config.allowed_origins);
        let hosts = guard::allowed_hosts(&local_addr, &config.allowed_hosts);
        let cancel = CancellationToken::new();
        let mcp = http_service(
            options.db_dir.clone(),
            HttpOptions {
                max_body_bytes: config.max_body_bytes,
                session_idle: Duration::from_secs(config.session_idle_secs),
                daemon_connections: config.daemon_connections,
                allowed_origins: origins.clone(),
                allowed_hosts: hosts.clone(),
                cancel: cancel.clone(),
            },
        )
        .await?;
        // The page calls the daemon through the MCP sessions' connections: one pool, one
        // `serve.daemon_connections` limit for the whole server.
        let (web_routes, web) = crate::web::router(crate::web::WebOptions {
            pool: mcp.pool.clone(),
            secure: tls.is_some(),
            port: local_addr.port(),
            origins: origins.clone(),
            hosts,
        })?;
        let sessions = mcp.sessions.clone();
        let guard = Arc::new(guard::Guard {
            tokens,
            origins: crate::web::origins::Origins::parse(&origins),
            sessions: mcp.sessions.clone(),
            max_sessions: config.max_sessions,
        });
        let router = mcp
            .router
            .layer(axum::middleware::from_fn_with_state(guard, guard::check))
            .merge(web_routes);
        Ok(Server {
            listener,
            local_addr,
            router,
            tls,
            cancel,
            sessions,
            web,
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The URL of the MCP endpoint.
    pub fn mcp_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}/mcp", self.local_addr)
    }

    /// The web page's one-time sign-in link (docs/web.md): `http://ADDR/?token=SECRET`.
    pub fn sign_in_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!(
            "{scheme}://{}/?token={}",
            self.local_addr,
            self.web.sessions.sign_in_secret()
        )
    }

    /// Serve more routes next to `/mcp` (a web page). They get no token check of their own:
    /// `routes` must authenticate its requests itself.
    pub fn with_extra_routes(mut self, routes: axum::Router) -> Self {
        self.router = self.router.merge(routes);
        self
    }

    /// Serve until `shutdown` completes; then end every session, stop accepting, and give open
    /// connections a moment to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        tokio::pin!(shutdown);
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = &mut shutdown => break,
            };
            // An answer streamed as server-sent events leaves in several small writes; with
            // Nagle's algorithm the last one waited for the client's delayed ACK, adding ~40 ms
            // to a call over a kept-alive connection (tools/bench-serve-search.py).
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("TCP_NODELAY for {peer}: {e}");
            }
            let service = TowerToHyperService::new(self.router.clone());
            let tls = self.tls.clone();
            let watcher = graceful.watcher();
            tokio::spawn(async move {
                let builder = auto::Builder::new(TokioExecutor::new());
                let result = match tls {
                    Some(acceptor) => {
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                            .await
                        {
                            Ok(Ok(stream)) => {
                                let conn = builder.serve_connection(TokioIo::new(stream), service);
                                watcher.watch(conn).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!("TLS handshake with {peer} failed: {e}");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("TLS handshake with {peer} timed out");
                                return;
                            }
                        }
                    }
                    None => {
                        let conn = builder.serve_connection(TokioIo::new(tcp), service);
                        watcher.watch(conn).await
                    }
                };
                if let Err(e) = result {
                    tracing::debug!("connection from {peer} ended: {e}");
                }
            });
        }
        tracing::info!("shutting down");
        // Each session ended in turn (its handler finishes its replies), then whatever is left
        // is cancelled.
        let close_all = async {
            use rmcp::transport::streamable_http_server::session::SessionManager;
            let ids: Vec<_> = self
                .sessions
                .sessions
                .read()
                .await
                .keys()
                .cloned()
                .collect();
            for id in ids {
                let _ = self.sessions.close_session(&id).await;
            }
        };
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, close_all).await;
        self.cancel.cancel();
        drop(self.listener);
        if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::info!("connections still open after {SHUTDOWN_GRACE:?}; closing them");
        }
        Ok(())
    }
}

/// Completes on SIGTERM or SIGINT (ctrl-c).
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot watch SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Run `kbdb serve` in a runtime of its own: bind, call `started` with the MCP URL, serve until
/// SIGTERM or ctrl-c.
pub fn run(options: ServeOptions, started: impl FnOnce(&Server)) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| KbError::io("cannot start the async runtime", e))?;
    runtime.block_on(async move {
        let server = Server::bind(options).await?;
        started(&server);
        server.run(shutdown_signal()).await
    })?;
    // Blocking threads (daemon calls, the change follower) end with the process.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_beyond_loopback_is_warned_about_naming_the_risk() {
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        assert!(listen_warnings(&at("127.0.0.1:7411"), false, &[]).is_empty());
        assert!(listen_warnings(&at("[::1]:7411"), false, &[]).is_empty());
        let w = listen_warnings(&at("192.0.2.7:7411"), false, &[]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("not a loopback address") && w[0].contains("unencrypted"));
        let w = listen_warnings(&at("192.0.2.7:7411"), true, &[]);
        assert!(!w[0].contains("unencrypted"));
        let w = listen_warnings(&at("0.0.0.0:7411"), true, &[]);
        assert_eq!(w.len(), 2);
        assert!(w[1].contains("serve.allowed_hosts"));
        assert_eq!(
            listen_warnings(&at("0.0.0.0:7411"), true, &["kb.example.com".into()]).len(),
            1
        );
    }
}
