//! The daemon: accepts clients on the database's socket, runs reads on each connection's
//! thread (concurrent snapshots) and funnels writes to one writer thread that applies
//! everything queued in one transaction (group commit).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::methods::{self, CallError};
use super::operations::{self, Kind};
use super::pipeline::{Pending, Pipeline, answer_write};
use super::{MAX_MESSAGE_BYTES, endpoint, my_uid, peer_uid};
use crate::Kb;
use crate::error::{KbError, Result};
use crate::writes::WriteAnswer;

/// JSON-RPC error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// An operation failed; `data` holds `{code, message, field?}`.
pub const OPERATION_FAILED: i64 = -32000;

/// What a daemon was started with: the build, and the `worker.toml` it loaded (its
/// modification time), so a client replaces a daemon of another build or an outdated
/// configuration.
pub fn identity(db_dir: &Path) -> String {
    let config = std::fs::metadata(db_dir.join(crate::config::CONFIG_FILE))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{} config={config}", build_id())
}

/// Identity of this build: version plus the executable's size and modification time, so a
/// client of another build (even with the same version number) replaces the daemon.
pub fn build_id() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::metadata(p).ok());
    let (len, mtime) = exe
        .map(|m| {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            (m.len(), t)
        })
        .unwrap_or((0, 0));
    format!("{}/{len}-{mtime}", env!("CARGO_PKG_VERSION"))
}

struct Job {
    /// Validated and pre-computed on the client's connection thread (in parallel).
    ops: Vec<Result<crate::PreparedWrite>>,
    /// A small write with nothing of its connection before it (a client awaiting each write):
    /// it may go ahead of the jobs queued before it, which are all other connections' (see
    /// `Turn::start`).
    urgent: bool,
    /// The group's outcomes, or the error that failed the whole group (shared by its jobs).
    reply: mpsc::Sender<crate::writes::BatchOutcome>,
}

pub(super) type Conn = Arc<Mutex<UnixStream>>;

/// How long the indexer thread gathers committed groups before it feeds them to the lexical
/// index writer. Each round wakes the index writer's threads: one per group cost ~7 % of the
/// daemon's CPU at 8 writers (docs/performance.md). Searches do not wait for it: a search
/// first indexes whatever is still pending.
const INDEX_GATHER: Duration = Duration::from_millis(10);

/// A connection subscribed to change events. Its own thread (`feed`) reads the events from the
/// change log and writes them, so a subscriber that stops reading blocks only that thread,
/// never the writer; the writer only wakes it (`State::notify`), and drops it once it lags
/// more than `daemon.subscriber_max_behind` events behind.
struct Subscriber {
    conn: Conn,
    /// Another handle on the socket, to close it while a blocked write holds `conn`'s lock.
    closer: UnixStream,
    /// Wakes its thread (one pending wake-up is enough: the thread reads all that is new).
    wake: mpsc::SyncSender<()>,
    /// The last change sequence written to it.
    delivered: AtomicU64,
    dropped: AtomicBool,
}

impl Subscriber {
    /// Stop feeding it and close its connection: it sees the end of its stream, and subscribes
    /// again (the MCP server does, and tells its host that changes may have been missed).
    fn drop_it(&self) {
        if !self.dropped.swap(true, Ordering::AcqRel) {
            let _ = self.closer.shutdown(std::net::Shutdown::Both);
            let _ = self.wake.try_send(());
        }
    }
}

struct State {
    kb: Arc<Kb>,
    /// The queue of jobs for the writer (`Turn::queue` takes them), and the writer thread's
    /// wake-up (one per job); None once the daemon stops.
    jobs: Mutex<Option<(mpsc::Sender<Job>, mpsc::Sender<()>)>>,
    /// Jobs being prepared, queued or committed, of every connection.
    writing: AtomicUsize,
    /// The right to commit a group: the writer thread's, or a connection's that commits its
    /// own small write when no other is under way (`commit_here`).
    turn: Mutex<Turn>,
    subscribers: Mutex<Vec<Arc<Subscriber>>>,
    active: AtomicUsize,
    /// The most clients connected at once since the daemon started.
    peak: AtomicUsize,
    last_activity: Mutex<Instant>,
    stop: Arc<AtomicBool>,
    build: String,
    /// For `hello`: when it started, where it listens, what it has written.
    started: Instant,
    socket: PathBuf,
    writes: AtomicU64,
    write_groups: AtomicU64,
    /// Written to wake the accept loop (non-blocking: a full buffer already wakes it).
    wake: UnixStream,
}

/// What the one committing a group holds (`State::turn`).
struct Turn {
    /// The jobs queued for the next group.
    queue: mpsc::Receiver<Job>,
    /// Jobs taken from `queue` and not yet in a group, in arrival order.
    waiting: VecDeque<Job>,
    /// The last group started with urgent jobs and left others waiting: the next takes the
    /// jobs in arrival order (`start`).
    passed_over: bool,
    /// Tells the indexer thread of each committed group; None once the daemon stops writing.
    index: Option<mpsc::Sender<()>>,
}

impl State {
    fn wake(&self) {
        let _ = (&self.wake).write(&[1]);
    }

    fn touch(&self) {
        if let Ok(mut t) = self.last_activity.lock() {
            *t = Instant::now();
        }
    }

    /// Tell the subscribers that changes were committed: wakes each one's thread, and drops
    /// those that lag too far behind. Never writes to a socket, so never blocks.
    fn notify(&self) {
        let Ok(mut subs) = self.subscribers.lock() else {
            return;
        };
        if subs.is_empty() {
            return;
        }
        let latest = self.kb.last_change_seq().unwrap_or(0);
        let max_behind = self.kb.config().daemon.subscriber_max_behind;
        subs.retain(|s| {
            if s.dropped.load(Ordering::Acquire) {
                return false;
            }
            let behind = latest.saturating_sub(s.delivered.load(Ordering::Acquire));
            if behind > max_behind {
                tracing::warn!(
                    behind,
                    "dropping a subscriber that does not take its events (daemon.subscriber_max_behind)"
                );
                s.drop_it();
                return false;
            }
            let _ = s.wake.try_send(());
            true
        });
    }

    /// A subscriber for `conn` from the changes after `from`, its thread started (it writes
    /// nothing until `register` wakes it), or None when `conn` is subscribed already.
    fn new_subscriber(&self, conn: &Conn, from: u64) -> Result<Option<Arc<Subscriber>>> {
        let subscribed = self
            .subscribers
            .lock()
            .map_err(|_| KbError::Daemon("subscriber list poisoned".into()))?
            .iter()
            .any(|s| Arc::ptr_eq(&s.conn, conn));
        if subscribed {
            return Ok(None);
        }
        let closer = conn
            .lock()
            .map_err(|_| KbError::Daemon("connection lock poisoned".into()))?
            .try_clone()
            .map_err(|e| KbError::io("cannot configure the subscription", e))?;
        let (wake, woken) = mpsc::sync_channel(1);
        let sub = Arc::new(Subscriber {
            conn: conn.clone(),
            closer,
            wake,
            delivered: AtomicU64::new(from),
            dropped: AtomicBool::new(false),
        });
        let kb = self.kb.clone();
        let fed = sub.clone();
        named_thread("kbdb-subscriber", move || feed(&kb, &fed, woken))?;
        Ok(Some(sub))
    }

