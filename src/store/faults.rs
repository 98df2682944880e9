//! I/O fault injection, for tests (docs/io-faults.md). Not part of the public API.
//!
//! A [`FaultPlan`] is shared by the store's redb backend ([`super::handle::StoreBackend`]) and
//! the lexical index's tantivy directory ([`FaultyDirectory`]). It counts every write and every
//! fsync of each, and fails the N-th one of a kind with `EIO` or `ENOSPC`, or — "disk full" —
//! every write, file growth and fsync from some point on, until it is cleared, or makes the N-th
//! one panic. A database opened without a plan (`Kb::open`) never consults one.

use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tantivy::Directory;
use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, DirectoryLock, FileHandle, Lock, MmapDirectory, TerminatingWrite, WatchCallback,
    WatchHandle, WritePtr,
};

/// Which files an I/O call is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// The redb database file (`kbdb.redb`).
    Store,
    /// The lexical index folder (`index/lexical/`).
    Index,
    /// The write journal (`kbdb.journal`).
    Journal,
}

/// The kind of I/O call: a write (redb `write` and `set_len`; tantivy file writes, flushes and
/// `atomic_write`) or an fsync (redb `sync_data`; tantivy's fsync of a finished file and
/// `sync_directory`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    Write,
    Sync,
}

/// The error a failed call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Errno {
    /// `EIO`: Input/output error.
    Eio,
    /// `ENOSPC`: No space left on device.
    Enospc,
}

impl Errno {
    /// The `io::Error` a failed call returns (a real OS error: `kind()` and the message are the
    /// ones the operating system would give).
    pub fn io_error(self) -> io::Error {
        io::Error::from_raw_os_error(match self {
            Errno::Eio => libc::EIO,
            Errno::Enospc => libc::ENOSPC,
        })
    }
}

/// One injected failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    pub target: Target,
    pub op: Op,
    /// The call's number among the calls of its target and kind (1-based).
    pub n: u64,
    pub errno: Errno,
    /// The call: `write`, `set_len`, `sync_data`, `atomic_write`, `terminate`, …
    pub call: &'static str,
}

#[derive(Default)]
struct PlanState {
    /// Calls so far, by `slot(target, op)`.
    counts: [u64; 6],
    /// Fail the N-th call of this target and kind (once each).
    nth: Vec<(Target, Op, u64, Errno)>,
    /// Disk full: every write, growth and fsync fails with ENOSPC.
    full: bool,
    /// The disk fills up at the N-th call of this target and kind.
    fill_at: Option<(Target, Op, u64)>,
    /// The N-th call of this target and kind panics (once), as redb does on a damaged page.
    panic_at: Option<(Target, Op, u64)>,
    fired: Vec<Fired>,
}

fn slot(target: Target, op: Op) -> usize {
    match (target, op) {
        (Target::Store, Op::Write) => 0,
        (Target::Store, Op::Sync) => 1,
        (Target::Index, Op::Write) => 2,
        (Target::Index, Op::Sync) => 3,
        (Target::Journal, Op::Write) => 4,
        (Target::Journal, Op::Sync) => 5,
    }
}

/// A shared, scripted plan of I/O failures. Cloning shares the plan.
#[derive(Clone, Default)]
pub struct FaultPlan(Arc<Mutex<PlanState>>);

impl fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state();
        f.debug_struct("FaultPlan")
            .field("counts", &s.counts)
            .field("nth", &s.nth)
            .field("full", &s.full)
            .finish()
    }
}

impl FaultPlan {
    /// A plan that fails nothing and counts every call.
    pub fn new() -> FaultPlan {
        FaultPlan::default()
    }

