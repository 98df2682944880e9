//! Per-database configuration: `worker.toml` in the database folder, overridden per process by
//! environment variables. Every key is listed in docs/configuration.md.

use std::path::Path;

use serde::Deserialize;

use crate::error::{KbError, Result};

pub const CONFIG_FILE: &str = "worker.toml";

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub daemon: DaemonConfig,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// Seconds without any client connected after which the daemon exits (0 = never).
    pub idle_timeout_secs: u64,
    /// Seconds a client waits for the answer to an ordinary request (maintenance requests —
    /// check, gc, rebuild, export, import — wait as long as they run).
    pub request_timeout_secs: u64,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            idle_timeout_secs: 300,
            request_timeout_secs: 120,
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
        let mut cfg = match std::fs::read_to_string(&file) {
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
}