    /// Start feeding a subscriber (after its `subscribe` was answered): changes committed since
    /// its `from` are sent at once.
    fn register(&self, sub: Arc<Subscriber>) {
        let _ = sub.wake.try_send(());
        match self.subscribers.lock() {
            Ok(mut subs) => subs.push(sub),
            Err(_) => sub.drop_it(),
        }
    }
}

/// A subscriber's thread: on each wake-up, write every change after the last one delivered.
/// Ends when the subscriber is dropped or its connection fails.
fn feed(kb: &Kb, sub: &Subscriber, woken: mpsc::Receiver<()>) {
    while woken.recv().is_ok() {
        loop {
            if sub.dropped.load(Ordering::Acquire) {
                return;
            }
            let events = match kb.changes_since(sub.delivered.load(Ordering::Acquire)) {
                Ok(e) if e.is_empty() => break,
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!("cannot read the change log for a subscriber: {e}");
                    break;
                }
            };
            for e in events {
                let line = json!({"jsonrpc": "2.0", "method": "changed", "params": e}).to_string();
                if send_line(&sub.conn, &line).is_err() {
                    sub.drop_it();
                    return;
                }
                sub.delivered.store(e.seq, Ordering::Release);
            }
        }
    }
}

pub(super) fn send_line(conn: &Conn, line: &str) -> std::io::Result<()> {
    let mut s = conn
        .lock()
        .map_err(|_| std::io::Error::other("connection lock poisoned"))?;
    write_line(&mut s, line)
}

fn write_line(stream: &mut UnixStream, line: &str) -> std::io::Result<()> {
    // One buffer, one write: the line and its newline in two writes cost a second system call
    // and could wake the client twice.
    let mut buf = Vec::with_capacity(line.len() + 1);
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    stream.write_all(&buf)
}

fn response(id: &Value, result: Value) -> String {
    // Serialized from borrowed parts: no map built around the result, no copy of the id.
    #[derive(serde::Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a Value,
    }
    let line = Response {
        jsonrpc: "2.0",
        id,
        result: &result,
    };
    serde_json::to_string(&line).unwrap_or_else(|e| {
        error_response(
            id,
            OPERATION_FAILED,
            &format!("cannot encode the result: {e}"),
            None,
        )
    })
}

fn error_response(id: &Value, code: i64, message: &str, data: Option<Value>) -> String {
    let mut err = json!({"code": code, "message": message});
    if let Some(d) = data {
        err["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": err}).to_string()
}

/// One request line as the daemon reads it.
#[doc(hidden)]
pub enum RequestLine {
    /// Nothing but whitespace: no answer.
    Blank,
    /// Not a JSON-RPC 2.0 request: the error response line to send.
    Invalid(String),
    Call {
        id: Value,
        method: String,
        params: Value,
        /// `"kbdb_progress": true`: the client wants progress notifications.
        wants_progress: bool,
    },
}

/// Parse a request line (shared with the fuzz target, which drives the same parsing).
#[doc(hidden)]
pub fn parse_request(line: &[u8]) -> RequestLine {
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return RequestLine::Blank;
    }
    let mut req: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("parse error: {e}");
            return RequestLine::Invalid(error_response(&Value::Null, PARSE_ERROR, &msg, None));
        }
    };
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let method = req
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let (Some(method), true) = (method, req.get("jsonrpc") == Some(&json!("2.0"))) else {
        let msg = "invalid request: expected {\"jsonrpc\": \"2.0\", \"method\": …, \"id\": …}";
        return RequestLine::Invalid(error_response(&id, INVALID_REQUEST, msg, None));
    };
    let params = req
        .get_mut("params")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let wants_progress = req.get("kbdb_progress") == Some(&json!(true));
    RequestLine::Call {
        id,
        method,
        params,
        wants_progress,
    }
}

/// The response line for a call's outcome.
#[doc(hidden)]
pub fn reply_line(id: &Value, out: std::result::Result<Value, CallError>) -> String {
    match out {
        Ok(v) => response(id, v),
        Err(CallError::UnknownMethod(m)) => {
            error_response(id, METHOD_NOT_FOUND, &format!("unknown method: {m}"), None)
        }
        Err(CallError::InvalidParams(m)) => {
            error_response(id, INVALID_PARAMS, &format!("invalid params: {m}"), None)
        }
        Err(CallError::Kb(e)) => error_response(
            id,
            OPERATION_FAILED,
            &e.to_string(),
            Some(methods::error_object(&e)),
        ),
    }
}

