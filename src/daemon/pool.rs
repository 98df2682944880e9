//! A small pool of daemon connections for a long-lived, concurrent client (the MCP server):
//! each call borrows a connection (or opens one) and gives it back.

use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

use super::client::Client;
use crate::error::{KbError, Result};

/// Connections kept idle at most.
const MAX_IDLE: usize = 4;

pub struct ClientPool {
    db_dir: PathBuf,
    idle: Mutex<Vec<Client>>,
}

impl ClientPool {
    /// Connect once (starting the daemon when needed) so errors surface at startup.
    pub fn connect(db_dir: PathBuf) -> Result<ClientPool> {
        let first = Client::connect(&db_dir)?;
        Ok(ClientPool {
            db_dir,
            idle: Mutex::new(vec![first]),
        })
    }

    pub fn db_dir(&self) -> &std::path::Path {
        &self.db_dir
    }

    /// Call `method` on a pooled connection.
    pub fn call(&self, method: &str, params: Value) -> Result<Value> {
        let taken = self
            .idle
            .lock()
            .map_err(|_| KbError::Daemon("connection pool poisoned".into()))?
            .pop();
        let mut client = match taken {
            Some(c) => c,
            None => Client::connect(&self.db_dir)?,
        };
        let r = client.call(method, params, None);
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < MAX_IDLE
        {
            idle.push(client);
        }
        r
    }

    /// A dedicated connection subscribed to change events.
    pub fn subscription(&self) -> Result<Client> {
        let mut c = Client::connect(&self.db_dir)?;
        c.subscribe()?;
        Ok(c)
    }
}
