//! The bearer tokens of `kbdb serve`: `serve-tokens.json` in the database folder (mode 0600),
//! holding each token's name, whether it is read-only, when it was made, and the SHA-256 of the
//! token — never the token itself, which is shown once, by `create` (docs/serve.md).
//!
//! The server reads the file again whenever it changed (size, time or inode), so a token
//! created or revoked by another process counts from the next request on.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::error::{KbError, Result};

/// The file of tokens, in the database folder.
pub const TOKENS_FILE: &str = "serve-tokens.json";
/// Held (flock) while the file is read, changed and replaced, so two `token create`s at once
/// both land.
const LOCK_FILE: &str = "serve-tokens.lock";
/// Every token starts with this, so a leaked one is recognisable (secret scanners).
pub const TOKEN_PREFIX: &str = "kbdb_";
/// Longest token name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Most tokens one database holds.
pub const MAX_TOKENS: usize = 1000;

/// One stored token: what `token list` shows, plus the hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenEntry {
    pub name: String,
    pub read_only: bool,
    /// RFC 3339.
    pub created: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
}

/// A token as `token list` shows it (no hash).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TokenInfo {
    pub name: String,
    pub read_only: bool,
    pub created: String,
}

/// A token just made: the only time its secret is known.
#[derive(Debug, Clone, Serialize)]
pub struct NewToken {
    pub name: String,
    pub token: String,
    pub read_only: bool,
}

/// What a valid token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub name: String,
    pub read_only: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TokenFile {
    tokens: Vec<TokenEntry>,
}

fn tokens_path(db_dir: &Path) -> PathBuf {
    db_dir.join(TOKENS_FILE)
}

fn hex_sha256(token: &str) -> String {
    crate::types::kbid::sha256(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A token's name: 1–64 bytes of letters, digits, `.`, `_` and `-`.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(KbError::invalid(
            "name",
            format!(
                "must be 1 to {MAX_NAME_BYTES} bytes long (got {})",
                name.len()
            ),
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(KbError::invalid(
            "name",
            "may hold only ASCII letters, digits, '.', '_' and '-'",
        ));
    }
    Ok(())
}

fn read_file(path: &Path) -> Result<TokenFile> {
    // 1,000 tokens of a few hundred bytes each, with room to spare.
    match crate::files::read_small_text(path, 16 << 20) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| KbError::Config {
            file: path.to_path_buf(),
            message: format!("not a kbdb token file: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(TokenFile::default()),
        Err(e) => Err(KbError::io(format!("cannot read {}", path.display()), e)),
    }
}

/// Run `change` on the token file under its lock, then replace the file (0600, fsynced).
fn change_file<T>(db_dir: &Path, change: impl FnOnce(&mut TokenFile) -> Result<T>) -> Result<T> {
    if !db_dir.is_dir() {
        return Err(KbError::NotInitialized(db_dir.to_path_buf()));
    }
    let lock_path = db_dir.join(LOCK_FILE);
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| KbError::io(format!("cannot open {}", lock_path.display()), e))?;
    // SAFETY: flock on a file descriptor this function owns for the whole call.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(KbError::io(
            format!("cannot lock {}", lock_path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    let path = tokens_path(db_dir);
    let mut file = read_file(&path)?;
    let out = change(&mut file)?;
    let tmp = db_dir.join(format!("{TOKENS_FILE}.tmp"));
    let mut text = serde_json::to_string_pretty(&file)
        .map_err(|e| KbError::Storage(format!("cannot encode the token file: {e}")))?;
    text.push('\n');
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(db_dir)?.sync_all()
    };
    write().map_err(|e| KbError::io(format!("cannot write {}", path.display()), e))?;
    drop(lock);
    Ok(out)
}

/// A new random token: the prefix and 32 bytes from the system's random source, base64url.
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| KbError::io("cannot read /dev/urandom", e))?;
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// Make a token named `name` (unique); its secret is returned, only its hash stored.
pub fn create(db_dir: &Path, name: &str, read_only: bool) -> Result<NewToken> {
    check_name(name)?;
    let token = random_token()?;
    let sha256 = hex_sha256(&token);
    change_file(db_dir, |file| {
        if file.tokens.iter().any(|t| t.name == name) {
            return Err(KbError::invalid(
                "name",
                format!("a token named {name:?} exists; revoke it first or choose another name"),
            ));
        }
        if file.tokens.len() >= MAX_TOKENS {
            return Err(KbError::invalid(
                "name",
                format!("the database already has {MAX_TOKENS} tokens, the limit"),
            ));
        }
        file.tokens.push(TokenEntry {
            name: name.to_string(),
            read_only,
            created: crate::clock::now(),
            sha256,
        });
        Ok(())
    })?;
    Ok(NewToken {
        name: name.to_string(),
        token,
        read_only,
    })
}