/// Serve the database in `db_dir` until idle, SIGTERM/SIGINT or a `shutdown` request.
pub fn serve(db_dir: &Path) -> Result<()> {
    crate::process::disable_transparent_huge_pages();
    let kb = Arc::new(Kb::open(db_dir)?);
    if kb.config().daemon.journal {
        kb.enable_journal()?;
    }
    let (sock, _) = endpoint(kb.dir())?;
    if sock.exists() {
        if UnixStream::connect(&sock).is_ok() {
            return Err(KbError::Daemon(format!(
                "a kbdb daemon already serves {} (socket {})",
                kb.dir().display(),
                sock.display()
            )));
        }
        // Nobody answers: a socket left behind by a daemon that died.
        std::fs::remove_file(&sock)
            .map_err(|e| KbError::io(format!("cannot remove stale {}", sock.display()), e))?;
    }
    let listener = UnixListener::bind(&sock)
        .map_err(|e| KbError::io(format!("cannot listen on {}", sock.display()), e))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| KbError::io(format!("cannot protect {}", sock.display()), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| KbError::io("cannot configure the socket", e))?;
    // A convenience for clients of other runtime folders: a daemon that cannot write it (the
    // disk is full) still serves.
    if let Err(e) = super::record_socket(kb.dir(), &sock) {
        tracing::warn!("{e}; clients with another runtime folder will not find this daemon");
    }

    // The accept loop sleeps until a client connects or something writes to `wake`: a signal,
    // a `shutdown` request, the last client leaving (which starts the idle countdown). An idle
    // daemon is not woken by timers.
    let (wake_rx, wake_tx) =
        UnixStream::pair().map_err(|e| KbError::io("cannot create the wake-up socket", e))?;
    for end in [&wake_rx, &wake_tx] {
        end.set_nonblocking(true)
            .map_err(|e| KbError::io("cannot configure the wake-up socket", e))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| KbError::io("cannot install signal handlers", e))?;
        let waker = wake_tx
            .try_clone()
            .map_err(|e| KbError::io("cannot install signal handlers", e))?;
        signal_hook::low_level::pipe::register(sig, waker)
            .map_err(|e| KbError::io("cannot install signal handlers", e))?;
    }
    let idle = match kb.config().daemon.idle_timeout_secs {
        0 => None,
        s => Some(Duration::from_secs(s)),
    };
    let (tx, rx) = mpsc::channel::<Job>();
    let (ping, pings) = mpsc::channel::<()>();
    // The index follows the writer on its own thread: a write is acknowledged once durable,
    // and indexing (which searches would otherwise do themselves) overlaps the next group.
    let (index_tx, index_rx) = mpsc::channel::<()>();
    let state = Arc::new(State {
        kb: kb.clone(),
        jobs: Mutex::new(Some((tx, ping))),
        writing: AtomicUsize::new(0),
        turn: Mutex::new(Turn {
            queue: rx,
            waiting: VecDeque::new(),
            passed_over: false,
            index: Some(index_tx),
        }),
        subscribers: Mutex::new(Vec::new()),
        active: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        last_activity: Mutex::new(Instant::now()),
        stop: stop.clone(),
        build: identity(kb.dir()),
        started: Instant::now(),
        socket: sock.clone(),
        writes: AtomicU64::new(0),
        write_groups: AtomicU64::new(0),
        wake: wake_tx,
    });
    // Embeddings follow the lexical index on a third thread (a provider call can take from
    // milliseconds to seconds); it starts with a round, so sections left pending by a crash are
    // embedded without waiting for a write.
    let (embed_tx, embed_rx) = mpsc::channel::<()>();
    let embedder = if kb.embedding_configured() {
        let kb = kb.clone();
        kb.expect_embedding_probe();
        let _ = embed_tx.send(());
        Some(named_thread("kbdb-embedder", move || {
            embed_loop(&kb, embed_rx)
        })?)
    } else {
        None
    };
    let indexer = {
        let kb = kb.clone();
        named_thread("kbdb-indexer", move || {
            while index_rx.recv().is_ok() {
                // Let the groups of the next few milliseconds join this round: one batch for
                // the index writer instead of one per group (a search catches up by itself).
                std::thread::sleep(INDEX_GATHER);
                while index_rx.try_recv().is_ok() {}
                // A panic here (a damaged page) must not end the indexer: searches would
                // still catch up by themselves, but slower.
                if let Err(e) = crate::store::guard("indexing", || {
                    kb.index_pending();
                    Ok(())
                }) {
                    tracing::error!("{e}");
                    kb.recover_locks();
                }
                let _ = embed_tx.send(());
            }
        })?
    };
    let writer = {
        let state = state.clone();
        named_thread("kbdb-writer", move || write_loop(&state, pings))?
    };
    // The client that started this daemon reads its stdout until it exits, for a start error
    // (client.rs, `start_error`); from now on nothing is printed there.
    detach_stdout();
    tracing::info!(db = %kb.dir().display(), socket = %sock.display(), pid = std::process::id(), "daemon started");

    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                serve_client(&state, stream);
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => {
                // E.g. out of file descriptors: the listener stays readable, so pause.
                tracing::warn!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        }
        // Nobody connected: sleep until a client comes, a wake-up, or the idle time is up.
        let mut timeout = None;
        if let Some(idle) = idle
            && state.active.load(Ordering::SeqCst) == 0
        {
            let quiet = state
                .last_activity
                .lock()
                .map(|t| t.elapsed())
                .unwrap_or_default();
            if quiet >= idle {
                tracing::info!("idle for {}s: stopping", idle.as_secs());
                break;
            }
            timeout = Some(idle - quiet);
        }
        wait_readable(&listener, &wake_rx, timeout);
        while (&wake_rx).read(&mut [0u8; 64]).is_ok_and(|n| n > 0) {}
    }
    // Stop taking connections first, then let queued writes finish.
    let _ = std::fs::remove_file(&sock);
    super::forget_socket(kb.dir(), &sock);
    drop(listener);
    if let Ok(mut jobs) = state.jobs.lock() {
        jobs.take();
    }
    let _ = writer.join();
    // No connection commits from now on (one committing is waited for), and the indexer ends.
    state
        .turn
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .index = None;
    let _ = indexer.join();
    if let Some(e) = embedder {
        let _ = e.join();
    }
    if let Err(e) = kb.flush_index() {
        tracing::warn!("index flush at shutdown failed (it is replayed on the next open): {e}");
    }
    // The writer is done: make its journaled groups durable in redb, so a clean stop leaves
    // nothing to replay, and close the database (the process exits without dropping the
    // shared `Kb`; redb marks the file cleanly shut only when its database is dropped).
    if let Err(e) = kb.close() {
        tracing::warn!(
            "journal checkpoint at shutdown failed (it is replayed on the next open): {e}"
        );
    }
    tracing::info!("daemon stopped");
    Ok(())
}

/// Point stdout at /dev/null: the pipe of the client that started this daemon is for a start
/// error only, and that client may be long gone.
fn detach_stdout() {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: both descriptors are open; dup2 replaces fd 1 atomically.
        unsafe {
            libc::dup2(null.as_raw_fd(), libc::STDOUT_FILENO);
        }
    }
}

/// Serve a newly accepted client on a thread of its own.
fn serve_client(state: &Arc<State>, mut stream: UnixStream) {
    // Only this (the accept loop's) thread adds clients, so the count cannot pass the limit.
    let max = state.kb.config().daemon.max_clients;
    if state.active.load(Ordering::SeqCst) >= max {
        tracing::warn!("a client was refused: {max} are connected (daemon.max_clients)");
        refuse(
            &mut stream,
            &format!(
                "the daemon serves its limit of {max} clients (daemon.max_clients); retry when one has left, or raise the limit"
            ),
        );
        return;
    }
    // Kept to answer the client if no thread can be made for it.
    let refusal = stream.try_clone();
    let counted = ClientCount::new(state);
    let spawned = std::thread::Builder::new()
        .name("kbdb-client".into())
        .spawn(move || {
            if let Err(e) = handle(&counted.0, stream) {
                tracing::debug!("connection ended: {e}");
            }
        });
    // Out of threads (a flood of connections, a process limit): the thread's closure, and the
    // count with it, is already dropped; this client is told so and closed, and the daemon and
    // its other clients go on.
    if let Err(e) = spawned {
        tracing::warn!("cannot serve another client: {e}");
        if let Ok(mut s) = refusal {
            refuse(
                &mut s,
                &format!("the daemon cannot serve another client now ({e}); retry"),
            );
        }
    }
}

