//! A small pool of daemon connections for a long-lived, concurrent client (the MCP server):
//! each call borrows a connection (or opens one, up to `MAX_CONNECTIONS`) and gives it back;
//! calls beyond that wait for one. However many calls a client pipelines, it holds at most
//! `MAX_CONNECTIONS` of the daemon's client slots (`daemon.max_clients`), so other clients (the
//! CLI) are never refused because of it.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex};

use serde_json::Value;

use super::client::Client;
use crate::error::{KbError, Result};

/// Connections a pool opens at most (a subscription is one more, of its own). Enough to run a
/// long call (check, rebuild) and reads next to it; the daemon runs writes one group at a time
/// anyway.
pub const MAX_CONNECTIONS: usize = 6;

struct Slots {
    /// Connections not in use.
    idle: Vec<Client>,
    /// Connections open or being opened, in use or idle.
    open: usize,
}

pub struct ClientPool {
    db_dir: PathBuf,
    /// Connections open at most.
    max: usize,
    slots: Mutex<Slots>,
    /// Signalled when a connection is given back (or a slot is freed).
    freed: Condvar,
}

fn poisoned<T>(_: T) -> KbError {
    KbError::Daemon("connection pool poisoned".into())
}

impl ClientPool {
    /// Connect once (starting the daemon when needed) so errors surface at startup.
    pub fn connect(db_dir: PathBuf) -> Result<ClientPool> {
        Self::connect_with(db_dir, MAX_CONNECTIONS)
    }

    /// `connect`, opening at most `max` connections (at least 1) — for a server whose many
    /// sessions share one pool (`kbdb serve`).
    pub fn connect_with(db_dir: PathBuf, max: usize) -> Result<ClientPool> {
        let first = Client::connect(&db_dir)?;
        Ok(ClientPool {
            db_dir,
            max: max.max(1),
            slots: Mutex::new(Slots {
                idle: vec![first],
                open: 1,
            }),
            freed: Condvar::new(),
        })
    }

    pub fn db_dir(&self) -> &std::path::Path {
        &self.db_dir
    }

    /// Call `method` on a pooled connection, waiting for one while all are busy.
    pub fn call(&self, method: &str, params: Value) -> Result<Value> {
        let mut client = self.take()?;
        let r = client.call(method, params, None);
        let mut slots = self.slots.lock().map_err(poisoned)?;
        slots.idle.push(client);
        self.freed.notify_one();
        r
    }

    /// An idle connection, a new one while fewer than the most are open, else the next
    /// one given back.
    fn take(&self) -> Result<Client> {
        let mut slots = self.slots.lock().map_err(poisoned)?;
        loop {
            if let Some(c) = slots.idle.pop() {
                return Ok(c);
            }
            if slots.open < self.max {
                slots.open += 1;
                drop(slots);
                return Client::connect(&self.db_dir).inspect_err(|_| {
                    if let Ok(mut slots) = self.slots.lock() {
                        slots.open -= 1;
                        self.freed.notify_one();
                    }
                });
            }
            slots = self.freed.wait(slots).map_err(poisoned)?;
        }
    }

    /// A dedicated connection subscribed to change events.
    pub fn subscription(&self) -> Result<Client> {
        let mut c = Client::connect(&self.db_dir)?;
        c.subscribe()?;
        Ok(c)
    }
}