/// The tokens, without their hashes, in the order they were made.
pub fn list(db_dir: &Path) -> Result<Vec<TokenInfo>> {
    Ok(read_file(&tokens_path(db_dir))?
        .tokens
        .into_iter()
        .map(|t| TokenInfo {
            name: t.name,
            read_only: t.read_only,
            created: t.created,
        })
        .collect())
}

/// Remove the token named `name`; NotFound when there is none.
pub fn revoke(db_dir: &Path, name: &str) -> Result<()> {
    change_file(db_dir, |file| {
        let before = file.tokens.len();
        file.tokens.retain(|t| t.name != name);
        if file.tokens.len() == before {
            return Err(KbError::NotFound(format!("no token named {name:?}")));
        }
        Ok(())
    })
}

/// The tokens as the server checks them: the file read again whenever it changed.
pub struct TokenStore {
    path: PathBuf,
    cache: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    /// (inode, size, mtime ns) of the file read; None when it was missing.
    stamp: Option<(u64, u64, i128)>,
    loaded: bool,
    tokens: Vec<TokenEntry>,
}

impl TokenStore {
    pub fn open(db_dir: &Path) -> Result<TokenStore> {
        let store = TokenStore {
            path: tokens_path(db_dir),
            cache: Mutex::new(Cached::default()),
        };
        store.current()?;
        Ok(store)
    }

    fn stamp(&self) -> Result<Option<(u64, u64, i128)>> {
        match std::fs::metadata(&self.path) {
            Ok(m) => Ok(Some((
                m.ino(),
                m.size(),
                i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(KbError::io(
                format!("cannot read {}", self.path.display()),
                e,
            )),
        }
    }

    /// The tokens now (re-read when the file changed since the last look).
    fn current(&self) -> Result<Vec<TokenEntry>> {
        let stamp = self.stamp()?;
        let mut cache = self
            .cache
            .lock()
            .map_err(|_| KbError::Storage("token cache poisoned".into()))?;
        if !cache.loaded || cache.stamp != stamp {
            cache.tokens = read_file(&self.path)?.tokens;
            cache.stamp = stamp;
            cache.loaded = true;
        }
        Ok(cache.tokens.clone())
    }

    /// How many tokens exist (a server with none refuses every request: the log says why).
    pub fn count(&self) -> Result<usize> {
        Ok(self.current()?.len())
    }

    /// What `token` grants, if it is a current token. Every stored hash is compared, each in
    /// constant time, so the time taken says nothing about how close a guess was.
    pub fn verify(&self, token: &str) -> Result<Option<Grant>> {
        let presented = hex_sha256(token);
        let mut found = None;
        for t in self.current()? {
            if bool::from(t.sha256.as_bytes().ct_eq(presented.as_bytes())) {
                found = Some(Grant {
                    name: t.name.clone(),
                    read_only: t.read_only,
                });
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_stored_as_its_hash_and_checked_until_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let store = TokenStore::open(dir.path()).unwrap();
        let t = create(dir.path(), "ci", true).unwrap();
        assert!(t.token.starts_with(TOKEN_PREFIX));
        let text = std::fs::read_to_string(dir.path().join(TOKENS_FILE)).unwrap();
        assert!(
            !text.contains(&t.token),
            "the secret itself is never stored"
        );
        let mode = std::fs::metadata(dir.path().join(TOKENS_FILE))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            store.verify(&t.token).unwrap(),
            Some(Grant {
                name: "ci".into(),
                read_only: true
            })
        );
        assert_eq!(store.verify("kbdb_wrong").unwrap(), None);
        revoke(dir.path(), "ci").unwrap();
        assert_eq!(store.verify(&t.token).unwrap(), None);
        assert!(matches!(
            revoke(dir.path(), "ci"),
            Err(KbError::NotFound(_))
        ));
    }

    #[test]
    fn names_are_checked_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "a b", "ü", &"x".repeat(65)] {
            let e = create(dir.path(), bad, false).unwrap_err();
            assert_eq!(e.field(), Some("name"), "{bad:?}");
        }
        create(dir.path(), "alice", false).unwrap();
        let e = create(dir.path(), "alice", true).unwrap_err();
        assert!(e.to_string().contains("exists"), "{e}");
        assert_eq!(list(dir.path()).unwrap().len(), 1);
    }
}