/// Tell a client it will not be served (a JSON-RPC error without an id), then close it.
fn refuse(stream: &mut UnixStream, message: &str) {
    let line = error_response(&Value::Null, OPERATION_FAILED, message, None);
    // A client that does not read cannot hold up the accept loop.
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(format!("{line}\n").as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// A connection leaves the subscribers when it ends (not only when a notification to it fails),
/// so that `hello` counts only live ones.
struct Unsubscribe<'a> {
    state: &'a State,
    conn: Conn,
}

impl Drop for Unsubscribe<'_> {
    fn drop(&mut self) {
        if let Ok(mut subs) = self.state.subscribers.lock() {
            subs.retain(|s| {
                let mine = Arc::ptr_eq(&s.conn, &self.conn);
                if mine {
                    s.drop_it();
                }
                !mine
            });
        }
    }
}

/// A connected client, counted in `State::active` from its acceptance until its thread ends —
/// also by a panic, so that one failed request cannot keep the daemon from ever becoming idle.
struct ClientCount(Arc<State>);

impl ClientCount {
    fn new(state: &Arc<State>) -> ClientCount {
        state.touch();
        let now = state.active.fetch_add(1, Ordering::SeqCst) + 1;
        state.peak.fetch_max(now, Ordering::Relaxed);
        ClientCount(state.clone())
    }
}

impl Drop for ClientCount {
    fn drop(&mut self) {
        self.0.touch();
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The last one: the accept loop starts counting idle time.
            self.0.wake();
        }
    }
}

/// Start one of the daemon's own threads, named so that `top -H` and profiles tell them apart.
fn named_thread(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| KbError::io(format!("cannot start the daemon's {name} thread"), e))
}

/// Embed pending sections whenever the indexer signals, retrying a failing provider with
/// exponential backoff (1 s doubling to 60 s) while sections wait. Ends when the indexer does.
fn embed_loop(kb: &Kb, signals: mpsc::Receiver<()>) {
    // Know first whether the provider works, so the first learn can say it does not.
    kb.probe_embedding();
    let mut backoff: Option<Duration> = None;
    loop {
        let next = match backoff {
            None => signals.recv().map_err(|_| ()),
            Some(d) => match signals.recv_timeout(d) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => Ok(()),
                Err(mpsc::RecvTimeoutError::Disconnected) => Err(()),
            },
        };
        if next.is_err() {
            return;
        }
        while signals.try_recv().is_ok() {}
        backoff = match crate::store::guard("embedding", || kb.embed_pending()) {
            Ok(()) => None,
            Err(_) => Some(
                backoff
                    .map(|d| (d * 2).min(Duration::from_secs(60)))
                    .unwrap_or(Duration::from_secs(1)),
            ),
        };
    }
}

/// Block until a connection is waiting, `wake` has something to read, or `timeout` passes
/// (None: no limit).
fn wait_readable(listener: &UnixListener, wake: &UnixStream, timeout: Option<Duration>) {
    use std::os::fd::AsRawFd;
    let mut fds = [listener.as_raw_fd(), wake.as_raw_fd()].map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // Rounded up, so that a wait never ends just before the idle time is up and spins.
    let ms = timeout.map_or(-1, |t| {
        i32::try_from(t.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
    });
    // SAFETY: two valid pollfds for the duration of the call.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
    }
}

/// The writes a group takes from the queue in arrival order, at most (urgent writes may still
/// join it): a bulk client's batch (1,024 lines) fills it. Its next batch then waits for the
/// next group instead of joining this one, so that the writer has it to start on as soon as
/// this one commits, while the client reads this group's answer and sends its next batch. A
/// group that took both batches the client keeps in flight left the writer idle until the next
/// came (a quarter of the daemon's CPU idle at 300k, docs/performance.md, *Full groups*).
const FULL_GROUP: usize = 1024;

/// The writer thread: a group for every wake-up that finds jobs queued (a connection that
/// committed meanwhile may have taken them into its own group). Ends once the daemon drops
/// the queue and every job queued before is answered.
fn write_loop(state: &State, pings: mpsc::Receiver<()>) {
    while pings.recv().is_ok() {
        // Waits while a connection commits (`commit_here`).
        let mut turn = state.turn.lock().unwrap_or_else(PoisonError::into_inner);
        // A panic outside a group's commit (which fails only that group) would be a bug: the
        // jobs taken with it are answered that the writer stopped, and the writer goes on, so
        // that the jobs queued after them are not left waiting.
        let turn = &mut *turn;
        let rounds = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while commit_queued(state, turn, None) {}
        }));
        if rounds.is_err() {
            tracing::error!("the writer panicked between groups; it goes on");
        }
    }
}

impl Turn {
    /// The jobs that start a group of at most `room` writes, and whether it is a group of
    /// urgent jobs only. Urgent jobs (a client awaiting each small write) come first: a group
    /// starts with those waiting, so that a durable writer beside a bulk load waits for the
    /// group under way, not for the bulk batches queued before it as well. Not twice in a row
    /// while other jobs wait, though: the group after one that passed them over takes the jobs
    /// in arrival order, so that a stream of urgent writes cannot hold a bulk client back for
    /// ever.
    fn start(&mut self, room: usize) -> (Vec<Job>, bool) {
        self.waiting.extend(self.queue.try_iter());
        if !self.passed_over && self.waiting.iter().any(|j| j.urgent) {
            let taken = self.take_urgent(room);
            self.passed_over = !self.waiting.is_empty();
            return (taken, true);
        }
        self.passed_over = false;
        (self.take_in_order(room, 0), false)
    }

    /// The jobs that join a group being applied, of at most `room` writes: the urgent ones
    /// waiting, and then no others; else, unless the group is one of urgent jobs only, the
    /// jobs in arrival order. Whether the group takes only urgent jobs from now on is kept in
    /// `urgent_only`.
    fn join(&mut self, room: usize, held: usize, urgent_only: &mut bool) -> Vec<Job> {
        self.waiting.extend(self.queue.try_iter());
        if self.waiting.iter().any(|j| j.urgent) {
            *urgent_only = true;
            return self.take_urgent(room);
        }
        if *urgent_only {
            return Vec::new();
        }
        self.take_in_order(room, held)
    }

    /// The urgent jobs waiting that fit `room`, in arrival order: they may pass the others,
    /// which are all other connections' (a connection with a job in flight sends none).
    fn take_urgent(&mut self, mut room: usize) -> Vec<Job> {
        let mut taken = Vec::new();
        let mut rest = VecDeque::with_capacity(self.waiting.len());
        for j in self.waiting.drain(..) {
            if j.urgent && j.ops.len() <= room {
                room -= j.ops.len();
                taken.push(j);
            } else {
                rest.push_back(j);
            }
        }
        self.waiting = rest;
        taken
    }

