//! MCP over streamable HTTP (`kbdb serve`): rmcp's streamable HTTP service makes one handler —
//! the same `Kbdb` as stdio — per `Mcp-Session-Id` session. All sessions share one pool of
//! daemon connections and one subscription to the daemon's change events, which is fanned out
//! to every session's notifier (docs/serve.md).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::notifications::{Event, follow_changes};
use super::server::{Kbdb, State};
use crate::daemon::pool::ClientPool;
use crate::error::{KbError, Result};

/// How the HTTP transport is limited and guarded.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Largest request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// A session without a request for this long is ended.
    pub session_idle: Duration,
    /// Daemon connections the sessions share.
    pub daemon_connections: usize,
    /// `Origin`s accepted (scheme://host:port); a request without `Origin` is accepted.
    pub allowed_origins: Vec<String>,
    /// `Host` values accepted (host or host:port).
    pub allowed_hosts: Vec<String>,
    /// Cancelled to end every session (shutdown).
    pub cancel: CancellationToken,
}

/// The `/mcp` endpoint and its sessions.
pub struct HttpMcp {
    /// The rmcp service, to mount at `/mcp`.
    pub router: axum::Router,
    /// The open sessions (their count limits new ones).
    pub sessions: Arc<LocalSessionManager>,
    /// The daemon connections the sessions share (the web page uses them too).
    pub pool: Arc<ClientPool>,
}

/// The change events of the daemon, passed on to every open session.
#[derive(Default)]
struct FanOut {
    sinks: Mutex<Vec<mpsc::UnboundedSender<Event>>>,
}

impl FanOut {
    fn add(&self, tx: mpsc::UnboundedSender<Event>) {
        if let Ok(mut s) = self.sinks.lock() {
            s.push(tx);
        }
    }

    /// Send a copy to every session still listening; forget the others.
    fn send(&self, event: &Event) {
        let Ok(mut sinks) = self.sinks.lock() else {
            return;
        };
        sinks.retain(|tx| {
            let copy = match event {
                Event::Changed(c) => Event::Changed(c.clone()),
                Event::Resubscribed => Event::Resubscribed,
                Event::Log(level, data) => Event::Log(*level, data.clone()),
            };
            tx.send(copy).is_ok()
        });
    }
}

/// Connect to the database's daemon (starting it when needed) and build the `/mcp` service.
/// Must run inside a Tokio runtime.
pub async fn http_service(db_dir: PathBuf, options: HttpOptions) -> Result<HttpMcp> {
    let max = options.daemon_connections;
    let pool = tokio::task::spawn_blocking(move || ClientPool::connect_with(db_dir, max))
        .await
        .map_err(|e| KbError::Daemon(e.to_string()))??;
    let pool = Arc::new(pool);
    let fan_out = Arc::new(FanOut::default());

    // One subscription for all sessions, followed on a thread of its own (and followed again
    // when the daemon restarts), until the server's runtime ends.
    {
        let (hub_tx, mut hub_rx) = mpsc::unbounded_channel();
        let hub = Arc::new(State::new(pool.clone(), hub_tx.clone(), None));
        let first = {
            let hub = hub.clone();
            tokio::task::spawn_blocking(move || hub.pool.subscription())
                .await
                .map_err(|e| KbError::Daemon(e.to_string()))?
        };
        std::thread::spawn(move || follow_changes(&hub, first, &hub_tx));
        let fan_out = fan_out.clone();
        let cancel = options.cancel.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    ev = hub_rx.recv() => match ev {
                        Some(ev) => fan_out.send(&ev),
                        None => break,
                    },
                    _ = cancel.cancelled() => break,
                }
            }
        });
    }

    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(options.session_idle);
    let mut manager = LocalSessionManager::default();
    manager.session_config = session_config;
    let sessions = Arc::new(manager);

    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(options.max_body_bytes)
        .with_allowed_hosts(options.allowed_hosts.clone())
        .with_allowed_origins(options.allowed_origins.clone())
        .enforce_origin_validation()
        .with_cancellation_token(options.cancel.clone());

    let factory = {
        let pool = pool.clone();
        move || -> std::io::Result<Kbdb> {
            let (tx, rx) = mpsc::unbounded_channel();
            fan_out.add(tx.clone());
            let state = Arc::new(State::new(pool.clone(), tx, Some(rx)));
            let guard = state.ended.clone().drop_guard();
            Ok(Kbdb {
                state,
                _end_guard: Some(Arc::new(guard)),
            })
        }
    };
    let service = StreamableHttpService::new(factory, sessions.clone(), config);
    Ok(HttpMcp {
        router: axum::Router::new().route_service("/mcp", service),
        sessions,
        pool,
    })
}