    /// A plan that fails the `n`-th (1-based) call of `target` and `op`, once, with `errno`.
    pub fn nth(target: Target, op: Op, n: u64, errno: Errno) -> FaultPlan {
        let plan = FaultPlan::new();
        plan.fail_nth(target, op, n, errno);
        plan
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PlanState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fail the `n`-th call (counted since the plan was made) of `target` and `op`, once
    /// (besides the failures planned before).
    pub fn fail_nth(&self, target: Target, op: Op, n: u64, errno: Errno) {
        self.state().nth.push((target, op, n, errno));
    }

    /// The disk is full: from now on every write, file growth and fsync of the store and the
    /// index fails with `ENOSPC` (reads, shrinking and deleting work), until `free_disk`.
    pub fn fill_disk(&self) {
        self.state().full = true;
    }

    /// A plan whose disk fills up at the `n`-th call of `target` and `op`: that call and every
    /// later write, growth and fsync fail with `ENOSPC`, until `free_disk`.
    pub fn disk_full_from(target: Target, op: Op, n: u64) -> FaultPlan {
        let plan = FaultPlan::new();
        plan.state().fill_at = Some((target, op, n));
        plan
    }

    /// The `n`-th call (counted since the plan was made) of `target` and `op` panics, once: a
    /// panic inside the store's write path, as redb's on a damaged page.
    pub fn panic_nth(&self, target: Target, op: Op, n: u64) {
        self.state().panic_at = Some((target, op, n));
    }

    /// Space is back: writes work again.
    pub fn free_disk(&self) {
        self.state().full = false;
    }

    /// Calls of `target` and `op` so far.
    pub fn count(&self, target: Target, op: Op) -> u64 {
        self.state().counts[slot(target, op)]
    }

    /// The failures injected so far, in order.
    pub fn fired(&self) -> Vec<Fired> {
        self.state().fired.clone()
    }

    /// Count a call and decide whether it fails. `grows`: the call needs new space (every
    /// write and fsync does; `set_len` only when it makes the file longer).
    pub(crate) fn check(
        &self,
        target: Target,
        op: Op,
        call: &'static str,
        grows: bool,
    ) -> io::Result<()> {
        let mut s = self.state();
        let i = slot(target, op);
        s.counts[i] += 1;
        let n = s.counts[i];
        if s.panic_at == Some((target, op, n)) {
            s.panic_at = None;
            drop(s);
            panic!("injected panic at {call} {n} of {target:?} (fault plan)");
        }
        if s.fill_at == Some((target, op, n)) {
            s.fill_at = None;
            s.full = true;
        }
        let errno = if s.full && grows {
            Some(Errno::Enospc)
        } else {
            s.nth
                .iter()
                .find(|&&(t, o, at, _)| t == target && o == op && at == n)
                .map(|&(.., errno)| errno)
        };
        match errno {
            None => Ok(()),
            Some(errno) => {
                s.fired.push(Fired {
                    target,
                    op,
                    n,
                    errno,
                    call,
                });
                Err(errno.io_error())
            }
        }
    }
}

/// A tantivy directory over [`MmapDirectory`] that fails writes, flushes, `atomic_write`,
/// fsyncs and `sync_directory` as its plan says. Reads, deletes, locks and watches are the
/// inner directory's.
#[derive(Clone)]
pub struct FaultyDirectory {
    inner: MmapDirectory,
    plan: FaultPlan,
}

impl fmt::Debug for FaultyDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyDirectory({:?})", self.inner)
    }
}

impl FaultyDirectory {
    pub fn open(path: &Path, plan: FaultPlan) -> tantivy::Result<FaultyDirectory> {
        Ok(FaultyDirectory {
            inner: MmapDirectory::open(path)?,
            plan,
        })
    }
}

impl Directory for FaultyDirectory {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }

    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }

    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }

    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        let inner = self.inner.open_write(path)?;
        Ok(io::BufWriter::new(Box::new(FaultyWriter {
            inner,
            plan: self.plan.clone(),
            path: path.to_path_buf(),
        })))
    }

    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }

    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.plan
            .check(Target::Index, Op::Write, "atomic_write", true)?;
        self.inner.atomic_write(path, data)
    }

    fn sync_directory(&self) -> io::Result<()> {
        self.plan
            .check(Target::Index, Op::Sync, "sync_directory", true)?;
        self.inner.sync_directory()
    }

    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }

    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}

/// A file being written through a [`FaultyDirectory`].
struct FaultyWriter {
    inner: WritePtr,
    plan: FaultPlan,
    #[allow(dead_code)] // for debugging a failing case
    path: PathBuf,
}

impl Write for FaultyWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.plan.check(Target::Index, Op::Write, "write", true)?;
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.plan.check(Target::Index, Op::Write, "flush", true)?;
        self.inner.flush()
    }
}

impl TerminatingWrite for FaultyWriter {
    fn terminate_ref(&mut self, token: AntiCallToken) -> io::Result<()> {
        // The inner writer flushes its buffer and fsyncs the file: that fsync is what fails.
        self.inner.flush()?;
        self.plan
            .check(Target::Index, Op::Sync, "terminate", true)?;
        self.inner.terminate_ref(token)
    }
}
