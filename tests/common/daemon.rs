//! Helpers for tests that reach past the CLI to the worker daemon itself: its socket, its
//! process (SIGKILL, waiting for it to be gone) and raw JSON-RPC calls.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::TestDb;

/// The daemon's socket in the test's runtime folder, if one was ever created there.
pub fn socket_path(db: &TestDb) -> Option<PathBuf> {
    std::fs::read_dir(db.runtime_dir())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
}

/// A raw JSON-RPC connection to the daemon: lines of any bytes out, JSON lines back.
pub struct Raw {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Raw {
    pub fn connect(db: &TestDb) -> Raw {
        let s = UnixStream::connect(socket_path(db).expect("the daemon's socket")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Raw {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
        }
    }

    /// Send `bytes` and a newline (errors ignored: the daemon may hang up on an oversized line).
    pub fn send(&mut self, bytes: &[u8]) {
        let _ = self.writer.write_all(bytes);
        let _ = self.writer.write_all(b"\n");
    }

    /// Send `bytes` as they are (no newline).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        let _ = self.writer.write_all(bytes);
    }

    /// The next line as JSON; None when the daemon closed the connection.
    pub fn read(&mut self) -> Option<Value> {
        let mut buf = String::new();
        match self.reader.read_line(&mut buf) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&buf).expect("the daemon answers JSON")),
        }
    }

    /// The next line as it came (Ok(None) at the end of the stream; an error on a timeout).
    pub fn read_line_raw(&mut self) -> std::io::Result<Option<String>> {
        let mut buf = String::new();
        match self.reader.read_line(&mut buf)? {
            0 => Ok(None),
            _ => Ok(Some(buf)),
        }
    }

    pub fn call(&mut self, bytes: &[u8]) -> Value {
        self.send(bytes);
        self.read().expect("an answer")
    }

    pub fn call_json(&mut self, request: Value) -> Value {
        self.call(request.to_string().as_bytes())
    }
}

/// Whether any thread of `pid` still runs (the leader turns zombie before its threads end; a
/// zombie has released every file and lock).
pub fn alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
        })
    })
}

/// Send `sig` to `pid`; whether it was delivered (false: no such process).
pub fn signal(pid: u32, sig: libc::c_int) -> bool {
    // SAFETY: kill(2) has no memory-safety preconditions; callers pass a daemon they started.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

/// Send SIGKILL to `pid`; whether the signal was delivered (false: no such process).
pub fn sigkill(pid: u32) -> bool {
    signal(pid, libc::SIGKILL)
}

/// Make this process the reaper of its orphaned descendants (Linux), so daemons that clients
/// started and left behind are reaped by [`wait_gone`] instead of piling up as zombies.
pub fn become_subreaper() -> bool {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// Wait (at most `timeout`) until `pid` no longer runs, reaping it when it is our child.
/// Whether it is gone.
pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: waitpid with WNOHANG on one pid; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if r == pid as libc::pid_t || !alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Each thread of `pid` with its state and the kernel function it waits in
/// (`tid state wchan`), to say why a process outlives a SIGKILL: a thread in uninterruptible
/// sleep (`D`, e.g. an fsync on a loaded disk) delays the exit until its I/O is done.
pub fn describe_threads(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("{pid}: gone");
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
        out.push(format!(
            "{} {state} {wchan}",
            t.file_name().to_string_lossy()
        ));
    }
    out.join(", ")
}

/// What a JSON-RPC call came back with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// `result`.
    Ok(Value),
    /// `error` (`{code, message, data?}`).
    Error(Value),
    /// No answer: the connection closed or failed (the daemon died), or the read timed out.
    Gone(String),
}

/// One JSON-RPC connection to a daemon's socket.
pub struct Rpc {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Rpc {
    /// Connect; reads wait at most `timeout` for a line.
    pub fn connect(sock: &Path, timeout: Duration) -> std::io::Result<Rpc> {
        let s = UnixStream::connect(sock)?;
        s.set_read_timeout(Some(timeout))?;
        Ok(Rpc {
            writer: s.try_clone()?,
            reader: BufReader::new(s),
            next_id: 1,
        })
    }

    /// Call `method` and wait for its answer (notifications in between are skipped).
    pub fn call(&mut self, method: &str, params: Value) -> Reply {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self
            .writer
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|_| self.writer.flush())
        {
            return Reply::Gone(format!("send failed: {e}"));
        }
        loop {
            let mut buf = String::new();
            match self.reader.read_line(&mut buf) {
                Ok(0) => return Reply::Gone("connection closed".into()),
                Err(e) => return Reply::Gone(format!("read failed: {e}")),
                Ok(_) => {}
            }
            let v: Value = match serde_json::from_str(&buf) {
                Ok(v) => v,
                // A line cut short by the daemon's death.
                Err(e) => return Reply::Gone(format!("unreadable answer ({e}): {buf:?}")),
            };
            if v.get("id") != Some(&json!(id)) {
                continue;
            }
            return match (v.get("result"), v.get("error")) {
                (Some(r), _) => Reply::Ok(r.clone()),
                (None, Some(e)) => Reply::Error(e.clone()),
                _ => Reply::Gone(format!("malformed answer: {v}")),
            };
        }
    }

    /// The daemon's pid, from `hello`.
    pub fn pid(&mut self) -> Option<u32> {
        match self.call("hello", Value::Null) {
            Reply::Ok(v) => v["pid"].as_u64().map(|p| p as u32),
            _ => None,
        }
    }
}

/// A cgroup (v1 `pids` controller) that limits how many threads a process may start; None when
/// this machine does not let the test make one (no such controller, or not allowed).
pub struct PidsLimit {
    dir: PathBuf,
    pid: u32,
}

impl PidsLimit {
    /// Move `pid` into a new cgroup where it may not start any more threads.
    pub fn freeze_threads_of(pid: u32) -> Option<PidsLimit> {
        let root = std::path::Path::new("/sys/fs/cgroup/pids");
        let dir = root.join(format!("kbdb-test-{}-{pid}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let limit = PidsLimit { dir, pid };
        // Below what it runs: threads that end (a client's just closed connection) free no
        // room for new ones.
        std::fs::write(limit.dir.join("pids.max"), "1").ok()?;
        std::fs::write(limit.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(limit)
    }
}

impl Drop for PidsLimit {
    fn drop(&mut self) {
        let root = std::path::Path::new("/sys/fs/cgroup/pids");
        let _ = std::fs::write(root.join("cgroup.procs"), self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
    }
}
