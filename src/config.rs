//! Per-database configuration: `worker.toml` in the database folder, overridden per process by
//! environment variables. Every key is listed in docs/configuration.md.

use std::path::Path;

use serde::Deserialize;

use crate::error::{KbError, Result};

pub const CONFIG_FILE: &str = "worker.toml";

/// The most bytes of `worker.toml` read (a larger file is refused, naming the bound).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub embedding: EmbeddingConfig,
    #[serde(default)]
    pub serve: ServeConfig,
}

/// `kbdb serve`: limits and guards of the MCP HTTP server (`[serve]`, docs/serve.md).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    /// Largest request body, in bytes (larger: 413).
    pub max_body_bytes: usize,
    /// Most MCP sessions open at once (one more `initialize`: 503).
    pub max_sessions: usize,
    /// Seconds a session may go without a request before it is ended.
    pub session_idle_secs: u64,
    /// Daemon connections the server's sessions share.
    pub daemon_connections: usize,
    /// Browser origins accepted besides the server's own (`scheme://host:port`).
    pub allowed_origins: Vec<String>,
    /// `Host` header values accepted besides the loopback names and the listen address
    /// (`host` or `host:port`; `"*"` accepts any, for a server behind a reverse proxy that
    /// checks it).
    pub allowed_hosts: Vec<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_body_bytes: 16 * 1024 * 1024,
            max_sessions: 256,
            session_idle_secs: 1800,
            daemon_connections: 16,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
        }
    }
}

/// Which embedding provider computes section vectors (`[embedding]`, hybrid-search spec).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// No vectors; `vector`/`hybrid` searches fail with EMBEDDING_PROVIDER_NOT_CONFIGURED.
    #[default]
    None,
    /// Local inference with ONNX Runtime (`model_path`, `runtime_library`).
    Onnx,
    /// An OpenAI-compatible `POST {api_url}/embeddings` endpoint.
    Api,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddingConfig {
    pub provider: ProviderKind,
    /// Model name: recorded with every vector, compared for stale detection, sent to the API.
    pub model: String,
    /// Vector length the provider must return.
    pub dimensions: usize,
    /// The RRF constant k.
    pub rrf_k: u32,
    /// API provider: base URL (`…/v1`); requests go to `{api_url}/embeddings`.
    pub api_url: String,
    /// API provider: name of the environment variable holding the API key (may be unset for
    /// endpoints without authentication).
    pub api_key_env: String,
    /// API provider: seconds before one HTTP request is abandoned.
    pub api_timeout_secs: u64,
    /// API provider: retries after a 429 or 5xx answer or a connection failure.
    pub api_max_retries: u32,
    /// Most texts sent to the provider in one call.
    pub batch_size: usize,
    /// ONNX provider: folder holding `model.onnx` and `tokenizer.json`.
    pub model_path: String,
    /// ONNX provider: path of the ONNX Runtime shared library (`ORT_DYLIB_PATH` also works).
    pub runtime_library: String,
}

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
            provider: ProviderKind::None,
            model: "all-MiniLM-L6-v2".into(),
            dimensions: 384,
            rrf_k: 60,
            api_url: String::new(),
            api_key_env: "KBDB_API_KEY".into(),
            api_timeout_secs: 30,
            api_max_retries: 3,
            batch_size: 64,
            model_path: String::new(),
            runtime_library: String::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Seconds without any client connected after which the daemon exits (0 = never).
    pub idle_timeout_secs: u64,
    /// Seconds a client waits for the answer to an ordinary request (maintenance requests —
    /// check, gc, rebuild, export, import — wait as long as they run).
    pub request_timeout_secs: u64,
    /// Seconds a client waits for a daemon of its database that holds the database without
    /// answering (still exiting after a kill, or still starting) before it gives up.
    pub silent_daemon_wait_secs: u64,
    /// Most clients a daemon serves at once (each has a thread); one more is told so and closed.
    pub max_clients: usize,
    /// Group commits go through the write journal (`kbdb.journal`: one sequential fsync per
    /// group, redb made durable by a checkpoint); false: each group commits durably in redb.
    pub journal: bool,
    /// Milliseconds between the journal's checkpoints (a group committed durably in redb, after
    /// which the journal starts over): what a replay after a crash applies at most.
    pub journal_checkpoint_ms: u64,
    /// Seconds a connection may stay without a request before the daemon closes it (0 = never;
    /// subscribed connections wait for events and are exempt). Clients reconnect by themselves.
    pub connection_idle_secs: u64,
    /// Seconds a message may take from its first byte to its newline; a peer that sends part of
    /// a line and stalls is dropped then (with a 64 MiB line limit, one stalled peer per client
    /// slot could otherwise hold 512 buffers for ever).
    pub message_timeout_secs: u64,
    /// Change events a subscriber may lag behind the latest change before it is dropped (its
    /// connection closed: it subscribes again). Events are read from the change log by each
    /// subscriber's own thread, so a lagging one costs no memory and never blocks a write.
    pub subscriber_max_behind: u64,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            idle_timeout_secs: 300,
            request_timeout_secs: 120,
            silent_daemon_wait_secs: 60,
            max_clients: 512,
            journal: true,
            journal_checkpoint_ms: 1000,
            connection_idle_secs: 600,
            message_timeout_secs: 60,
            subscriber_max_behind: 100_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest accepted `content` (bytes of the text, or of the base64 text for images).
    pub max_content_bytes: u64,
    /// Most sections accepted by one `learn_many` call.
    pub max_batch: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_content_bytes: 10 * 1024 * 1024,
            max_batch: 10_000,
        }
    }
}

