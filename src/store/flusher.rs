//! A commit's writes reach the database file on a thread of their own, so that the writer can
//! apply the next group of writes while the disk syncs the last one.
//!
//! redb writes a commit's pages and header, then calls `sync_data` once. Here `write` and
//! `set_len` only record the call, and `sync_data` closes the calls recorded since the last one
//! into an *epoch*. The flusher thread replays each epoch's calls on the file in order and fsyncs
//! it before it touches the next epoch, so the file goes through exactly the states that
//! synchronous commits would give it: after a crash redb's recovery finds the last epoch that was
//! synced, as it would find the last commit. (Two epochs are never synced together: the second
//! may reuse pages the first freed, which the commit before both still names.)
//!
//! Reads see the recorded calls over the file. A `sync_data` waits for its epoch to be on disk,
//! like redb's own, unless the caller deferred the commit ([`Flusher::defer_next_sync`]): then it
//! returns at once, and the caller waits with [`Durable::wait`] before it tells anyone the
//! commit happened. At most [`MAX_PENDING`] epochs wait for the disk; a further commit waits.
//! The first failed call stops the flusher: every later epoch, and every caller waiting for one,
//! gets the error, and the store reopens the database (docs/io-faults.md).

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// Closed epochs that may wait for the disk at once (the one being synced and the next).
pub const MAX_PENDING: usize = 2;

#[derive(Debug, Clone)]
enum Call {
    Write { offset: u64, data: Arc<[u8]> },
    SetLen(u64),
}

#[derive(Debug)]
struct State {
    /// Calls since the last `sync_data`.
    open: Vec<Call>,
    /// Closed epochs not yet synced, oldest first; the flusher works on the first.
    pending: VecDeque<Arc<Vec<Call>>>,
    /// Epochs closed so far, and synced so far.
    closed: u64,
    synced: u64,
    /// The length redb sees.
    len: u64,
    /// The first failure of the flusher: it stops there.
    failure: Option<(io::ErrorKind, String)>,
    stopping: bool,
}

