//! The worker daemon (docs/daemon.md): one process owns a database and serves every client
//! (CLI, MCP servers, scripts) over a Unix socket, JSON-RPC 2.0 with one message per line.
//! Writes from all clients are grouped into shared transactions (group commit).

pub mod client;
pub mod methods;
pub mod operations;
pub mod params;
mod pipeline;
pub mod pool;
pub mod server;

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{KbError, Result};

/// Longest accepted message line (a 10 MiB image is ~14 MiB of base64 inside JSON).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// How long a client waits for a daemon it started to accept connections.
pub const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
/// The log file, in the database folder.
pub const LOG_FILE: &str = "daemon.log";
/// The previous log, kept once the log grew past [`LOG_ROTATE_BYTES`].
pub const OLD_LOG_FILE: &str = "daemon.log.1";
/// A daemon that starts with a log this large moves it to [`OLD_LOG_FILE`] (replacing the one
/// there) and starts a new one, so the logs of a database never take more than about twice this.
pub const LOG_ROTATE_BYTES: u64 = 8 * 1024 * 1024;

/// Open the daemon's log in `db_dir` for appending, first moving a log of
/// [`LOG_ROTATE_BYTES`] or more aside.
/// Never through a symbolic link planted in its place (it would append to the link's target).
pub fn open_log(db_dir: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let log = db_dir.join(LOG_FILE);
    if std::fs::symlink_metadata(&log).is_ok_and(|m| m.is_file() && m.len() >= LOG_ROTATE_BYTES) {
        // A daemon still writing the old file (one refused at start can get here while
        // another runs) goes on appending to it under its new name: no line is lost.
        std::fs::rename(&log, db_dir.join(OLD_LOG_FILE))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(log)
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The private per-user folder for sockets and start locks: `$KBDB_RUNTIME_DIR`, else
/// `$XDG_RUNTIME_DIR/kbdb`, else `/tmp/kbdb-<uid>`. Created 0700; refused when another user
/// owns it or others can enter it.
pub fn runtime_dir() -> Result<PathBuf> {
    let dir = if let Some(d) = std::env::var_os("KBDB_RUNTIME_DIR") {
        PathBuf::from(d)
    } else if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        PathBuf::from(d).join("kbdb")
    } else {
        std::env::temp_dir().join(format!("kbdb-{}", uid()))
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
    {
        Ok(()) => {}
        // Something else by that name: refused below as "not a plain folder".
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(KbError::io(format!("cannot create {}", dir.display()), e)),
    }
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| KbError::io(format!("cannot access {}", dir.display()), e))?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(KbError::Daemon(format!(
            "runtime folder {} is not a plain folder",
            dir.display()
        )));
    }
    if meta.uid() != uid() {
        return Err(KbError::Daemon(format!(
            "runtime folder {} belongs to uid {}, not to you (uid {}); set KBDB_RUNTIME_DIR to a private folder",
            dir.display(),
            meta.uid(),
            uid()
        )));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| KbError::io(format!("cannot make {} private", dir.display()), e))?;
    }
    Ok(dir)
}

/// Socket and start-lock paths of a database: named after the SHA-256 of its canonical path.
pub fn endpoint(db_dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let canonical = db_dir
        .canonicalize()
        .map_err(|e| KbError::io(format!("cannot resolve {}", db_dir.display()), e))?;
    let digest = crate::types::kbid::sha256(canonical.as_os_str().as_encoded_bytes());
    let name = crate::types::kbid::hex(&digest[..16]);
    let dir = runtime_dir()?;
    Ok((
        dir.join(format!("{name}.sock")),
        dir.join(format!("{name}.lock")),
    ))
}

/// The file in the database folder where a running daemon writes its socket's path, so that
/// clients whose runtime folder differs (an MCP host often starts servers with a bare
/// environment, without `XDG_RUNTIME_DIR`) still find it instead of starting a second one.
pub const ENDPOINT_FILE: &str = "daemon.endpoint";

/// The most bytes of `daemon.endpoint` read: a socket path (at most 108 bytes) and a newline.
const MAX_ENDPOINT_BYTES: u64 = 4096;

/// The socket recorded in the database folder, when it is a socket of this user.
pub fn recorded_socket(db_dir: &Path) -> Option<PathBuf> {
    let text =
        crate::files::read_small_text(&db_dir.join(ENDPOINT_FILE), MAX_ENDPOINT_BYTES).ok()?;
    let path = PathBuf::from(text.trim());
    let meta = std::fs::symlink_metadata(&path).ok()?;
    use std::os::unix::fs::FileTypeExt;
    (meta.file_type().is_socket() && meta.uid() == uid()).then_some(path)
}

/// Record `sock` as this database's daemon socket (written whole, then renamed into place).
pub(crate) fn record_socket(db_dir: &Path, sock: &Path) -> Result<()> {
    let tmp = db_dir.join(format!("{ENDPOINT_FILE}.{}", std::process::id()));
    // A new file (not through a link planted under that predictable name); one left by an
    // earlier process of the same pid is removed first.
    let _ = std::fs::remove_file(&tmp);
    crate::store::create_new(&tmp)
        .and_then(|mut f| f.write_all(sock.as_os_str().as_encoded_bytes()))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            crate::store::open_error("write", &tmp, e)
        })?;
    std::fs::rename(&tmp, db_dir.join(ENDPOINT_FILE)).map_err(|e| {
        KbError::io(
            format!("cannot write {}", db_dir.join(ENDPOINT_FILE).display()),
            e,
        )
    })
}

/// Forget the record if it still names `sock`.
pub(crate) fn forget_socket(db_dir: &Path, sock: &Path) {
    if recorded_socket(db_dir).is_some_and(|p| p == sock)
        || crate::files::read_small_text(&db_dir.join(ENDPOINT_FILE), MAX_ENDPOINT_BYTES)
            .is_ok_and(|t| Path::new(t.trim()) == sock)
    {
        let _ = std::fs::remove_file(db_dir.join(ENDPOINT_FILE));
    }
}

/// The uid of the process at the other end of a Unix socket.
pub fn peer_uid(stream: &std::os::unix::net::UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given; the fd is open.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(cred.uid)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub(crate) fn my_uid() -> u32 {
    uid()
}