impl Config {
    /// Load `worker.toml` from `dir` (defaults when absent), then apply environment overrides.
    pub fn load(dir: &Path) -> Result<Config> {
        let file = dir.join(CONFIG_FILE);
        let mut cfg = match crate::files::read_small_text(&file, MAX_CONFIG_BYTES) {
            Ok(text) => toml::from_str::<Config>(&text).map_err(|e| KbError::Config {
                file: file.clone(),
                message: e.to_string().trim().replace('\n', " "),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(KbError::io(format!("cannot read {}", file.display()), e)),
        };
        cfg.apply_env(|k| std::env::var(k).ok())?;
        cfg.validate(&file)?;
        Ok(cfg)
    }

    fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<()> {
        fn parse<T: std::str::FromStr>(key: &str, v: String) -> Result<T> {
            v.trim().parse().map_err(|_| KbError::Config {
                file: "environment".into(),
                message: format!("{key}={v:?} is not a non-negative whole number"),
            })
        }
        if let Some(v) = get("KBDB_MAX_CONTENT_BYTES") {
            self.limits.max_content_bytes = parse("KBDB_MAX_CONTENT_BYTES", v)?;
        }
        if let Some(v) = get("KBDB_MAX_BATCH") {
            self.limits.max_batch = parse("KBDB_MAX_BATCH", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_IDLE_SECS") {
            self.daemon.idle_timeout_secs = parse("KBDB_DAEMON_IDLE_SECS", v)?;
        }
        if let Some(v) = get("KBDB_REQUEST_TIMEOUT_SECS") {
            self.daemon.request_timeout_secs = parse("KBDB_REQUEST_TIMEOUT_SECS", v)?;
        }
        if let Some(v) = get("KBDB_SILENT_DAEMON_WAIT_SECS") {
            self.daemon.silent_daemon_wait_secs = parse("KBDB_SILENT_DAEMON_WAIT_SECS", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_MAX_CLIENTS") {
            self.daemon.max_clients = parse("KBDB_DAEMON_MAX_CLIENTS", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_JOURNAL_CHECKPOINT_MS") {
            self.daemon.journal_checkpoint_ms = parse("KBDB_DAEMON_JOURNAL_CHECKPOINT_MS", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_CONNECTION_IDLE_SECS") {
            self.daemon.connection_idle_secs = parse("KBDB_DAEMON_CONNECTION_IDLE_SECS", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_MESSAGE_TIMEOUT_SECS") {
            self.daemon.message_timeout_secs = parse("KBDB_DAEMON_MESSAGE_TIMEOUT_SECS", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_SUBSCRIBER_MAX_BEHIND") {
            self.daemon.subscriber_max_behind = parse("KBDB_DAEMON_SUBSCRIBER_MAX_BEHIND", v)?;
        }
        if let Some(v) = get("KBDB_DAEMON_JOURNAL") {
            self.daemon.journal = match v.trim() {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => {
                    return Err(KbError::Config {
                        file: "environment".into(),
                        message: format!("KBDB_DAEMON_JOURNAL={v:?} is not true, false, 1 or 0"),
                    });
                }
            };
        }
        Ok(())
    }

    fn validate(&self, file: &Path) -> Result<()> {
        let err = |message: &str| {
            Err(KbError::Config {
                file: file.to_path_buf(),
                message: message.to_string(),
            })
        };
        if self.limits.max_content_bytes == 0 {
            return err("limits.max_content_bytes must be at least 1");
        }
        if self.limits.max_batch == 0 {
            return err("limits.max_batch must be at least 1");
        }
        if self.daemon.request_timeout_secs == 0 {
            return err("daemon.request_timeout_secs must be at least 1");
        }
        if self.daemon.max_clients == 0 {
            return err("daemon.max_clients must be at least 1");
        }
        if self.daemon.journal_checkpoint_ms == 0 {
            return err("daemon.journal_checkpoint_ms must be at least 1");
        }
        if self.daemon.message_timeout_secs == 0 {
            return err("daemon.message_timeout_secs must be at least 1");
        }
        let s = &self.serve;
        if s.max_body_bytes < 1024 {
            return err("serve.max_body_bytes must be at least 1024");
        }
        if s.max_sessions == 0 {
            return err("serve.max_sessions must be at least 1");
        }
        if s.session_idle_secs == 0 {
            return err("serve.session_idle_secs must be at least 1");
        }
        if s.daemon_connections == 0 {
            return err("serve.daemon_connections must be at least 1");
        }
        let e = &self.embedding;
        if e.dimensions == 0 || e.dimensions > u16::MAX as usize {
            return err("embedding.dimensions must be between 1 and 65535");
        }
        if e.rrf_k == 0 {
            return err("embedding.rrf_k must be at least 1");
        }
        if e.batch_size == 0 || e.batch_size > 2048 {
            return err("embedding.batch_size must be between 1 and 2048");
        }
        if e.api_timeout_secs == 0 {
            return err("embedding.api_timeout_secs must be at least 1");
        }
        if e.model.trim().is_empty() {
            return err("embedding.model must not be empty");
        }
        if e.provider == ProviderKind::Api && e.api_url.trim().is_empty() {
            return err("embedding.api_url must be set when embedding.provider = \"api\"");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named() {
        let e = toml::from_str::<Config>("[limits]\nmax_contnet_bytes = 3\n").unwrap_err();
        assert!(e.to_string().contains("max_contnet_bytes"), "{e}");
    }

    #[test]
    fn env_overrides_file() {
        let mut c: Config = toml::from_str("[limits]\nmax_content_bytes = 3\n").unwrap();
        c.apply_env(|k| (k == "KBDB_MAX_CONTENT_BYTES").then(|| "7".to_string()))
            .unwrap();
        assert_eq!(c.limits.max_content_bytes, 7);
        assert!(c.apply_env(|_| Some("x".into())).is_err());
    }

    #[test]
    fn the_journal_settings_are_read_and_checked() {
        let c: Config =
            toml::from_str("[daemon]\njournal = false\njournal_checkpoint_ms = 50\n").unwrap();
        assert_eq!(
            (c.daemon.journal, c.daemon.journal_checkpoint_ms),
            (false, 50)
        );
        let c: Config = toml::from_str("[daemon]\njournal_checkpoint_ms = 0\n").unwrap();
        let e = c.validate(Path::new("worker.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("daemon.journal_checkpoint_ms must be at least 1"),
            "{e}"
        );
        let mut c = Config::default();
        assert!(c.daemon.journal);
        c.apply_env(|k| (k == "KBDB_DAEMON_JOURNAL").then(|| "0".to_string()))
            .unwrap();
        assert!(!c.daemon.journal);
        let e = c
            .apply_env(|k| (k == "KBDB_DAEMON_JOURNAL").then(|| "maybe".to_string()))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("KBDB_DAEMON_JOURNAL=\"maybe\" is not true, false, 1 or 0"),
            "{e}"
        );
    }

    #[test]
    fn the_serve_limits_are_read_and_checked() {
        let c: Config = toml::from_str(
            "[serve]\nmax_sessions = 3\nallowed_origins = [\"https://kb.example.com\"]\n",
        )
        .unwrap();
        assert_eq!(c.serve.max_sessions, 3);
        assert_eq!(c.serve.allowed_origins, ["https://kb.example.com"]);
        let c: Config = toml::from_str("[serve]\nsession_idle_secs = 0\n").unwrap();
        let e = c.validate(Path::new("worker.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("serve.session_idle_secs must be at least 1"),
            "{e}"
        );
        let e = toml::from_str::<Config>("[serve]\nmax_session = 3\n").unwrap_err();
        assert!(e.to_string().contains("max_session"), "{e}");
    }

    #[test]
    fn a_daemon_without_room_for_any_client_is_refused_naming_the_setting() {
        let c: Config = toml::from_str("[daemon]\nmax_clients = 0\n").unwrap();
        let e = c.validate(Path::new("worker.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("daemon.max_clients must be at least 1"),
            "{e}"
        );
        let mut c = Config::default();
        c.apply_env(|k| (k == "KBDB_DAEMON_MAX_CLIENTS").then(|| "3".to_string()))
            .unwrap();
        assert_eq!(c.daemon.max_clients, 3);
        assert!(c.validate(Path::new("worker.toml")).is_ok());
    }
}
