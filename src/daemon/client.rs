//! The daemon client: connects to the database's daemon, starting one when none answers (a
//! start lock keeps racing clients from starting two), replaces a daemon of another build, and
//! calls methods. A read whose daemon died mid-request is retried once on a fresh daemon; a write
//! is not (it reports that it may not have been applied).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::methods::error_from_object;
use super::operations;
use super::server::{OPERATION_FAILED, identity};
use super::{LOG_FILE, START_TIMEOUT, endpoint};
use crate::config::Config;
use crate::error::{KbError, Result};

/// What `hello` says about the daemon.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct DaemonInfo {
    pub version: String,
    pub build: String,
    pub pid: u32,
    pub db: String,
    /// What the daemon has done since it started (absent from daemons of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<Box<Activity>>,
}

/// A running daemon's counters, from `hello`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Activity {
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Open client connections, the asking one included.
    pub clients: u64,
    /// The most it serves at once (`daemon.max_clients`; 0 from daemons of older builds).
    #[serde(default)]
    pub max_clients: u64,
    /// The most clients it served at once since it started (0 from daemons of older builds).
    #[serde(default)]
    pub peak_clients: u64,
    /// Those of them subscribed to change events (MCP servers).
    #[serde(default)]
    pub subscribers: u64,
    /// Writes acknowledged (each section learned, document edited or section unlearned).
    pub writes: u64,
    /// Groups the writer made of them: one transaction each, committed with one fsync when it
    /// changed something.
    pub write_groups: u64,
    /// Its socket and its log file.
    pub socket: String,
    pub log: String,
}

pub struct Client {
    db_dir: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    request_timeout: Duration,
    pub info: DaemonInfo,
}

fn daemon_err(msg: impl Into<String>) -> KbError {
    KbError::Daemon(msg.into())
}

/// A connection to a daemon that answered `hello`.
type Connection = (UnixStream, BufReader<UnixStream>, DaemonInfo);

/// Connect to a socket and say hello: None when nobody answers; an error when a daemon answers
/// but refuses this client (it could not start a thread for it).
fn try_connect(sock: &Path) -> Result<Option<Connection>> {
    let Ok(stream) = UnixStream::connect(sock) else {
        return Ok(None);
    };
    if stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .is_err()
    {
        return Ok(None);
    }
    let Ok(mut writer) = stream.try_clone() else {
        return Ok(None);
    };
    let mut reader = BufReader::new(stream);
    let hello = json!({"jsonrpc": "2.0", "id": 0, "method": "hello"}).to_string();
    // A daemon that refuses a client writes why and closes at once, so sending can fail while
    // its answer is still there to read.
    let _ = writer.write_all(format!("{hello}\n").as_bytes());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return Ok(None);
    }
    let Ok(v) = serde_json::from_str::<Value>(&line) else {
        return Ok(None);
    };
    if let Some(e) = v.get("error") {
        let why = e["message"].as_str().unwrap_or("no reason given");
        return Err(daemon_err(format!(
            "the daemon on {} refused this client: {why}",
            sock.display()
        )));
    }
    Ok(v.get("result")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .map(|info| (writer, reader, info)))
}

