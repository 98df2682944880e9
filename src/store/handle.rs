//! The store's redb database behind a handle that survives I/O failures (docs/io-faults.md).
//!
//! Once a read, write or fsync of its file has failed, redb refuses every later operation of
//! that `Database` (`StorageError::PreviousIo`), reads included, until it is closed and opened
//! again. [`Store`] does that by itself: its backend notes the failure, and the next access
//! closes the database and opens it again (redb's crash recovery runs, as after a crash: the
//! last durable commit is what is there). When the file cannot be opened for writing — the disk
//! is still full — a read-only view of the file serves reads (its own writes, redb's recovery
//! bookkeeping, stay in memory and never reach the disk), and every write tries again to open
//! the file for writing, so writes work again as soon as space is back.

use std::collections::BTreeMap;
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redb::backends::FileBackend;
use redb::{BackendError, Database, DatabaseError, StorageBackend};

use super::faults::{FaultPlan, Op, Target};
use crate::error::{KbError, Result};

/// The redb backend of a store: the file, a flag raised by any failed call (so the store knows
/// to reopen), and the fault plan of a test (None on the normal path).
#[derive(Debug)]
pub struct StoreBackend {
    file: FileBackend,
    plan: Option<FaultPlan>,
    failed: Arc<AtomicBool>,
}

impl StoreBackend {
    fn track<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if r.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        r
    }

    fn fault(&self, op: Op, call: &'static str, grows: bool) -> io::Result<()> {
        match &self.plan {
            None => Ok(()),
            Some(plan) => self.track(plan.check(Target::Store, op, call, grows)),
        }
    }
}

/// Both backends take the database file's locks on the file itself (so another process never
/// opens it meanwhile, whichever backend holds it): the six lock methods, forwarded to
/// `self.file`.
macro_rules! forward_locks_to_file {
    () => {
        fn try_lock_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> std::result::Result<bool, BackendError> {
            self.file.try_lock_range(start, end)
        }

        fn try_lock_shared_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> std::result::Result<bool, BackendError> {
            self.file.try_lock_shared_range(start, end)
        }

        fn lock_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> std::result::Result<(), BackendError> {
            self.file.lock_range(start, end)
        }

        fn lock_shared_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> std::result::Result<(), BackendError> {
            self.file.lock_shared_range(start, end)
        }

        fn unlock_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> std::result::Result<(), BackendError> {
            self.file.unlock_range(start, end)
        }

        fn query_lock_range(
            &self,
            start: Bound<u64>,
            end: Bound<u64>,
        ) -> std::result::Result<bool, BackendError> {
            self.file.query_lock_range(start, end)
        }
    };
}