#[derive(Debug)]
struct Shared {
    file: File,
    state: Mutex<State>,
    /// The flusher waits on it for epochs; `sync_data` and `Durable::wait` for its progress.
    work: Condvar,
    progress: Condvar,
    /// Raised by a failed call (the store then reopens the database).
    failed: Arc<AtomicBool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn failure_error(kind: io::ErrorKind, msg: &str) -> io::Error {
    io::Error::new(
        kind,
        format!("an earlier commit could not be written: {msg}"),
    )
}

/// The file side of the store's redb backend.
#[derive(Debug)]
pub struct Flusher {
    shared: Arc<Shared>,
    defer: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A commit that may not be durable yet: [`Durable::wait`] returns once it is.
#[derive(Debug, Clone)]
pub struct Durable {
    shared: Arc<Shared>,
    epoch: u64,
}

impl Durable {
    /// Wait until every epoch up to this one is synced; the flusher's failure if one failed.
    pub fn wait(&self) -> io::Result<()> {
        let mut s = self.shared.lock();
        loop {
            if s.synced >= self.epoch {
                return Ok(());
            }
            if let Some((kind, msg)) = &s.failure {
                return Err(failure_error(*kind, msg));
            }
            s = self
                .shared
                .progress
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

impl Flusher {
    /// Start the flusher of `file` (opened for reading and writing).
    pub fn start(file: File, failed: Arc<AtomicBool>) -> io::Result<Flusher> {
        let len = file.metadata()?.len();
        let shared = Arc::new(Shared {
            file,
            state: Mutex::new(State {
                open: Vec::new(),
                pending: VecDeque::new(),
                closed: 0,
                synced: 0,
                len,
                failure: None,
                stopping: false,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            failed,
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("kbdb-flusher".into())
                .spawn(move || flush_loop(&shared))?
        };
        Ok(Flusher {
            shared,
            defer: AtomicBool::new(false),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The next `sync_data` returns without waiting for the disk (one commit's).
    pub fn defer_next_sync(&self) {
        self.defer.store(true, Ordering::Release);
    }

    /// Stop deferring (after a commit that failed before its `sync_data`).
    pub fn stop_deferring(&self) {
        self.defer.store(false, Ordering::Release);
    }

    /// Everything closed so far: what a commit that just returned is part of.
    pub fn last_closed(&self) -> Durable {
        Durable {
            shared: self.shared.clone(),
            epoch: self.shared.lock().closed,
        }
    }

    /// Closed epochs not yet synced.
    pub fn pending(&self) -> usize {
        self.shared.lock().pending.len()
    }

    pub fn len(&self) -> u64 {
        self.shared.lock().len
    }

    fn refuse_after_failure(s: &State) -> io::Result<()> {
        match &s.failure {
            Some((kind, msg)) => Err(failure_error(*kind, msg)),
            None => Ok(()),
        }
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.shared.lock();
        Self::refuse_after_failure(&s)?;
        s.open.push(Call::Write {
            offset,
            data: Arc::from(data),
        });
        s.len = s.len.max(offset + data.len() as u64);
        Ok(())
    }

    pub fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.shared.lock();
        Self::refuse_after_failure(&s)?;
        s.open.push(Call::SetLen(len));
        s.len = len;
        Ok(())
    }

    /// Close the open epoch; wait for it to be synced unless deferred.
    pub fn sync_data(&self) -> io::Result<()> {
        let deferred = self.defer.swap(false, Ordering::AcqRel);
        let shared = &self.shared;
        let mut s = shared.lock();
        loop {
            Self::refuse_after_failure(&s)?;
            if s.pending.len() < MAX_PENDING {
                break;
            }
            s = shared
                .progress
                .wait(s)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if !s.open.is_empty() {
            let calls = std::mem::take(&mut s.open);
            s.pending.push_back(Arc::new(calls));
            s.closed += 1;
            shared.work.notify_one();
        }
        let ticket = Durable {
            shared: shared.clone(),
            epoch: s.closed,
        };
        drop(s);
        if deferred { Ok(()) } else { ticket.wait() }
    }

    /// Fill `out` with the bytes at `offset`: the file, with the calls not yet on it replayed.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let end = offset + out.len() as u64;
        // The calls not yet on the file, taken before reading it: whatever the flusher writes
        // meanwhile is among them, and replaying a call that is already on the file is harmless.
        let (pending, open) = {
            let s = self.shared.lock();
            if end > s.len {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past the end of the database file",
                ));
            }
            let open: Vec<Call> = s
                .open
                .iter()
                .filter(|c| touches(c, offset, end))
                .cloned()
                .collect();
            (s.pending.clone(), open)
        };
        read_file(&self.shared.file, offset, out)?;
        for call in pending.iter().flat_map(|e| e.iter()).chain(open.iter()) {
            replay(call, offset, out);
        }
        Ok(())
    }

    /// Write and sync whatever is left, then stop the thread.
    pub fn close(&self) -> io::Result<()> {
        {
            let mut s = self.shared.lock();
            if !s.open.is_empty() && s.failure.is_none() {
                let calls = std::mem::take(&mut s.open);
                s.pending.push_back(Arc::new(calls));
                s.closed += 1;
            }
            s.stopping = true;
            self.shared.work.notify_one();
        }
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
        Self::refuse_after_failure(&self.shared.lock())
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn touches(call: &Call, start: u64, end: u64) -> bool {
    match call {
        Call::Write { offset, data } => *offset < end && offset + data.len() as u64 > start,
        Call::SetLen(len) => *len < end,
    }
}

/// Apply one recorded call to `out`, the bytes at `start`.
fn replay(call: &Call, start: u64, out: &mut [u8]) {
    let end = start + out.len() as u64;
    match call {
        Call::Write { offset, data } => {
            let lo = (*offset).max(start);
            let hi = (offset + data.len() as u64).min(end);
            if lo < hi {
                out[(lo - start) as usize..(hi - start) as usize]
                    .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            }
        }
        // Cut, then grown again: the bytes past the cut read as zeros.
        Call::SetLen(len) if *len < end => {
            out[(*len).saturating_sub(start) as usize..].fill(0);
        }
        Call::SetLen(_) => {}
    }
}

/// Read from the file, zeros past its end (a length not yet applied to it).
fn read_file(file: &File, offset: u64, out: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        match file.read_at(&mut out[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    out[done..].fill(0);
    Ok(())
}

fn flush_loop(shared: &Shared) {
    loop {
        let epoch = {
            let mut s = shared.lock();
            loop {
                if s.failure.is_some() {
                    return;
                }
                if let Some(e) = s.pending.front() {
                    break e.clone();
                }
                if s.stopping {
                    return;
                }
                s = shared.work.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
        };
        let result = apply(&shared.file, &epoch).and_then(|()| shared.file.sync_data());
        let mut s = shared.lock();
        match result {
            Ok(()) => {
                s.pending.pop_front();
                s.synced += 1;
            }
            Err(e) => {
                tracing::error!("the database file could not be written: {e}");
                shared.failed.store(true, Ordering::Release);
                s.failure = Some((e.kind(), e.to_string()));
            }
        }
        shared.progress.notify_all();
    }
}

fn apply(file: &File, calls: &[Call]) -> io::Result<()> {
    for call in calls {
        match call {
            Call::Write { offset, data } => file.write_all_at(data, *offset)?,
            Call::SetLen(len) => file.set_len(*len)?,
        }
    }
    Ok(())
}