/// Ask the daemon on `sock` to stop and wait until it has exited (and so released the
/// database).
pub fn stop_daemon(sock: &Path) -> Result<bool> {
    let Some((mut writer, mut reader, info)) = try_connect(sock)? else {
        return Ok(false);
    };
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "shutdown"}).to_string();
    let _ = writer.write_all(format!("{req}\n").as_bytes());
    let mut line = String::new();
    let _ = reader.read_line(&mut line);
    drop((writer, reader));
    let deadline = Instant::now() + START_TIMEOUT;
    while (sock.exists() || crate::process::alive(info.pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if sock.exists() || crate::process::alive(info.pid) {
        return Err(daemon_err(format!(
            "the daemon on {} did not stop within {}s",
            sock.display(),
            START_TIMEOUT.as_secs()
        )));
    }
    Ok(true)
}

/// The socket of the daemon serving `db_dir`: the one recorded in the database folder when it
/// answers, else this user's runtime folder's.
pub fn daemon_socket(db_dir: &Path) -> Result<PathBuf> {
    let (own, _) = endpoint(db_dir)?;
    Ok(super::recorded_socket(db_dir)
        .filter(|s| UnixStream::connect(s).is_ok())
        .unwrap_or(own))
}

/// The running daemon's `hello`, if one answers.
pub fn daemon_info(db_dir: &Path) -> Result<Option<DaemonInfo>> {
    let sock = daemon_socket(db_dir)?;
    Ok(try_connect(&sock)?.map(|(_, _, info)| info))
}

/// Start `kbdb daemon --db DIR` detached (own session, no terminal, output to the log).
fn spawn_daemon(db_dir: &Path) -> Result<std::process::Child> {
    let exe = std::env::current_exe()
        .map_err(|e| KbError::io("cannot find the kbdb executable to start the daemon", e))?;
    let mut cmd = Command::new(exe);
    // A daemon that fails at start prints its error as JSON on its stdout, a pipe read by this
    // client (`start_error`): its code and its cause reach the user even when the daemon
    // cannot write its log (a full disk). Once it serves, it points its stdout elsewhere.
    cmd.arg("--db")
        .arg(db_dir)
        .args(["--format", "json", "daemon"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from the client's terminal
    // and process group so that the client's exit or Ctrl-C does not stop it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| KbError::io("cannot start the kbdb daemon", e))
}

/// The size of the daemon's log, so a failed start reports only what it logged.
fn log_len(db_dir: &Path) -> u64 {
    std::fs::metadata(db_dir.join(LOG_FILE)).map_or(0, |m| m.len())
}

/// The last lines the daemon logged after `from` (a byte offset): the lines of this start.
fn log_tail(db_dir: &Path, from: u64) -> String {
    let log = db_dir.join(LOG_FILE);
    // The last 64 KiB after `from` (a log shorter than before was started anew: moved aside
    // when it grew too large): enough for the last three lines.
    let bytes = crate::files::read_tail(&log, from, 64 * 1024).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().rev().take(3).collect();
    if lines.is_empty() {
        return format!("it logged nothing in {}", log.display());
    }
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// The error a daemon that exited at start printed on its stdout (`{"error": {code, message}}`),
/// read from the pipe (at most 64 KiB). None when it printed none (it died by a signal or a
/// panic; the log tail tells then).
fn start_error(child: &mut std::process::Child) -> Option<KbError> {
    use std::io::Read;
    let mut out = Vec::new();
    child
        .stdout
        .take()?
        .take(64 * 1024)
        .read_to_end(&mut out)
        .ok()?;
    let v: Value = serde_json::from_slice(&out).ok()?;
    v.get("error").map(super::methods::error_from_object)
}

/// A daemon of this user can only serve a database folder and file this user may read and
/// write; say so at once (such a daemon fails at start, often before it can write its log).
fn check_access(db_dir: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let file = db_dir.join(crate::store::DB_FILE);
    for (path, mode, what) in [
        (
            db_dir,
            libc::R_OK | libc::W_OK | libc::X_OK,
            "database folder",
        ),
        (file.as_path(), libc::R_OK | libc::W_OK, "database file"),
    ] {
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        if unsafe { libc::access(c.as_ptr(), mode) } != 0 {
            return Err(KbError::io(
                format!(
                    "cannot use the {what} {} (it must be readable and writable by you, uid {})",
                    path.display(),
                    super::my_uid()
                ),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

impl Client {
    /// Connect to the daemon of the database in `db_dir` (which must exist), starting one
    /// when none answers and replacing one of another build.
    pub fn connect(db_dir: &Path) -> Result<Client> {
        let db_dir = db_dir
            .canonicalize()
            .map_err(|e| KbError::io(format!("cannot resolve {}", db_dir.display()), e))?;
        let config = Config::load(&db_dir)?;
        let (own, lock) = endpoint(&db_dir)?;
        // A daemon started from another runtime folder records its socket in the database
        // folder: use it rather than start a second daemon that could not open the database.
        let sock = super::recorded_socket(&db_dir)
            .filter(|s| *s != own && UnixStream::connect(s).is_ok())
            .unwrap_or(own);
        let (writer, reader, info) = match try_connect(&sock)? {
            Some(c) if c.2.build == identity(&db_dir) => c,
            Some((writer, reader, old)) => {
                tracing::info!(old = %old.build, new = %identity(&db_dir), "replacing a daemon of another build or configuration");
                drop((writer, reader));
                stop_daemon(&sock)?;
                start(&db_dir, &sock, &lock, &config)?
            }
            None => start(&db_dir, &sock, &lock, &config)?,
        };
        Ok(Client {
            db_dir,
            reader,
            writer,
            next_id: 1,
            request_timeout: Duration::from_secs(config.daemon.request_timeout_secs),
            info,
        })
    }

    /// Call `method`; `progress` receives `(done, total)` reports of long operations.
    pub fn call(
        &mut self,
        method: &str,
        params: Value,
        progress: Option<&dyn Fn(u64, u64)>,
    ) -> Result<Value> {
        if self.closed_by_daemon() {
            // Closed while idle (daemon.connection_idle_secs) or by a daemon that stopped:
            // nothing was sent, so any call may go to a new connection.
            *self = Client::connect(&self.db_dir)?;
        }
        match self.call_once(method, &params, progress) {
            Err(CallFailure::Lost(e))
                if operations::by_method(method).is_some_and(|o| o.idempotent()) =>
            {
                tracing::info!("daemon connection lost ({e}); reconnecting to retry {method}");
                *self = Client::connect(&self.db_dir)?;
                self.call_once(method, &params, progress)
                    .map_err(CallFailure::into_error)
            }
            Err(CallFailure::Lost(e)) => Err(lost_before_answer(method, &e)),
            r => r.map_err(CallFailure::into_error),
        }
    }

    /// Call `method` once for each item of `calls`, sending each call before reading the
    /// answer to the one before: the daemon reads and prepares the next while its writer
    /// commits the previous (docs/daemon.md). At most two calls are unanswered at a time.
    /// `done` gets each answer, in order. The items are drawn on a thread of their own, since
    /// drawing one may wait (a line typed on a terminal) while the answer to the previous is
    /// read and handed on. A lost connection fails the calls sent and not yet answered (they
    /// may or may not have been applied); the items left, and one whose sending failed (a
    /// line the daemon did not receive whole is never applied), then go one at a time
    /// (`call`, on a new connection).
    pub fn call_stream<P: serde::Serialize + Send>(
        &mut self,
        method: &str,
        calls: impl Iterator<Item = P> + Send,
        mut done: impl FnMut(Result<Value>),
    ) {
        if self.closed_by_daemon() {
            match Client::connect(&self.db_dir) {
                Ok(c) => *self = c,
                // Each call tries again, one at a time, and says why it failed.
                Err(_) => return self.call_each(method, None, calls, done),
            }
        }
        let timeout = self.request_timeout;
        let (writer, reader, next_id) = (&mut self.writer, &mut self.reader, &mut self.next_id);
        let (unsent, rest) = std::thread::scope(|s| {
            // A rendezvous: the next call is sent only once the answer to the one before it
            // is being read, so no more than two are unanswered.
            let (sent_tx, sent) = mpsc::sync_channel::<(u64, CallOutcome<()>)>(0);
            let sender = s.spawn(move || {
                let mut calls = calls;
                while let Some(params) = calls.next() {
                    let id = *next_id;
                    *next_id += 1;
                    let r = send_request(writer, id, method, &params, false);
                    if matches!(r, Err(CallFailure::Lost(_))) {
                        return (Some(params), calls);
                    }
                    if sent_tx.send((id, r)).is_err() {
                        break;
                    }
                }
                (None, calls)
            });
            let mut lost = false;
            for (id, r) in sent {
                let r = r.and_then(|()| {
                    if lost {
                        return Err(CallFailure::Lost(std::io::Error::other(
                            "an earlier call on this connection was lost",
                        )));
                    }
                    read_answer(reader, id, method, None, Some(timeout))
                });
                match r {
                    Err(CallFailure::Lost(e)) => {
                        if !lost {
                            lost = true;
                            // The sender may be blocked on a daemon that no longer reads.
                            let _ = reader.get_ref().shutdown(std::net::Shutdown::Both);
                        }
                        done(Err(lost_before_answer(method, &e)));
                    }
                    Err(CallFailure::Unanswered(e)) => {
                        // Not answered in time: the answers after it cannot be told apart.
                        lost = true;
                        let _ = reader.get_ref().shutdown(std::net::Shutdown::Both);
                        done(Err(e));
                    }
                    r => done(r.map_err(CallFailure::into_error)),
                }
            }
            // A panic while drawing the calls (a bug) is this caller's, as if drawn here.
            sender
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        });
        self.call_each(method, unsent, rest, done);
    }

    /// `call` for `first` (if any), then for each of `calls`, in order.
    fn call_each<P: serde::Serialize>(
        &mut self,
        method: &str,
        first: Option<P>,
        calls: impl Iterator<Item = P>,
        mut done: impl FnMut(Result<Value>),
    ) {
        for params in first.into_iter().chain(calls) {
            done(
                serde_json::to_value(params)
                    .map_err(|e| daemon_err(format!("cannot send {method}: {e}")))
                    .and_then(|params| self.call(method, params, None)),
            );
        }
    }

    /// Whether the daemon closed this connection (its end of stream is waiting to be read).
    fn closed_by_daemon(&self) -> bool {
        use std::os::fd::AsRawFd;
        if !self.reader.buffer().is_empty() {
            return false;
        }
        let mut byte = 0u8;
        // SAFETY: a valid socket and a one-byte buffer; MSG_PEEK leaves the data in place.
        let n = unsafe {
            libc::recv(
                self.reader.get_ref().as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0
    }

    fn call_once(
        &mut self,
        method: &str,
        params: &Value,
        progress: Option<&dyn Fn(u64, u64)>,
    ) -> CallOutcome<Value> {
        let id = self.next_id;
        self.next_id += 1;
        // An unknown method is answered at once (with an error): it gets the timeout.
        let long = operations::by_method(method).is_some_and(|o| o.long);
        let timeout = (!long).then_some(self.request_timeout);
        send_request(&mut self.writer, id, method, params, progress.is_some())?;
        read_answer(&mut self.reader, id, method, progress, timeout)
    }

    /// Subscribe this connection to change events; then read them with `next_event`.
    pub fn subscribe(&mut self) -> Result<()> {
        self.reader
            .get_ref()
            .set_read_timeout(None)
            .map_err(|e| KbError::io("socket", e))?;
        self.call("subscribe", json!({}), None).map(|_| ())
    }

    /// The next change event of a subscribed connection (blocks).
    pub fn next_event(&mut self) -> Result<crate::types::ChangeEvent> {
        loop {
            let mut buf = String::new();
            match self.reader.read_line(&mut buf) {
                Ok(0) => return Err(daemon_err("the daemon closed the subscription")),
                Ok(_) => {}
                Err(e) => return Err(KbError::io("reading a change event", e)),
            }
            let v: Value = serde_json::from_str(&buf)
                .map_err(|e| daemon_err(format!("unreadable event: {e}")))?;
            if v["method"] == "changed" {
                return serde_json::from_value(v["params"].clone())
                    .map_err(|e| daemon_err(format!("unreadable event: {e}")));
            }
        }
    }
}

/// Send call `id` without waiting for its answer.
fn send_request(
    writer: &mut UnixStream,
    id: u64,
    method: &str,
    params: &impl serde::Serialize,
    wants_progress: bool,
) -> CallOutcome<()> {
    // Serialized from borrowed parts: a batch's requests are not copied into a JSON tree.
    #[derive(serde::Serialize)]
    struct Request<'a, P> {
        jsonrpc: &'static str,
        id: u64,
        method: &'a str,
        params: &'a P,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        kbdb_progress: bool,
    }
    let request = Request {
        jsonrpc: "2.0",
        id,
        method,
        params,
        kbdb_progress: wants_progress,
    };
    let mut line = serde_json::to_vec(&request)
        .map_err(|e| CallFailure::Failed(daemon_err(format!("cannot send {method}: {e}"))))?;
    if line.len() > super::MAX_MESSAGE_BYTES {
        // The daemon would refuse it and hang up mid-send, which looks like its death.
        return Err(CallFailure::Failed(KbError::invalid(
            "request",
            format!(
                "is {} bytes as a daemon message; the limit is {} bytes (docs/daemon.md)",
                line.len(),
                super::MAX_MESSAGE_BYTES
            ),
        )));
    }
    line.push(b'\n');
    writer.write_all(&line).map_err(CallFailure::Lost)
}

/// Read the answer to call `id`, handing progress reports on, skipping other messages (change
/// events); `timeout`: how long the daemon may take (None: as long as it runs).
fn read_answer(
    reader: &mut BufReader<UnixStream>,
    id: u64,
    method: &str,
    progress: Option<&dyn Fn(u64, u64)>,
    timeout: Option<Duration>,
) -> CallOutcome<Value> {
    reader
        .get_ref()
        .set_read_timeout(timeout)
        .map_err(CallFailure::Lost)?;
    loop {
        let mut buf = String::new();
        match reader.read_line(&mut buf) {
            Ok(0) => {
                return Err(CallFailure::Lost(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed",
                )));
            }
            // A line cut short: the daemon died while writing it.
            Ok(_) if !buf.ends_with('\n') => {
                return Err(CallFailure::Lost(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of an answer",
                )));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(CallFailure::Unanswered(daemon_err(format!(
                    "the daemon did not answer {method} within {}s (daemon.request_timeout_secs)",
                    timeout.unwrap_or_default().as_secs()
                ))));
            }
            Err(e) => return Err(CallFailure::Lost(e)),
        }
        let mut v: Value = serde_json::from_str(&buf).map_err(|e| {
            CallFailure::Failed(daemon_err(format!(
                "unreadable answer from the daemon: {e}"
            )))
        })?;
        if v.get("id").is_none() || v["id"].is_null() && v.get("method").is_some() {
            // A notification: progress of this request, or a change event.
            if v["method"] == "progress"
                && let Some(p) = progress
            {
                p(
                    v["params"]["done"].as_u64().unwrap_or(0),
                    v["params"]["total"].as_u64().unwrap_or(0),
                );
            }
            continue;
        }
        if v["id"] != json!(id) {
            continue;
        }
        if let Some(err) = v.get("error") {
            let code = err["code"].as_i64().unwrap_or(0);
            let message = err["message"].as_str().unwrap_or("error").to_string();
            return Err(CallFailure::Failed(match err.get("data") {
                Some(data) if code == OPERATION_FAILED => error_from_object(data),
                _ if code == super::server::INVALID_PARAMS => KbError::InvalidInput {
                    field: "params".into(),
                    message,
                },
                _ => daemon_err(format!("daemon error {code}: {message}")),
            }));
        }
        // Taken, not cloned: a batch's answer holds a result per line.
        return Ok(v.get_mut("result").map_or(Value::Null, Value::take));
    }
}

/// A write whose connection was lost before its answer came.
fn lost_before_answer(method: &str, e: &std::io::Error) -> KbError {
    daemon_err(format!(
        "the daemon stopped before answering {method} ({e}); it may or may not have been applied — learning the same content again is safe"
    ))
}

type CallOutcome<T> = std::result::Result<T, CallFailure>;

enum CallFailure {
    /// The connection broke: the daemon may have died.
    Lost(std::io::Error),
    /// No answer within the request's time.
    Unanswered(KbError),
    Failed(KbError),
}

impl CallFailure {
    fn into_error(self) -> KbError {
        match self {
            CallFailure::Lost(e) => daemon_err(format!("lost the connection to the daemon: {e}")),
            CallFailure::Failed(e) | CallFailure::Unanswered(e) => e,
        }
    }
}

/// A daemon process of this database that does not answer still holds the database until it
/// is gone: killed, it exits only once its threads' disk writes are done (seconds on a loaded
/// machine); starting, it may not listen yet. A new daemon could not open the database, so
/// wait until such a process answers (its connection is returned) or is gone (None), at most
/// `wait` (`daemon.silent_daemon_wait_secs`).
fn wait_for_silent_daemons(
    db_dir: &Path,
    sock: &Path,
    wait: Duration,
) -> Result<Option<Connection>> {
    let deadline = Instant::now() + wait;
    let mut told = false;
    loop {
        let others = daemon_processes(db_dir);
        let Some(&pid) = others.first() else {
            return Ok(None);
        };
        // It may serve through another runtime folder's socket, which it records.
        for s in [Some(sock.to_path_buf()), super::recorded_socket(db_dir)]
            .into_iter()
            .flatten()
        {
            if UnixStream::connect(&s).is_ok()
                && let Some(c) = try_connect(&s)?
            {
                return Ok(Some(c));
            }
        }
        if !told {
            tracing::info!(
                pid,
                "waiting for a daemon of this database that does not answer to exit"
            );
            told = true;
        }
        if Instant::now() > deadline {
            return Err(daemon_err(format!(
                "a kbdb daemon of {} (pid {pid}) holds the database but has neither answered nor exited within {}s (daemon.silent_daemon_wait_secs); stop it (kill {pid})",
                db_dir.display(),
                wait.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The processes of this user (other than this one) that run `kbdb … daemon` for the database
/// in `db_dir` (a canonical path) and have not exited: `--db DIR`, `--db=DIR`, `KBDB_DIR` or the
/// default `.kbdb`, relative paths taken from the process's working folder.
fn daemon_processes(db_dir: &Path) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let proc_dir = entry.path();
        if pid == me || !entry.metadata().is_ok_and(|m| m.uid() == super::my_uid()) {
            continue;
        }
        // A killed daemon's main thread can be gone (its memory, folder and command line with
        // it) while another thread still finishes a disk write: read them from a live thread.
        let Some((task_dir, cmdline)) = std::fs::read_dir(proc_dir.join("task"))
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|t| {
                let cmdline = std::fs::read(t.path().join("cmdline")).ok()?;
                (!cmdline.is_empty()).then(|| (t.path(), cmdline))
            })
        else {
            continue;
        };
        // Each argument ends with a NUL.
        let args: Vec<&[u8]> = cmdline
            .strip_suffix(&[0])
            .unwrap_or(&cmdline)
            .split(|&b| b == 0)
            .collect();
        // A kbdb executable (not, say, `cargo test --test daemon`).
        let program = args.first().map(|a| std::ffi::OsStr::from_bytes(a));
        if !program
            .and_then(|p| Path::new(p).file_name())
            .is_some_and(|n| n.as_bytes().starts_with(b"kbdb"))
        {
            continue;
        }
        let Some(db) = daemon_run_args(&args) else {
            continue;
        };
        let db = db
            .or_else(|| {
                std::fs::read(task_dir.join("environ"))
                    .ok()
                    .and_then(|env| {
                        env.split(|&b| b == 0)
                            .find_map(|v| v.strip_prefix(b"KBDB_DIR=").map(<[u8]>::to_vec))
                    })
            })
            .unwrap_or_else(|| b".kbdb".to_vec());
        let db = PathBuf::from(std::ffi::OsString::from_vec(db));
        let db = match std::fs::read_link(task_dir.join("cwd")) {
            Ok(cwd) if db.is_relative() => cwd.join(db),
            _ => db,
        };
        if db.canonicalize().is_ok_and(|d| d == db_dir) && crate::process::alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// Whether a command line (the program first) runs `kbdb daemon` or `kbdb daemon run` — not
/// `daemon status`, nor `learn daemon` — and the `--db` it names, if any.
fn daemon_run_args(args: &[&[u8]]) -> Option<Option<Vec<u8>>> {
    let mut db = None;
    let mut words = Vec::new();
    let mut rest = args.iter().skip(1);
    while let Some(&a) = rest.next() {
        if a == b"--db" || a == b"--format" {
            let value = rest.next()?;
            if a == b"--db" {
                db = Some(value.to_vec());
            }
        } else if let Some(value) = a.strip_prefix(b"--db=") {
            db = Some(value.to_vec());
        } else if !a.starts_with(b"-") {
            words.push(a);
        }
    }
    match words.as_slice() {
        [b"daemon"] | [b"daemon", b"run"] => Some(db),
        _ => None,
    }
}

/// Take the start lock of a database (released when the file is dropped).
fn lock_start(lock: &Path) -> Result<File> {
    let lock_file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)
        .map_err(|e| KbError::io(format!("cannot open {}", lock.display()), e))?;
    lock_file
        .lock()
        .map_err(|e| KbError::io(format!("cannot lock {}", lock.display()), e))?;
    Ok(lock_file)
}

/// Create the database in `db_dir` (and the folder) for a client that goes through the
/// daemon; whether this call created it. Done under the start lock: the creating process
/// holds the database open for a moment, and a racing client starting the daemon meanwhile
/// would start one that cannot open it (`in use by another process`). Under the lock, a
/// database that exists by now was created by another client (whose daemon may already hold
/// it): it is left alone.
pub fn create_database(db_dir: &Path) -> Result<bool> {
    if !db_dir.exists() {
        crate::store::create_folder(db_dir)?;
    }
    let (_, lock) = endpoint(db_dir)?;
    let _lock = lock_start(&lock)?;
    if db_dir.join(crate::store::DB_FILE).exists() {
        return Ok(false);
    }
    Ok(crate::Kb::open_or_create(db_dir)?.1)
}

/// How long a start retries while the new daemon finds the database in use: a killed daemon
/// releases it only as its process ends; a process that holds it for longer (an embedded one)
/// is reported as `locked` after this.
const DYING_HOLDER_WAIT: Duration = Duration::from_secs(2);

/// Start a daemon under the start lock (or find the one another client just started).
fn start(db_dir: &Path, sock: &Path, lock: &Path, config: &Config) -> Result<Connection> {
    let _lock = lock_start(lock)?;
    // Another client may have started it while we waited for the lock.
    if let Some(c) = try_connect(sock)? {
        return Ok(c);
    }
    check_access(db_dir)?;
    let wait = Duration::from_secs(config.daemon.silent_daemon_wait_secs);
    if let Some(c) = wait_for_silent_daemons(db_dir, sock, wait)? {
        return Ok(c);
    }
    let log_from = log_len(db_dir);
    let mut child = spawn_daemon(db_dir)?;
    let deadline = Instant::now() + START_TIMEOUT;
    let locked_until = Instant::now() + DYING_HOLDER_WAIT;
    loop {
        if let Some(c) = try_connect(sock)? {
            // Reap the launcher's child record when it exits; the daemon lives on in its own
            // session.
            std::thread::spawn(move || child.wait());
            return Ok(c);
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Another client (from another runtime folder) may have won the race.
            if let Some(s) = super::recorded_socket(db_dir)
                && let Some(c) = try_connect(&s)?
            {
                return Ok(c);
            }
            let error = start_error(&mut child);
            // A daemon killed a moment ago holds the database until its last thread has
            // exited, after /proc stops naming it (`wait_for_silent_daemons`): start again.
            if matches!(&error, Some(e) if e.code() == "locked") && Instant::now() < locked_until {
                std::thread::sleep(Duration::from_millis(20));
                child = spawn_daemon(db_dir)?;
                continue;
            }
            return Err(match error {
                Some(KbError::Remote {
                    code,
                    message,
                    field,
                }) => KbError::Remote {
                    code,
                    message: format!("the kbdb daemon exited at start ({status}): {message}"),
                    field,
                },
                _ => daemon_err(format!(
                    "the kbdb daemon exited at start ({status}): {}",
                    log_tail(db_dir, log_from)
                )),
            });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(daemon_err(format!(
                "the kbdb daemon did not answer within {}s: {}",
                START_TIMEOUT.as_secs(),
                log_tail(db_dir, log_from)
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::daemon_run_args;

    fn run(line: &str) -> Option<Option<String>> {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        daemon_run_args(&args).map(|db| db.map(|d| String::from_utf8(d).unwrap()))
    }

    #[test]
    fn only_daemon_runs_are_taken_for_daemons() {
        assert_eq!(run("kbdb --db /k daemon"), Some(Some("/k".into())));
        assert_eq!(run("kbdb daemon --db=/k run"), Some(Some("/k".into())));
        assert_eq!(run("kbdb --format json daemon"), Some(None));
        assert_eq!(run("kbdb --embedded daemon run"), Some(None));
        assert_eq!(run("kbdb --db /k daemon status"), None);
        assert_eq!(run("kbdb --db /k daemon stop"), None);
        assert_eq!(run("kbdb --db /k learn daemon"), None);
        assert_eq!(run("kbdb --db daemon learn x"), None);
        assert_eq!(run("kbdb --format daemon status"), None);
        assert_eq!(run("kbdb --db"), None);
    }
}