impl StorageBackend for StoreBackend {
    fn len(&self) -> io::Result<u64> {
        self.track(self.file.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.track(self.file.read(offset, out))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.plan.is_some() {
            let grows = len > self.track(self.file.len())?;
            self.fault(Op::Write, "set_len", grows)?;
        }
        self.track(self.file.set_len(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.fault(Op::Sync, "sync_data", true)?;
        self.track(self.file.sync_data())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.fault(Op::Write, "write", true)?;
        self.track(self.file.write(offset, data))
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    forward_locks_to_file!();
}

const BLOCK: u64 = 4096;

/// A read-only view of the database file for when it cannot be opened for writing: reads come
/// from the file, writes (redb's recovery on open) go to memory and never reach the disk. It
/// takes the file's locks like the normal backend, so no other process opens the file meanwhile.
/// Once the database is open over it, it is sealed: a write fails, so a write transaction can
/// never be acknowledged without reaching the disk.
#[derive(Debug)]
struct ReadOnlyView {
    file: FileBackend,
    overlay: Mutex<Overlay>,
    sealed: AtomicBool,
    failed: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Overlay {
    /// The length redb sees.
    len: u64,
    /// Bytes below this come from the file (unless a block is in `blocks`); above it, zeros.
    file_len: u64,
    /// Written blocks (BLOCK bytes each), by offset.
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl ReadOnlyView {
    fn refuse(&self) -> io::Result<()> {
        if self.sealed.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                "the database is open read-only after an I/O failure",
            ));
        }
        Ok(())
    }

    /// Fill `out` with the bytes at `offset` as the overlay sees them.
    fn read_into(&self, o: &Overlay, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let end = offset + out.len() as u64;
        let from_file = end.min(o.file_len);
        if offset < from_file {
            let n = (from_file - offset) as usize;
            self.file.read(offset, &mut out[..n])?;
            out[n..].fill(0);
        } else {
            out.fill(0);
        }
        let first = offset / BLOCK * BLOCK;
        for (&at, block) in o.blocks.range(first..end) {
            let lo = at.max(offset);
            let hi = (at + BLOCK).min(end);
            out[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&block[(lo - at) as usize..(hi - at) as usize]);
        }
        Ok(())
    }
}

impl StorageBackend for ReadOnlyView {
    fn len(&self) -> io::Result<u64> {
        Ok(self
            .overlay
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let o = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        if offset + out.len() as u64 > o.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the database file",
            ));
        }
        self.read_into(&o, offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.refuse()?;
        let mut o = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        if len < o.len {
            o.file_len = o.file_len.min(len);
            o.blocks.retain(|&at, _| at < len);
            if let Some((&at, block)) = o.blocks.range_mut(..len).next_back()
                && at + BLOCK > len
            {
                block[(len - at) as usize..].fill(0);
            }
        }
        o.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.refuse()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.refuse()?;
        let mut o = self.overlay.lock().unwrap_or_else(PoisonError::into_inner);
        let end = offset + data.len() as u64;
        let mut at = offset / BLOCK * BLOCK;
        while at < end {
            if !o.blocks.contains_key(&at) {
                let mut block = vec![0; BLOCK as usize];
                self.read_into(&o, at, &mut block)?;
                o.blocks.insert(at, block);
            }
            let block = o.blocks.get_mut(&at).expect("inserted above");
            let lo = at.max(offset);
            let hi = (at + BLOCK).min(end);
            block[(lo - at) as usize..(hi - at) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            at += BLOCK;
        }
        o.len = o.len.max(end);
        Ok(())
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    forward_locks_to_file!();
}

/// An open database and the flag its backend raises on an I/O failure.
struct Handle {
    db: Arc<Database>,
    failed: Arc<AtomicBool>,
}

impl Handle {
    fn healthy(&self) -> bool {
        !self.failed.load(Ordering::Acquire)
    }
}

enum Slot {
    Writable(Handle),
    /// Opened read-only after the file could not be opened for writing.
    ReadOnly(Handle),
    /// Neither could be opened.
    Closed,
    /// Closed for good by [`Store::shut`]: never reopened.
    Shut,
}

/// redb's page cache (its default is 1 GiB). The cache keeps every page read or written until
/// it is full, so a bulk load of 300k sections held most of the file in it: peak RSS grew with
/// the database. The operating system's page cache keeps the file's hot pages anyway; this
/// bounds what the process holds (docs/performance.md, "Scale").
const CACHE_BYTES: usize = 32 * 1024 * 1024;

/// The redb database of a knowledge base, reopened after an I/O failure.
pub struct Store {
    dir: PathBuf,
    plan: Option<FaultPlan>,
    slot: RwLock<Slot>,
    /// Bumped by every reopen for writing: in-memory state derived from the store may be stale
    /// after one (a commit whose fsync failed can be there after the reopen).
    generation: AtomicU64,
    /// The journal record of a group that failed once it was written (0: none): the replay of
    /// the next reopen leaves it out and claims its number (`refuse_replay`).
    refused: AtomicU64,
}

impl Store {
    /// Open (creating if needed) the database of the folder `dir` and bring its schema up to
    /// date. `plan`: fail I/O calls as the plan says (tests; docs/io-faults.md).
    ///
    /// On a full disk the file is opened read-only instead (reads work, each write tries the
    /// file again): opening it for writing after a crash writes (redb's recovery, the journal's
    /// replay), and a daemon that could not start would serve no reads at all.
    pub fn open(dir: &Path, plan: Option<FaultPlan>) -> Result<Store> {
        let slot = match open_writable(dir, plan.as_ref(), None) {
            Ok(h) => Slot::Writable(h),
            Err(e) if disk_full(&e) => match open_read_only(dir, None) {
                Ok(h) => {
                    tracing::warn!("{e}; the database is open read-only until there is room");
                    Slot::ReadOnly(h)
                }
                Err(e2) => {
                    tracing::warn!("cannot open the database read-only either: {e2}");
                    return Err(e);
                }
            },
            Err(e) => return Err(e),
        };
        Ok(Store {
            dir: dir.to_path_buf(),
            plan,
            slot: RwLock::new(slot),
            generation: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// The database, for reading: the writable one, or the read-only view while the file
    /// cannot be opened for writing. Reopens it after an I/O failure.
    pub fn read(&self) -> Result<Arc<Database>> {
        {
            let slot = self.slot.read().unwrap_or_else(PoisonError::into_inner);
            if let Slot::Writable(h) | Slot::ReadOnly(h) = &*slot
                && h.healthy()
            {
                return Ok(h.db.clone());
            }
        }
        self.reopen(false)
    }

    /// The database, for writing. Reopens it after an I/O failure; fails with the reason while
    /// it cannot be opened for writing (e.g. the disk is full).
    pub fn write(&self) -> Result<Arc<Database>> {
        {
            let slot = self.slot.read().unwrap_or_else(PoisonError::into_inner);
            if let Slot::Writable(h) = &*slot
                && h.healthy()
            {
                return Ok(h.db.clone());
            }
        }
        self.reopen(true)
    }

    /// Close the database and open it again on the next access (after a panic in a write: redb's
    /// state in memory may be left half-changed).
    pub fn mark_failed(&self) {
        let slot = self.slot.read().unwrap_or_else(PoisonError::into_inner);
        if let Slot::Writable(h) | Slot::ReadOnly(h) = &*slot {
            h.failed.store(true, Ordering::Release);
        }
    }

    /// Close the database for good (a stopping daemon): wait a few seconds for the calls still
    /// using it, then drop it. Dropping is what makes redb write its clean-shutdown header; a
    /// process that exits while holding the database leaves the file marked for recovery, and
    /// the next open walks and verifies every page (slow on a large file, and a refusal when
    /// one page is damaged). Later calls fail instead of reopening it.
    pub fn shut(&self) {
        let mut slot = self.slot.write().unwrap_or_else(PoisonError::into_inner);
        if let Slot::Writable(h) | Slot::ReadOnly(h) = std::mem::replace(&mut *slot, Slot::Shut) {
            close(h);
        }
    }

    /// The record numbered `seq` in the journal belongs to a group that failed (its writers
    /// were told so): the replay of the next reopen, for writing or reading, leaves it out, and
    /// a reopen for writing claims its number durably, so that no later replay applies it. The
    /// journal takes the record back itself (`Journal::take_back_last`); this covers a disk
    /// that refused that too.
    pub fn refuse_replay(&self, seq: u64) {
        self.refused.store(seq, Ordering::Release);
    }

    fn refused(&self) -> Option<u64> {
        Some(self.refused.load(Ordering::Acquire)).filter(|&r| r > 0)
    }

    /// How many times the database was reopened for writing.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn reopen(&self, for_write: bool) -> Result<Arc<Database>> {
        let mut slot = self.slot.write().unwrap_or_else(PoisonError::into_inner);
        // Another thread may have reopened it meanwhile.
        match &*slot {
            Slot::Writable(h) if h.healthy() => return Ok(h.db.clone()),
            Slot::ReadOnly(h) if h.healthy() && !for_write => return Ok(h.db.clone()),
            Slot::Shut => {
                return Err(KbError::Storage(
                    "the database is closed (the daemon is stopping); retry".into(),
                ));
            }
            _ => {}
        }
        let was_writable = matches!(&*slot, Slot::Writable(_));
        match std::mem::replace(&mut *slot, Slot::Closed) {
            Slot::Writable(h) | Slot::ReadOnly(h) => close(h),
            Slot::Closed | Slot::Shut => {}
        }
        let refused = self.refused();
        match open_writable(&self.dir, self.plan.as_ref(), refused) {
            Ok(h) => {
                // Claimed by the replay: a later failed group sets its own.
                if let Some(r) = refused {
                    let _ =
                        self.refused
                            .compare_exchange(r, 0, Ordering::AcqRel, Ordering::Acquire);
                }
                self.generation.fetch_add(1, Ordering::AcqRel);
                if was_writable {
                    tracing::warn!("database reopened after an I/O failure");
                } else {
                    tracing::warn!("database writable again");
                }
                let db = h.db.clone();
                *slot = Slot::Writable(h);
                Ok(db)
            }
            Err(e) => {
                let e = match e {
                    // Our own earlier handle, still held by a call in progress (redb closes a
                    // database when its last write transaction ends), not another process.
                    KbError::Locked(_) => KbError::Storage(
                        "the database is being reopened after an I/O failure and a call in \
                         progress still holds it; retry"
                            .into(),
                    ),
                    e => e,
                };
                tracing::warn!("cannot reopen the database for writing: {e}");
                match open_read_only(&self.dir, refused) {
                    Ok(h) => {
                        let db = h.db.clone();
                        *slot = Slot::ReadOnly(h);
                        if for_write { Err(e) } else { Ok(db) }
                    }
                    Err(e2) => {
                        tracing::warn!("cannot open the database read-only either: {e2}");
                        *slot = Slot::Closed;
                        Err(e)
                    }
                }
            }
        }
    }
}

/// Whether an error says the disk (or the quota) is full.
fn disk_full(e: &KbError) -> bool {
    matches!(e, KbError::Io { source, .. } if crate::error::is_disk_full(source))
}

/// Close a database: wait (a few seconds at most) for the calls that still use it, then drop
/// it, which closes the file and releases its locks.
fn close(h: Handle) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut db = h.db;
    loop {
        match Arc::try_unwrap(db) {
            Ok(db) => {
                drop(db);
                return;
            }
            Err(shared) if Instant::now() >= deadline => {
                tracing::warn!("the database is still in use; it closes when its last call ends");
                drop(shared);
                return;
            }
            Err(shared) => {
                db = shared;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// The database file, opened here (not by redb) so that a symbolic link in its place is refused.
fn open_file(file: &Path) -> Result<std::fs::File> {
    super::open_nofollow(file, true).map_err(|e| super::open_error("open", file, e))
}

fn open_error(dir: &Path, file: &Path, e: DatabaseError) -> KbError {
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            KbError::Locked(dir.to_path_buf())
        }
        DatabaseError::Storage(s) => match KbError::from(s) {
            // The file ends before what its own pages point to: damaged (a byte of a page
            // changed), not a failing disk.
            KbError::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof => {
                KbError::damaged(format!(
                    "cannot open {}: a page points past the end of the file ({source})",
                    file.display()
                ))
            }
            KbError::Io { context, source } => KbError::Io {
                context: format!("cannot open {}: {context}", file.display()),
                source,
            },
            KbError::Damaged { what } => {
                KbError::damaged(format!("cannot open {}: {what}", file.display()))
            }
            other => KbError::Storage(format!("cannot open {}: {other}", file.display())),
        },
        other => KbError::Storage(format!("cannot open {}: {other}", file.display())),
    }
}

/// Open the database for writing; a panic in redb (a damaged page read at open) is a `damaged`
/// error naming the file. `refused`: a journal record its replay leaves out (`Store::refuse_replay`).
fn open_writable(dir: &Path, plan: Option<&FaultPlan>, refused: Option<u64>) -> Result<Handle> {
    let path = dir.join(super::DB_FILE);
    super::guard(&format!("opening {}", path.display()), || {
        open_writable_unguarded(dir, plan, refused)
    })
}

fn open_writable_unguarded(
    dir: &Path,
    plan: Option<&FaultPlan>,
    refused: Option<u64>,
) -> Result<Handle> {
    let path = dir.join(super::DB_FILE);
    let failed = Arc::new(AtomicBool::new(false));
    let file = FileBackend::new(open_file(&path)?)
        .map_err(|e| KbError::Storage(format!("cannot open {}: {e}", path.display())))?;
    discard_unfinished_init(&file, &path)?;
    let backend = StoreBackend {
        file,
        plan: plan.cloned(),
        failed: failed.clone(),
    };
    let mut db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create_with_backend(backend)
        .map_err(|e| open_error(dir, &path, e))?;
    // The journal's writes were made on this schema: they go back before any migration.
    let schema = super::migrate::read_version(&redb::ReadableDatabase::begin_read(&db)?)?;
    super::journal::replay(dir, &db, schema, true, refused)?;
    super::migrate::run(&mut db)?;
    Ok(Handle {
        db: Arc::new(db),
        failed,
    })
}

/// redb writes a new file's header first and its magic number last, once the header is on disk;
/// a failure (or a crash) in between leaves a file that redb refuses for ever ("not a redb
/// database") although it holds nothing: no commit happens before the magic number. Such a file
/// is copied aside (`kbdb.redb.unfinished-<time>`) and emptied, so that this open initializes
/// it again. Only under an exclusive lock of the whole file: a file another process is
/// initializing right now is left alone.
fn discard_unfinished_init(file: &FileBackend, path: &Path) -> Result<()> {
    let unfinished = || -> io::Result<bool> {
        let len = file.len()?;
        if len == 0 {
            return Ok(false);
        }
        let mut magic = [0u8; 9];
        if len >= magic.len() as u64 {
            file.read(0, &mut magic)?;
        }
        Ok(magic == [0; 9])
    };
    let io_err = |e| KbError::io(format!("cannot read {}", path.display()), e);
    if !unfinished().map_err(io_err)? {
        return Ok(());
    }
    if !matches!(
        file.try_lock_range(Bound::Unbounded, Bound::Unbounded),
        Ok(true)
    ) {
        return Ok(()); // in use: redb says so
    }
    let r = (|| -> io::Result<()> {
        if unfinished()? {
            // Keep the bytes anyway: a header zeroed by damage looks the same, and its pages
            // are worth more to a person recovering data than the disk space.
            let kept = path.with_extension(format!(
                "redb.unfinished-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
            ));
            let mut from = super::open_nofollow(path, false)?;
            std::io::copy(&mut from, &mut super::create_new(&kept)?)?;
            tracing::warn!(
                "{}: its creation did not finish (no header); creating it again (the old bytes are kept in {})",
                path.display(),
                kept.display()
            );
            file.set_len(0)?;
            file.sync_data()?;
        }
        Ok(())
    })();
    let _ = file.unlock_range(Bound::Unbounded, Bound::Unbounded);
    r.map_err(KbError::storage_io)
}

fn open_read_only(dir: &Path, refused: Option<u64>) -> Result<Handle> {
    let path = dir.join(super::DB_FILE);
    super::guard(&format!("opening {} read-only", path.display()), || {
        open_read_only_unguarded(dir, refused)
    })
}

fn open_read_only_unguarded(dir: &Path, refused: Option<u64>) -> Result<Handle> {
    let path = dir.join(super::DB_FILE);
    let file = FileBackend::new(open_file(&path)?)
        .map_err(|e| KbError::Storage(format!("cannot open {}: {e}", path.display())))?;
    let len = file
        .len()
        .map_err(|e| KbError::io(format!("cannot read {}", path.display()), e))?;
    let failed = Arc::new(AtomicBool::new(false));
    let view = Arc::new(ReadOnlyView {
        file,
        overlay: Mutex::new(Overlay {
            len,
            file_len: len,
            blocks: BTreeMap::new(),
        }),
        sealed: AtomicBool::new(false),
        failed: failed.clone(),
    });
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create_with_backend(SharedView(view.clone()))
        .map_err(|e| open_error(dir, &path, e))?;
    let have = super::migrate::read_version(&redb::ReadableDatabase::begin_read(&db)?)?;
    if have != super::migrate::current_version() {
        return Err(KbError::Storage(format!(
            "cannot open {} read-only: its schema needs a migration",
            path.display()
        )));
    }
    // Acknowledged writes may still be only in the journal: replay them into the view's memory.
    super::journal::replay(dir, &db, have, false, refused)?;
    view.sealed.store(true, Ordering::Release);
    Ok(Handle {
        db: Arc::new(db),
        failed,
    })
}

/// The view as a backend (redb takes the backend by value; the store keeps a reference to seal
/// it). Any failed call raises the view's flag: redb refuses the database after it, so the store
/// must reopen it.
#[derive(Debug)]
struct SharedView(Arc<ReadOnlyView>);

impl SharedView {
    fn track<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if r.is_err() {
            self.0.failed.store(true, Ordering::Release);
        }
        r
    }
}

impl StorageBackend for SharedView {
    fn len(&self) -> io::Result<u64> {
        self.track(self.0.len())
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.track(self.0.read(offset, out))
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.track(self.0.set_len(len))
    }
    fn sync_data(&self) -> io::Result<()> {
        self.track(self.0.sync_data())
    }
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.track(self.0.write(offset, data))
    }
    fn close(&self) -> io::Result<()> {
        self.0.close()
    }
    fn try_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_file_that_ends_before_its_pages_is_damaged() {
        let eof = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "failed to fill whole buffer",
        );
        let e = open_error(
            Path::new("db"),
            Path::new("db/kbdb.redb"),
            DatabaseError::Storage(redb::StorageError::Io(eof)),
        );
        assert!(matches!(e, KbError::Damaged { .. }), "{e:?}");
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = open_error(
            Path::new("db"),
            Path::new("db/kbdb.redb"),
            DatabaseError::Storage(redb::StorageError::Io(denied)),
        );
        assert!(matches!(e, KbError::Io { .. }), "{e:?}");
    }

    use super::*;

    fn view(bytes: &[u8]) -> (tempfile::TempDir, ReadOnlyView) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        let file = FileBackend::new(open_file(&path).unwrap()).unwrap();
        let view = ReadOnlyView {
            file,
            overlay: Mutex::new(Overlay {
                len: bytes.len() as u64,
                file_len: bytes.len() as u64,
                blocks: BTreeMap::new(),
            }),
            sealed: AtomicBool::new(false),
            failed: Arc::new(AtomicBool::new(false)),
        };
        (tmp, view)
    }

    fn read(v: &ReadOnlyView, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        v.read(offset, &mut out).unwrap();
        out
    }

    #[test]
    fn the_read_only_view_keeps_writes_in_memory() {
        let data: Vec<u8> = (0..3 * BLOCK).map(|i| (i % 251) as u8).collect();
        let (tmp, v) = view(&data);
        // A write across a block boundary, then reads around it.
        v.write(BLOCK - 2, &[9; 4]).unwrap();
        let mut want = data.clone();
        want[BLOCK as usize - 2..BLOCK as usize + 2].fill(9);
        assert_eq!(read(&v, 0, want.len()), want);
        assert_eq!(read(&v, BLOCK - 3, 6), want[BLOCK as usize - 3..][..6]);
        // Shrink then grow: the cut bytes read as zeros, as from a file.
        v.set_len(BLOCK + 1).unwrap();
        v.set_len(2 * BLOCK).unwrap();
        let got = read(&v, BLOCK - 2, BLOCK as usize + 2);
        assert_eq!(got[..3], want[BLOCK as usize - 2..][..3]);
        assert!(got[3..].iter().all(|&b| b == 0));
        assert!(v.read(2 * BLOCK - 1, &mut [0; 2]).is_err(), "past the end");
        // Nothing reached the file.
        assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), data);
        // Sealed: writes fail, and the failure raises the flag (the store reopens).
        let shared = SharedView(Arc::new(v));
        shared.0.sealed.store(true, Ordering::Release);
        assert!(StorageBackend::write(&shared, 0, &[1]).is_err());
        assert!(shared.0.failed.load(Ordering::Acquire));
    }
}
