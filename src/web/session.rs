//! Who may see the page: a one-time sign-in secret (printed by `kbdb serve` as a link), then a
//! session id in an HttpOnly, SameSite=Strict cookie. Sessions live in memory, bounded and
//! expiring; a restart of the server signs everyone out.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

use crate::error::{KbError, Result};

/// Sessions kept at most; signing in beyond drops the one used least recently.
pub const MAX_SESSIONS: usize = 1000;
/// A session unused for this long is ended.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);

/// 32 random bytes from /dev/urandom, base64url.
pub fn random_secret() -> Result<String> {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| KbError::io("cannot read /dev/urandom", e))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

pub struct Sessions {
    inner: Mutex<Inner>,
}

struct Inner {
    /// The secret of the sign-in link now valid (one use).
    sign_in: String,
    /// Session id → last use.
    sessions: HashMap<String, Instant>,
}

/// What a sign-in attempt gave.
pub enum SignIn {
    /// A new session id, and the next sign-in link's secret.
    Ok {
        session: String,
        next: String,
    },
    Refused,
}

impl Sessions {
    pub fn new() -> Result<Sessions> {
        Ok(Sessions {
            inner: Mutex::new(Inner {
                sign_in: random_secret()?,
                sessions: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The secret of the current sign-in link.
    pub fn sign_in_secret(&self) -> String {
        self.lock().sign_in.clone()
    }

    /// Use the sign-in secret (compared in constant time): on a match, a new session and a
    /// fresh secret for the next link (the used one is spent).
    pub fn sign_in(&self, presented: &str) -> Result<SignIn> {
        let mut inner = self.lock();
        let ok: bool = presented.as_bytes().ct_eq(inner.sign_in.as_bytes()).into();
        if !ok {
            return Ok(SignIn::Refused);
        }
        let session = random_secret()?;
        let next = random_secret()?;
        inner.sign_in = next.clone();
        let now = Instant::now();
        inner
            .sessions
            .retain(|_, used| now.duration_since(*used) < SESSION_IDLE);
        if inner.sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = inner
                .sessions
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(id, _)| id.clone())
        {
            inner.sessions.remove(&oldest);
        }
        inner.sessions.insert(session.clone(), now);
        Ok(SignIn::Ok { session, next })
    }

    /// Whether `id` is a live session (its idle clock restarts).
    pub fn valid(&self, id: &str) -> bool {
        let mut inner = self.lock();
        let now = Instant::now();
        match inner.sessions.get_mut(id) {
            Some(used) if now.duration_since(*used) < SESSION_IDLE => {
                *used = now;
                true
            }
            Some(_) => {
                inner.sessions.remove(id);
                false
            }
            None => false,
        }
    }

    pub fn end(&self, id: &str) {
        self.lock().sessions.remove(id);
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|part| {
        let (k, v) = part.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_in_secret_works_once_and_makes_a_session() {
        let s = Sessions::new().unwrap();
        let secret = s.sign_in_secret();
        assert!(matches!(s.sign_in("wrong").unwrap(), SignIn::Refused));
        let SignIn::Ok { session, next } = s.sign_in(&secret).unwrap() else {
            panic!("refused")
        };
        assert_ne!(next, secret);
        assert!(s.valid(&session));
        assert!(!s.valid("other"));
        assert!(matches!(s.sign_in(&secret).unwrap(), SignIn::Refused));
        assert!(matches!(s.sign_in(&next).unwrap(), SignIn::Ok { .. }));
        s.end(&session);
        assert!(!s.valid(&session));
    }

    #[test]
    fn cookies_are_found_by_name() {
        assert_eq!(
            cookie("a=1; kbdb_session_7=xyz; b=2", "kbdb_session_7"),
            Some("xyz")
        );
        assert_eq!(cookie("a=1", "kbdb_session_7"), None);
    }
}