    /// The jobs waiting from the first, while they fit `room` and the group (which holds
    /// `held` writes) is not full (`FULL_GROUP`): a job that does not fit waits for the next
    /// group, and the jobs behind it with it, so that a connection's pipelined batches commit
    /// in order.
    fn take_in_order(&mut self, mut room: usize, mut held: usize) -> Vec<Job> {
        let mut taken = Vec::new();
        while held < FULL_GROUP && self.waiting.front().is_some_and(|j| j.ops.len() <= room) {
            let j = self.waiting.pop_front().expect("a job is waiting");
            room -= j.ops.len();
            held += j.ops.len();
            taken.push(j);
        }
        taken
    }
}

/// Commit one group, holding the turn, and answer each of its jobs: `own` (a connection's
/// write, `commit_here`), or else the jobs waiting (`Turn::start`), up to `limits.max_batch`
/// writes. Writers who come back while the group is being applied join it: no waiting, only
/// what is already queued each time a batch has been applied. Whether there was anything to
/// commit.
fn commit_queued(state: &State, turn: &mut Turn, own: Option<Job>) -> bool {
    let max = state.kb.config().limits.max_batch;
    let (mut jobs, urgent_only) = match own {
        // A connection's small write, committed where it was read (`commit_here`): nothing
        // else waits then.
        Some(j) => {
            let mut urgent_only = j.urgent;
            let held = j.ops.len();
            let mut jobs = vec![j];
            jobs.extend(turn.join(max.saturating_sub(held), held, &mut urgent_only));
            (jobs, urgent_only)
        }
        None => turn.start(max),
    };
    if jobs.is_empty() {
        // One larger than `limits.max_batch` (the daemon checks each request's size, so
        // only after a change of the limit): a group of its own.
        match turn.waiting.pop_front() {
            Some(j) => jobs.push(j),
            None => return false,
        }
    }
    commit_jobs(state, turn, jobs, urgent_only);
    true
}

/// `commit_queued` for the jobs it took.
fn commit_jobs(state: &State, turn: &mut Turn, mut jobs: Vec<Job>, mut urgent_only: bool) {
    let mut counts: Vec<usize> = jobs.iter().map(|j| j.ops.len()).collect();
    let ops: Vec<Result<crate::PreparedWrite>> =
        jobs.iter_mut().flat_map(|j| j.ops.drain(..)).collect();
    let outcome = {
        let (jobs, counts) = (&mut jobs, &mut counts);
        commit_group(state, ops, |room| {
            let mut next = Vec::new();
            let held = counts.iter().sum();
            for mut j in turn.join(room, held, &mut urgent_only) {
                counts.push(j.ops.len());
                next.append(&mut j.ops);
                jobs.push(j);
            }
            (!next.is_empty()).then_some(next)
        })
    };
    tracing::debug!(
        writes = counts.iter().sum::<usize>(),
        clients = jobs.len(),
        urgent = urgent_only,
        // Jobs left for the next group.
        waiting = turn.waiting.len(),
        "group commit"
    );
    state.writing.fetch_sub(jobs.len(), Ordering::SeqCst);
    match outcome {
        Ok(results) => {
            let mut results = results.into_iter();
            for (job, count) in jobs.into_iter().zip(counts) {
                let mine: Vec<_> = results.by_ref().take(count).collect();
                let _ = job.reply.send(Ok(mine));
            }
        }
        Err(e) => {
            for job in jobs {
                let _ = job.reply.send(Err(e.shared_copy()));
            }
        }
    }
    // After the answers: the indexer and the subscribers are not awaited.
    if let Some(index) = &turn.index {
        let _ = index.send(());
    }
    state.notify();
}

/// The outcome of a group: its writes' outcomes, or the error that failed it.
type GroupOutcome = Result<Vec<Result<crate::WriteOutcome>>>;

/// Commit one group, holding the turn (see `Kb::write_prepared_joining` for `more`). A panic
/// while the group is applied (a damaged page) fails the group's writes and leaves the daemon
/// running; the store is reopened before the next group, since redb's state in memory may be
/// half-changed (`Kb::recover_from_panic`, called by `write_prepared_joining` as it unwinds).
fn commit_group(
    state: &State,
    ops: Vec<Result<crate::PreparedWrite>>,
    more: impl FnMut(usize) -> Option<Vec<Result<crate::PreparedWrite>>>,
) -> GroupOutcome {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        state.kb.write_prepared_joining(ops, more)
    }))
    // `write_prepared_joining` has recovered the `Kb` on its way out.
    .unwrap_or_else(|payload| Err(crate::store::panic_error("the write", payload.as_ref())));
    if let Ok(results) = &outcome {
        let acknowledged = results.iter().filter(|r| r.is_ok()).count();
        state
            .writes
            .fetch_add(acknowledged as u64, Ordering::Relaxed);
        state.write_groups.fetch_add(1, Ordering::Relaxed);
    }
    outcome
}

/// Commit a connection's write on its own thread when it is the only write under way (with
/// the jobs queued meanwhile): a client awaiting each write then pays no hand-off to the writer
/// thread and back. With other writers about, the writer thread commits their groups as
/// before: a connection committing would wake it for jobs it has taken already, which cost
/// more at 8 writers than the hand-offs saved. The job is handed back when the write goes to
/// the writer: it is large, other writes are under way, or the daemon is stopping.
fn commit_here(state: &State, job: Job) -> std::result::Result<(), Job> {
    if job.ops.len() > crate::kb::WRITTEN_WHERE_READ || state.writing.load(Ordering::SeqCst) > 1 {
        return Err(job);
    }
    let mut turn = match state.turn.try_lock() {
        Ok(t) => t,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return Err(job),
    };
    if turn.index.is_none() || !turn.waiting.is_empty() {
        return Err(job);
    }
    commit_queued(state, &mut turn, Some(job));
    Ok(())
}

/// Prepare writes and queue them for the writer as one job; `scan`: look for near duplicates
/// on this thread (`Kb::prepare_group`), and commit a small write here when nothing else is
/// under way (see `queue_prepared`).
fn queue_write(state: &State, ops: Vec<crate::WriteOp>, scan: bool) -> Result<WriteAnswer> {
    let ops = state.kb.prepare_group(ops, scan)?;
    queue_prepared(state, ops, scan)
}

/// Queue prepared writes for the writer as one job, committed in one transaction (possibly
/// with other clients' writes). `here`: the connection has nothing else in flight, so a small
/// write goes first and may commit on this thread.
fn queue_prepared(
    state: &State,
    ops: Vec<Result<crate::PreparedWrite>>,
    here: bool,
) -> Result<WriteAnswer> {
    let (reply, answer) = WriteAnswer::channel(writer_stopped);
    let job = Job {
        urgent: here && ops.len() <= crate::kb::WRITTEN_WHERE_READ,
        ops,
        reply,
    };
    // Counted until answered (`commit_jobs`).
    state.writing.fetch_add(1, Ordering::SeqCst);
    let job = match here {
        true => match commit_here(state, job) {
            Ok(()) => return Ok(answer),
            Err(job) => job,
        },
        false => job,
    };
    let sent = state
        .jobs
        .lock()
        .ok()
        .and_then(|j| {
            j.as_ref()
                .map(|(queue, ping)| queue.send(job).is_ok() && ping.send(()).is_ok())
        })
        .unwrap_or(false);
    if !sent {
        state.writing.fetch_sub(1, Ordering::SeqCst);
        return Err(KbError::Daemon("the daemon is shutting down; retry".into()));
    }
    Ok(answer)
}

fn writer_stopped() -> KbError {
    KbError::Daemon("the writer stopped before answering".into())
}

/// Why a connection's next message could not be read.
#[derive(Debug, PartialEq)]
enum ReadFail {
    /// Longer than `MAX_MESSAGE_BYTES`.
    TooLong,
    /// Its first byte came, its newline not within `daemon.message_timeout_secs`.
    TooSlow,
    /// No request for `daemon.connection_idle_secs`.
    Idle,
}

/// Read one line of at most `MAX_MESSAGE_BYTES`. Ok(None) at end of stream. `idle`: how long
/// to wait for a message's first byte (None: for ever); `slow`: how long its whole line may
/// take from its first byte. `current`: the socket's read timeout (set only when it changes).
fn read_message(
    reader: &mut BufReader<UnixStream>,
    idle: Option<Duration>,
    slow: Duration,
    current: &mut Option<Duration>,
) -> std::io::Result<Option<std::result::Result<Vec<u8>, ReadFail>>> {
    let mut buf = Vec::new();
    let mut first_byte: Option<Instant> = None;
    loop {
        let timeout = match first_byte {
            None => idle,
            Some(t) => Some(
                slow.saturating_sub(t.elapsed())
                    .max(Duration::from_millis(1)),
            ),
        };
        if *current != timeout {
            reader.get_ref().set_read_timeout(timeout)?;
            *current = timeout;
        }
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Some(Err(match first_byte {
                    None => ReadFail::Idle,
                    Some(_) => ReadFail::TooSlow,
                })));
            }
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            // End of stream; a partial line without its newline is still a message.
            return Ok((!buf.is_empty()).then_some(Ok(buf)));
        }
        first_byte.get_or_insert_with(Instant::now);
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        if buf.len() + take > MAX_MESSAGE_BYTES + 1 {
            return Ok(Some(Err(ReadFail::TooLong)));
        }
        buf.extend_from_slice(&available[..take]);
        reader.consume(take);
        if done {
            return Ok(Some(Ok(buf)));
        }
        if first_byte.is_some_and(|t| t.elapsed() >= slow) {
            return Ok(Some(Err(ReadFail::TooSlow)));
        }
    }
}

fn handle(state: &Arc<State>, stream: UnixStream) -> std::io::Result<()> {
    match peer_uid(&stream) {
        Ok(uid) if uid == my_uid() => {}
        Ok(uid) => {
            tracing::warn!(uid, "refused a client of another user");
            return Ok(());
        }
        Err(e) => {
            tracing::warn!("cannot read peer credentials ({e}); refusing the client");
            return Ok(());
        }
    }
    let conn: Conn = Arc::new(Mutex::new(stream.try_clone()?));
    let _unsubscribe = Unsubscribe {
        state,
        conn: conn.clone(),
    };
    let mut pipeline = Pipeline::new(state.kb.clone(), conn.clone());
    let mut reader = BufReader::new(stream);
    let daemon = &state.kb.config().daemon;
    let mut idle = match daemon.connection_idle_secs {
        0 => None,
        s => Some(Duration::from_secs(s)),
    };
    let slow = Duration::from_secs(daemon.message_timeout_secs);
    let mut current = None;
    loop {
        let line = match read_message(&mut reader, idle, slow, &mut current)? {
            None => return Ok(()),
            Some(Err(fail)) => {
                let msg = match fail {
                    ReadFail::TooLong => format!("message exceeds {MAX_MESSAGE_BYTES} bytes"),
                    ReadFail::TooSlow => format!(
                        "message not finished within {}s of its first byte (daemon.message_timeout_secs); closing",
                        slow.as_secs()
                    ),
                    ReadFail::Idle => {
                        // Nothing to tell a peer that sent nothing: the end of the stream says
                        // it (clients open a new connection when they need one).
                        tracing::debug!("closing a connection idle for {:?}", idle);
                        return Ok(());
                    }
                };
                tracing::warn!("dropping a client: {msg}");
                pipeline.drain();
                // A peer that does not read cannot hold this thread either.
                let _ = conn
                    .lock()
                    .map(|s| s.set_write_timeout(Some(Duration::from_secs(1))));
                send_line(
                    &conn,
                    &error_response(&Value::Null, INVALID_REQUEST, &msg, None),
                )?;
                return Ok(());
            }
            Some(Ok(line)) => line,
        };
        state.touch();
        let (id, method, params, wants_progress) = match parse_request(&line) {
            RequestLine::Blank => continue,
            RequestLine::Invalid(reply) => {
                pipeline.drain();
                send_line(&conn, &reply)?;
                continue;
            }
            RequestLine::Call {
                id,
                method,
                params,
                wants_progress,
            } => (id, method, params, wants_progress),
        };
        // A write is queued and answered by the connection's answering thread: the client's
        // next request is read, and prepared, while the writer commits this one.
        if let Some(Kind::Write(parse, _)) = operations::by_method(&method).map(|o| o.kind) {
            pipeline.wait_for_room();
            // Prepared behind a write of its own still to commit, a learn's near-duplicate
            // scan is left to the writer.
            let scan = !pipeline.busy();
            let queued = guard_request(&state.kb, &method, || {
                let ops = parse(&state.kb, params)?;
                let small = ops.len() <= crate::kb::WRITTEN_WHERE_READ;
                let answer = queue_write(state, ops, scan).map_err(CallError::Kb)?;
                Ok((answer, small))
            });
            match queued {
                // A small write with nothing of this connection's before it is awaited and
                // answered here (committed on this thread already, `commit_here`, or by the
                // writer thread), in order, without waking the connection's answering thread.
                Ok((answer, true)) if scan => {
                    let out = answer_write(&state.kb, &method, answer);
                    send_line(&conn, &reply_line(&id, out))?;
                }
                Ok((answer, _)) => pipeline.push(Pending { id, method, answer })?,
                Err(e) => {
                    pipeline.drain();
                    send_line(&conn, &reply_line(&id, Err(e)))?;
                }
            }
            continue;
        }
        // Anything else comes after the connection's writes, and sees them.
        pipeline.drain();
        let out = guard_request(&state.kb, &method, || {
            dispatch(state, &conn, &method, params, wants_progress)
        });
        // A subscription starts after the changes committed before its answer, and its events
        // come after that answer (a client reading answers skips events).
        let (out, subscriber) = match (method.as_str(), out) {
            ("subscribe", Ok(v)) => match state
                .kb
                .last_change_seq()
                .and_then(|from| state.new_subscriber(&conn, from))
            {
                Ok(sub) => (Ok(v), sub),
                Err(e) => (Err(CallError::Kb(e)), None),
            },
            (_, out) => (out, None),
        };
        let line = reply_line(&id, out);
        match subscriber {
            None => send_line(&conn, &line)?,
            Some(sub) => {
                // Listed (and counted by `hello`) before its answer is sent, and fed after it:
                // its thread writes under the connection's lock, held until the answer is out.
                let mut stream = conn
                    .lock()
                    .map_err(|_| std::io::Error::other("connection lock poisoned"))?;
                state.register(sub.clone());
                if let Err(e) = write_line(&mut stream, &line) {
                    drop(stream);
                    sub.drop_it();
                    return Err(e);
                }
                // Waits for events from now on, for as long as it likes.
                idle = None;
            }
        }
        if method == "shutdown" {
            state.stop.store(true, Ordering::Relaxed);
            state.wake();
        }
    }
}

/// Run a request's work. A panic in it (redb panics on some damaged pages) answers the request
/// with a `damaged` error; the connection, the daemon and its other clients go on.
pub(super) fn guard_request<T>(
    kb: &Kb,
    method: &str,
    work: impl FnOnce() -> std::result::Result<T, CallError>,
) -> std::result::Result<T, CallError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|payload| {
        tracing::error!("{method} panicked; answered as damaged");
        kb.recover_locks();
        Err(CallError::Kb(crate::store::panic_error(
            method,
            payload.as_ref(),
        )))
    })
}

fn dispatch(
    state: &Arc<State>,
    conn: &Conn,
    method: &str,
    params: Value,
    wants_progress: bool,
) -> methods::CallResult {
    match method {
        "hello" => Ok(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "build": state.build,
            "pid": std::process::id(),
            "db": state.kb.dir().display().to_string(),
            "activity": {
                "uptime_secs": state.started.elapsed().as_secs(),
                "clients": state.active.load(Ordering::Relaxed),
                "max_clients": state.kb.config().daemon.max_clients,
                "peak_clients": state.peak.load(Ordering::Relaxed),
                "subscribers": state.subscribers.lock().map_or(0, |s| s.len()),
                "writes": state.writes.load(Ordering::Relaxed),
                "write_groups": state.write_groups.load(Ordering::Relaxed),
                "socket": state.socket.display().to_string(),
                "log": state.kb.dir().join(super::LOG_FILE).display().to_string(),
            },
        })),
        "shutdown" => Ok(json!({"stopping": true})),
        // Registered by `handle` once this answer is sent: no event comes before it.
        "subscribe" => Ok(json!({"subscribed": true})),
        m => {
            let Some(op) = operations::by_method(m) else {
                return Err(CallError::UnknownMethod(m.to_string()));
            };
            let progress = |done: u64, total: u64| {
                if wants_progress {
                    let line = json!({"jsonrpc": "2.0", "method": "progress",
                                      "params": {"done": done, "total": total}})
                    .to_string();
                    let _ = send_line(conn, &line);
                }
            };
            match op.kind {
                // Queued by `handle` through the connection's pipeline, never dispatched.
                Kind::Write(..) => Err(CallError::Kb(KbError::Storage(format!(
                    "{m} reached the dispatch of reads (internal error)"
                )))),
                // The folder is read here; each batch is committed by the writer, like any write.
                Kind::Sync(run, _) => run(&state.kb, params, &progress, &|ops| {
                    queue_prepared(state, ops, true)
                }),
                Kind::Read(run) | Kind::Maintenance(run) => run(&state.kb, params, &progress),
                Kind::Change(run) => {
                    let r = run(&state.kb, params, &progress);
                    state.notify();
                    r
                }
                Kind::Daemon(_) => Err(CallError::UnknownMethod(m.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon's shared state on a database in `dir`, without its threads, and the end of the
    /// accept loop's wake-up socket that it reads.
    fn state(dir: &Path) -> (Arc<State>, UnixStream) {
        state_of(Kb::open_or_create(dir).unwrap().0)
    }

    /// The same on `kb`.
    fn state_of(kb: Kb) -> (Arc<State>, UnixStream) {
        let kb = Arc::new(kb);
        let (wake_rx, wake_tx) = UnixStream::pair().unwrap();
        wake_tx.set_nonblocking(true).unwrap();
        wake_rx.set_nonblocking(true).unwrap();
        let state = State {
            kb,
            jobs: Mutex::new(None),
            writing: AtomicUsize::new(0),
            turn: Mutex::new(Turn {
                queue: mpsc::channel().1,
                waiting: VecDeque::new(),
                passed_over: false,
                index: None,
            }),
            subscribers: Mutex::new(Vec::new()),
            active: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            last_activity: Mutex::new(Instant::now()),
            stop: Arc::new(AtomicBool::new(false)),
            build: String::new(),
            started: Instant::now(),
            socket: PathBuf::new(),
            writes: AtomicU64::new(0),
            write_groups: AtomicU64::new(0),
            wake: wake_tx,
        };
        (Arc::new(state), wake_rx)
    }

    /// A job of `n` writes (placeholders named `name`), and the end its answer goes to.
    fn job(name: &str, n: usize, urgent: bool) -> Job {
        Job {
            ops: (0..n).map(|_| Err(KbError::Storage(name.into()))).collect(),
            urgent,
            reply: mpsc::channel().0,
        }
    }

    /// A writer's turn whose jobs come from `queue`.
    fn turn_of(queue: mpsc::Receiver<Job>) -> Turn {
        Turn {
            queue,
            waiting: VecDeque::new(),
            passed_over: false,
            index: None,
        }
    }

    fn names(jobs: &[Job]) -> Vec<String> {
        jobs.iter()
            .map(|j| match &j.ops[0] {
                Err(e) => e.to_string(),
                Ok(_) => unreachable!("placeholders only"),
            })
            .collect()
    }

    /// A client awaiting each small write, beside bulk clients: its write goes into the next
    /// group ahead of the bulk batches queued before it (all other connections'), and that
    /// group takes no bulk batch; the bulk batches keep their order, one that does not fit a
    /// group holds back those behind it (a connection's batches commit in order), and the group
    /// after one that passed them over takes them first (a stream of urgent writes never holds
    /// them back for ever).
    #[test]
    fn urgent_writes_go_first_and_the_others_keep_their_order() {
        let (tx, rx) = mpsc::channel();
        let mut turn = turn_of(rx);
        let send = |jobs: &[(&str, usize, bool)]| {
            for &(name, n, urgent) in jobs {
                tx.send(job(name, n, urgent)).unwrap();
            }
        };
        send(&[
            ("bulk a", 1024, false),
            ("bulk b", 1024, false),
            ("one", 1, true),
            ("bulk c", 1024, false),
            ("two", 1, true),
        ]);
        let (group, mut urgent_only) = turn.start(10_000);
        assert_eq!(names(&group), ["storage error: one", "storage error: two"]);
        assert!(urgent_only);
        send(&[("bulk d", 1024, false)]);
        assert!(
            turn.join(10_000, 0, &mut urgent_only).is_empty(),
            "no bulk joins it"
        );
        send(&[("three", 1, true)]);
        assert_eq!(
            names(&turn.join(10_000, 0, &mut urgent_only)),
            ["storage error: three"],
            "an urgent write joins it"
        );
        // The next group: the bulk batches' turn, in order, although an urgent write waits;
        // one bulk batch fills it.
        send(&[("four", 1, true)]);
        let (group, mut urgent_only) = turn.start(2_500);
        assert_eq!(names(&group), ["storage error: bulk a"]);
        assert!(!urgent_only);
        assert_eq!(
            names(&turn.join(10_000, 1024, &mut urgent_only)),
            ["storage error: four"],
            "an urgent write joins a bulk group, which then takes no more bulk"
        );
        assert!(turn.join(10_000, 1025, &mut urgent_only).is_empty());
        send(&[("small, not alone", 1, false)]);
        let (group, _) = turn.start(1_000);
        assert!(
            group.is_empty(),
            "bulk b does not fit, and what is behind it waits"
        );
        for bulk in ["bulk b", "bulk c", "bulk d"] {
            let (group, urgent_only) = turn.start(10_000);
            assert_eq!(names(&group), [format!("storage error: {bulk}")]);
            assert!(!urgent_only);
        }
        let (group, _) = turn.start(10_000);
        assert_eq!(names(&group), ["storage error: small, not alone"]);
    }

    /// A group takes the jobs waiting in order until it holds `FULL_GROUP` writes, when it
    /// starts and while it is applied: a bulk client's next batch waits for the next group
    /// (the writer starts on it as soon as this one commits) instead of joining this one.
    #[test]
    fn a_group_takes_jobs_in_order_until_it_is_full() {
        let (tx, rx) = mpsc::channel();
        let mut turn = turn_of(rx);
        let send = |jobs: &[(&str, usize)]| {
            for &(name, n) in jobs {
                tx.send(job(name, n, false)).unwrap();
            }
        };
        send(&[
            ("small 1", 10),
            ("small 2", 500),
            ("bulk 1", 1024),
            ("small 3", 1),
        ]);
        let (group, mut urgent_only) = turn.start(10_000);
        assert_eq!(
            names(&group),
            [
                "storage error: small 1",
                "storage error: small 2",
                "storage error: bulk 1"
            ],
            "a job is taken while the group holds fewer than FULL_GROUP writes"
        );
        assert!(turn.join(10_000, 1534, &mut urgent_only).is_empty());
        send(&[("bulk 2", 1024)]);
        let (group, mut urgent_only) = turn.start(10_000);
        assert_eq!(
            names(&group),
            ["storage error: small 3", "storage error: bulk 2"]
        );
        send(&[("small 4", 5), ("bulk 3", 1024)]);
        assert!(
            turn.join(10_000, 1025, &mut urgent_only).is_empty(),
            "a full group takes no more while it is applied"
        );
        let (group, mut urgent_only) = turn.start(10_000);
        assert_eq!(
            names(&group),
            ["storage error: small 4", "storage error: bulk 3"]
        );
        send(&[("bulk 4", 1024), ("bulk 5", 1024)]);
        assert_eq!(
            names(&turn.join(10_000, 0, &mut urgent_only)),
            ["storage error: bulk 4"],
            "a group being applied takes one bulk batch, and the next waits"
        );
    }

    fn woken(wake_rx: &mut UnixStream) -> bool {
        let mut byte = [0u8; 1];
        wake_rx.read(&mut byte).is_ok()
    }

    /// A group whose commit fails (here a write to the file: EIO) fails each of its jobs, each
    /// with the error of its own, and writes none of them; the next group commits.
    #[test]
    fn a_group_that_fails_to_commit_answers_each_of_its_jobs_with_the_error() {
        use crate::store::faults::{Errno, FaultPlan, Op, Target};
        let tmp = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        let (kb, _) = Kb::open_with_io(tmp.path().join("kb"), plan.clone()).unwrap();
        let (state, _wake) = state_of(kb);
        let learn = |text: &str| {
            state
                .kb
                .prepare_group(
                    vec![crate::WriteOp::Learn(crate::LearnRequest::text(text))],
                    true,
                )
                .unwrap()
        };
        let mut answers = Vec::new();
        let mut turn = state.turn.lock().unwrap();
        for text in ["the first client's note", "the second client's note"] {
            let (reply, answer) = crate::writes::WriteAnswer::channel(|| unreachable!());
            turn.waiting.push_back(Job {
                ops: learn(text),
                urgent: false,
                reply,
            });
            answers.push(answer);
        }
        let write = plan.count(Target::Store, Op::Write) + 1;
        plan.fail_nth(Target::Store, Op::Write, write, Errno::Eio);
        assert!(commit_queued(&state, &mut turn, None));
        assert!(
            plan.fired()
                .iter()
                .any(|f| f.op == Op::Write && f.n == write),
            "{:?}",
            plan.fired()
        );
        let errors: Vec<String> = answers
            .into_iter()
            .map(|a| match a.wait() {
                Err(KbError::Storage(m)) => m,
                other => panic!("a job of the failed group: {other:?}"),
            })
            .collect();
        assert_eq!(errors[0], errors[1], "the group's error, for each job");
        assert_eq!(
            state.kb.status().unwrap().sections,
            0,
            "nothing of the group"
        );

        let (reply, answer) = crate::writes::WriteAnswer::channel(|| unreachable!());
        turn.waiting.push_back(Job {
            ops: learn("written by the next group"),
            urgent: false,
            reply,
        });
        assert!(commit_queued(&state, &mut turn, None));
        assert!(matches!(answer.wait().as_deref(), Ok([Ok(_)])));
        assert_eq!(state.kb.status().unwrap().sections, 1);
    }

    #[test]
    fn a_client_whose_request_panics_stops_being_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let (state, mut wake_rx) = state(tmp.path());
        // As `serve_client` does: the count moves into the client's thread.
        let failing = ClientCount::new(&state);
        let other = ClientCount::new(&state);
        assert_eq!(state.active.load(Ordering::SeqCst), 2);
        let thread = std::thread::spawn(move || {
            let _counted = failing;
            panic!("a request that fails by a bug");
        });
        assert!(thread.join().is_err(), "the thread panicked");
        assert_eq!(state.active.load(Ordering::SeqCst), 1);
        assert!(!woken(&mut wake_rx), "a client is still connected");
        // The last client leaving wakes the accept loop, which then counts idle time.
        drop(other);
        assert_eq!(state.active.load(Ordering::SeqCst), 0);
        assert!(woken(&mut wake_rx), "the accept loop was not woken");
    }
}
