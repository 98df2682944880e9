//! A block-level write-ahead log under redb (docs/storage.md, "The write-ahead log").
//!
//! redb commits copy-on-write: a commit writes its new pages wherever its allocator finds room,
//! then one fsync makes them durable. On the virtual disks kbdb meets, an fsync costs about one
//! device request per run of adjacent pages (measured: 30 scattered 4 KiB pages 1.8 ms, the same
//! 30 pages adjacent 0.33 ms), so the fsync of a commit's scattered pages was most of a write's
//! latency. [`WalBackend`] is the redb storage backend that turns them into one request: the
//! blocks a commit writes are kept in memory and, at redb's `sync_data`, appended to a log file
//! (`kbdb.redb.wal`) in one write and made durable by one fsync of that file. Now and then (and
//! when the database closes) a checkpoint writes the logged blocks to the database file, fsyncs
//! it and starts the log over. After a crash, opening the database replays the log's complete
//! batches onto the database file before redb reads it, so redb sees exactly what it synced.
//!
//! Log format (all integers little-endian):
//! - a header block (4 KiB): magic `KBDBWAL1`, format version (u32), generation (u64), CRC-32
//!   of the preceding bytes. The generation changes at every restart of the log, so batches of an
//!   earlier round further on in the file are never taken for new ones.
//! - batches, from offset 4096, each a whole number of 4 KiB blocks: magic `KBWB`, generation
//!   (u64), sequence number (u64, 0 for the first batch of a round, then +1), block count n (u32),
//!   the smallest length the database had since the previous batch (u64), its length now (u64),
//!   CRC-32 (u32) of the whole batch with this field zero; then n block numbers (u64), zero
//!   padding to 4 KiB, then the n blocks. Replaying a batch: cut the file to the smallest length,
//!   set its length, write the blocks.
//!
//! Replay stops at the first batch that is incomplete, fails its CRC, or has another generation
//! or an unexpected sequence number: that batch and anything after it were never synced.

use std::cell::Cell;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redb::StorageBackend;
use redb::backends::FileBackend;

/// Block size of the log: redb's page size.
pub const BLOCK: u64 = 4096;
const HEADER_MAGIC: &[u8; 8] = b"KBDBWAL1";
const FORMAT_VERSION: u32 = 1;
const BATCH_MAGIC: &[u8; 4] = b"KBWB";
/// Fixed part of a batch header: magic 4, generation 8, sequence 8, count 4, min length 8,
/// length 8, CRC 4.
const BATCH_FIXED: usize = 44;
const CRC_AT: usize = 40;

/// The log is checkpointed into the database file once it holds this many bytes (so a replay
/// after a crash reads at most about this much)...
pub const CHECKPOINT_LOG_BYTES: u64 = 128 << 20;
/// ...or once the distinct blocks it holds, which are also kept in memory until the checkpoint,
/// take this many bytes. A checkpoint writes them to the database file and fsyncs it (tens of
/// milliseconds for thousands of scattered blocks), so it should be rare.
pub const CHECKPOINT_MEMORY_BYTES: u64 = 32 << 20;

/// The log file of the database file `db_file` (`kbdb.redb` → `kbdb.redb.wal`).
pub fn log_path(db_file: &Path) -> PathBuf {
    let mut name = db_file.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

type Block = Arc<[u8]>;

/// One synced batch, as read back from the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub min_len: u64,
    pub len: u64,
    /// (block number, BLOCK bytes)
    pub blocks: Vec<(u64, Vec<u8>)>,
}

/// The open log file, locked by this process for as long as it lives.
#[derive(Debug)]
pub struct LogFile {
    file: File,
    generation: u64,
}

/// Open (creating if needed) and lock the log of `db_file`, and read its synced batches.
/// `exclusive`: a writer's lock (fails while another process holds either kind) or a reader's.
/// Err(WouldBlock) when another process holds the database.
pub fn open_log(db_file: &Path, exclusive: bool) -> io::Result<(LogFile, Vec<Batch>)> {
    let path = log_path(db_file);
    let existed = path.exists();
    let file = OpenOptions::new()
        .read(true)
        .write(exclusive)
        .create(exclusive)
        .truncate(false)
        .open(&path)?;
    let how = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    // SAFETY: a valid open file descriptor; flock has no memory effects.
    if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if exclusive && !existed {
        // The log's name must be durable before any acknowledged write depends on it.
        sync_dir(&path)?;
    }
    let (generation, batches) = match read_header(&file)? {
        Some(generation) => (generation, read_batches(&file, generation)?),
        None => (0, Vec::new()),
    };
    Ok((LogFile { file, generation }, batches))
}

/// `pwritev` until every byte of `slices` is written at `offset`.
fn write_all_vectored_at(
    file: &File,
    mut slices: &mut [IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    const IOV_MAX: usize = 1024;
    while !slices.is_empty() {
        let count = slices.len().min(IOV_MAX);
        // SAFETY: IoSlice is ABI-compatible with iovec on Unix; the slices outlive the call.
        let r = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                slices.as_ptr().cast::<libc::iovec>(),
                count as libc::c_int,
                offset as libc::off_t,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        offset += r as u64;
        IoSlice::advance_slices(&mut slices, r as usize);
    }
    Ok(())
}

fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

fn read_header(file: &File) -> io::Result<Option<u64>> {
    let mut h = [0u8; 24];
    match file.read_exact_at(&mut h, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let ok = &h[..8] == HEADER_MAGIC
        && u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) == FORMAT_VERSION
        && u32::from_le_bytes(h[20..24].try_into().expect("4 bytes")) == crc32fast::hash(&h[..20]);
    Ok(ok.then(|| u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"))))
}

fn header_block(generation: u64) -> Vec<u8> {
    let mut h = vec![0u8; BLOCK as usize];
    h[..8].copy_from_slice(HEADER_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..20].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32fast::hash(&h[..20]);
    h[20..24].copy_from_slice(&crc.to_le_bytes());
    h
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Blocks taken by a batch's header and block numbers.
fn index_blocks(n: usize) -> usize {
    (BATCH_FIXED + 8 * n).div_ceil(BLOCK as usize)
}

fn read_batches(file: &File, generation: u64) -> io::Result<Vec<Batch>> {
    let file_len = file.metadata()?.len();
    let mut out = Vec::new();
    let mut at = BLOCK;
    let mut first = vec![0u8; BLOCK as usize];
    loop {
        if at + BLOCK > file_len {
            break;
        }
        file.read_exact_at(&mut first, at)?;
        if &first[..4] != BATCH_MAGIC
            || u64_at(&first, 4) != generation
            || u64_at(&first, 12) != out.len() as u64
        {
            break;
        }
        let n = u32_at(&first, 20) as usize;
        let total = (index_blocks(n) + n) as u64 * BLOCK;
        if u64_at(&first, 24) > u64_at(&first, 32) || at + total > file_len {
            break;
        }
        let mut batch = vec![0u8; total as usize];
        file.read_exact_at(&mut batch, at)?;
        let crc = u32_at(&batch, CRC_AT);
        batch[CRC_AT..CRC_AT + 4].fill(0);
        if crc32fast::hash(&batch) != crc {
            break;
        }
        let data_at = index_blocks(n) * BLOCK as usize;
        let blocks = (0..n)
            .map(|i| {
                let number = u64_at(&batch, BATCH_FIXED + 8 * i);
                let from = data_at + i * BLOCK as usize;
                (number, batch[from..from + BLOCK as usize].to_vec())
            })
            .collect();
        out.push(Batch {
            min_len: u64_at(&batch, 24),
            len: u64_at(&batch, 32),
            blocks,
        });
        at += total;
    }
    Ok(out)
}

/// Apply synced batches to the database file, in order, and fsync it.
pub fn replay(main: &FileBackend, batches: &[Batch]) -> io::Result<()> {
    if batches.is_empty() {
        return Ok(());
    }
    for b in batches {
        if main.len()? > b.min_len {
            main.set_len(b.min_len)?;
        }
        main.set_len(b.len)?;
        for (number, data) in &b.blocks {
            let at = number * BLOCK;
            if at < b.len {
                let n = (b.len - at).min(BLOCK) as usize;
                main.write(at, &data[..n])?;
            }
        }
    }
    main.sync_data()
}

/// Fill `out` with the bytes of `file` at `offset` that lie below `valid`, and zeros for the rest.
pub fn read_below(file: &FileBackend, valid: u64, offset: u64, out: &mut [u8]) -> io::Result<()> {
    let end = offset + out.len() as u64;
    let from_file = end.min(valid);
    if offset < from_file {
        let n = (from_file - offset) as usize;
        file.read(offset, &mut out[..n])?;
        out[n..].fill(0);
    } else {
        out.fill(0);
    }
    Ok(())
}

/// Start the log over (after its batches are in the database file and that is synced): a new
/// generation in the header, synced. Earlier batches stay in the file until overwritten; their
/// generation keeps them out of any replay.
fn restart(log: &mut LogFile) -> io::Result<()> {
    log.generation = log.generation.wrapping_add(1);
    log.file.write_all_at(&header_block(log.generation), 0)?;
    log.file.sync_data()
}

/// Open the log of `db_file` for writing, replay what it holds onto `main`, and start it over:
/// afterwards the database file alone holds every synced write.
pub fn recover(db_file: &Path, main: &FileBackend) -> io::Result<LogFile> {
    let (mut log, batches) = open_log(db_file, true)?;
    if !batches.is_empty() {
        tracing::info!(
            batches = batches.len(),
            "replaying the write-ahead log onto the database file"
        );
    }
    replay(main, &batches)?;
    restart(&mut log)?;
    Ok(log)
}

thread_local! {
    /// Set by [`deferring`]: this thread's syncs write their batch and return at once.
    static DEFER: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` with the durability of this thread's syncs deferred: a sync (a redb commit) writes
/// its batch to the log and returns without waiting for the log's fsync, so that the next
/// commit can be prepared while the disk works. The caller must not acknowledge anything `f`
/// committed before [`WalShared::sync_through`] of [`WalShared::written`] (taken after `f`)
/// returned. Used by the daemon's group commit (docs/daemon.md); everything else syncs.
pub fn deferring<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DEFER.with(|d| d.set(false));
        }
    }
    DEFER.with(|d| d.set(true));
    let _reset = Reset;
    f()
}

/// The log's durability, shared between the backend (owned by redb) and those who wait for
/// it: batches are numbered from 1 in the order they are written; every batch up to
/// `durable` has been fsynced.
#[derive(Debug)]
pub struct WalShared {
    /// The log file, for fsyncs outside the backend's locks.
    sync_file: File,
    progress: Mutex<Progress>,
    /// One fsync at a time: a second caller waits and then usually finds its batch durable.
    fsync_turn: Mutex<()>,
}

#[derive(Debug, Default)]
struct Progress {
    written: u64,
    durable: u64,
    failed: bool,
}

impl WalShared {
    /// The number of the last batch written to the log.
    pub fn written(&self) -> u64 {
        lock(&self.progress).written
    }

    /// Whether an fsync of the log has failed: nothing written since is durable, and the
    /// database must be reopened.
    pub fn failed(&self) -> bool {
        lock(&self.progress).failed
    }

    fn fail(&self) {
        lock(&self.progress).failed = true;
    }

    /// Return once every batch up to `batch` is durable, fsyncing the log if needed.
    pub fn sync_through(&self, batch: u64) -> io::Result<()> {
        let check = || -> io::Result<Option<u64>> {
            let p = lock(&self.progress);
            if p.failed {
                return Err(io::Error::other(
                    "an earlier fsync of the write-ahead log failed",
                ));
            }
            Ok((p.durable < batch).then_some(p.written))
        };
        if check()?.is_none() {
            return Ok(());
        }
        let _turn = lock(&self.fsync_turn);
        let Some(target) = check()? else {
            return Ok(()); // the fsync of whoever went before covered it
        };
        match self.sync_file.sync_data() {
            Ok(()) => {
                let mut p = lock(&self.progress);
                p.durable = p.durable.max(target);
                Ok(())
            }
            Err(e) => {
                self.fail();
                Err(e)
            }
        }
    }
}

#[derive(Debug)]
struct State {
    /// The length redb sees.
    len: u64,
    /// Bytes of the database file below this are current (unless a block is in `pending` or
    /// `logged`); above it, zeros.
    main_valid: u64,
    /// The smallest length since the last sync.
    min_len: u64,
    /// Blocks written since the last sync.
    pending: HashMap<u64, Block>,
    /// Blocks synced to the log and not yet to the database file.
    logged: HashMap<u64, Block>,
    /// The length recorded by the last batch.
    synced_len: u64,
    /// Sequence number of the next batch in this generation.
    next_seq: u64,
    /// Where the next batch goes in the log.
    log_end: u64,
}

/// redb's storage backend over the database file and its write-ahead log; see the module
/// documentation. Build it with [`recover`] first, so the file is complete.
#[derive(Debug)]
pub struct WalBackend {
    main: FileBackend,
    log: Mutex<LogFile>,
    shared: Arc<WalShared>,
    state: Mutex<State>,
    /// When to checkpoint: (log bytes, bytes of distinct logged blocks).
    limits: (u64, u64),
    /// Set by any failed call: nothing more is written to the database file by this backend
    /// (not even at close); the next open replays what the log holds.
    failed: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WalBackend {
    /// The backend over `main`, whose log [`recover`] has just replayed and started over.
    pub fn new(main: FileBackend, log: LogFile) -> io::Result<WalBackend> {
        let len = main.len()?;
        let shared = Arc::new(WalShared {
            sync_file: log.file.try_clone()?,
            progress: Mutex::new(Progress::default()),
            fsync_turn: Mutex::new(()),
        });
        Ok(WalBackend {
            main,
            log: Mutex::new(log),
            shared,
            limits: (CHECKPOINT_LOG_BYTES, CHECKPOINT_MEMORY_BYTES),
            state: Mutex::new(State {
                len,
                main_valid: len,
                min_len: len,
                synced_len: len,
                pending: HashMap::new(),
                logged: HashMap::new(),
                next_seq: 0,
                log_end: BLOCK,
            }),
            failed: AtomicBool::new(false),
        })
    }

    /// The log's durability, for those who wait for it.
    pub fn shared(&self) -> Arc<WalShared> {
        self.shared.clone()
    }

    /// Write nothing more to the database file, not even at close: after a failure above this
    /// backend, what the log holds is what counts (the next open replays it).
    pub fn abandon(&self) {
        self.failed.store(true, Ordering::Release);
    }

    fn track<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if r.is_err() {
            self.failed.store(true, Ordering::Release);
        }
        r
    }

    fn refuse_after_failure(&self) -> io::Result<()> {
        if self.failed.load(Ordering::Acquire) || self.shared.failed() {
            return Err(io::Error::other(
                "an earlier write of the database failed; it must be reopened",
            ));
        }
        Ok(())
    }

    /// The current bytes of block `number` (BLOCK long).
    fn block(&self, st: &State, number: u64) -> io::Result<Block> {
        if let Some(b) = st.pending.get(&number).or_else(|| st.logged.get(&number)) {
            return Ok(b.clone());
        }
        let mut b = vec![0u8; BLOCK as usize];
        self.read_main(st, number * BLOCK, &mut b)?;
        Ok(b.into())
    }

    /// Bytes of the database file as far as they are current; zeros beyond.
    fn read_main(&self, st: &State, offset: u64, out: &mut [u8]) -> io::Result<()> {
        read_below(&self.main, st.main_valid, offset, out)
    }

    /// Write `blocks` (and the length) to the database file, sync it, and start the log over.
    fn checkpoint(&self, st: &mut State, log: &mut LogFile) -> io::Result<()> {
        let mut numbers: Vec<u64> = st.logged.keys().copied().collect();
        numbers.sort_unstable();
        if self.main.len()? > st.main_valid {
            self.main.set_len(st.main_valid)?;
        }
        self.main.set_len(st.len)?;
        for n in numbers {
            let at = n * BLOCK;
            if at < st.len {
                let k = (st.len - at).min(BLOCK) as usize;
                self.main.write(at, &st.logged[&n][..k])?;
            }
        }
        self.main.sync_data()?;
        st.logged.clear();
        st.main_valid = st.len;
        restart(log)?;
        st.next_seq = 0;
        st.log_end = BLOCK;
        Ok(())
    }

    /// Append the pending blocks to the log as one batch and sync it (or, deferring, leave the
    /// fsync to whoever waits for it); checkpoint when the log has grown past
    /// [`CHECKPOINT_BYTES`].
    fn sync_inner(&self) -> io::Result<()> {
        let mut log = lock(&self.log);
        let (head, blocks, at) = {
            let mut st = lock(&self.state);
            if st.pending.is_empty() && st.min_len == st.len && st.synced_len == st.len {
                drop(st);
                drop(log);
                return self.finish_sync();
            }
            let mut numbers: Vec<u64> = st.pending.keys().copied().collect();
            numbers.sort_unstable();
            let n = numbers.len();
            let mut head = vec![0u8; index_blocks(n) * BLOCK as usize];
            head[..4].copy_from_slice(BATCH_MAGIC);
            head[4..12].copy_from_slice(&log.generation.to_le_bytes());
            head[12..20].copy_from_slice(&st.next_seq.to_le_bytes());
            head[20..24].copy_from_slice(&(n as u32).to_le_bytes());
            head[24..32].copy_from_slice(&st.min_len.to_le_bytes());
            head[32..40].copy_from_slice(&st.len.to_le_bytes());
            let mut blocks = Vec::with_capacity(n);
            for (i, number) in numbers.iter().enumerate() {
                head[BATCH_FIXED + 8 * i..BATCH_FIXED + 8 * i + 8]
                    .copy_from_slice(&number.to_le_bytes());
                let block = st.pending.remove(number).expect("a pending block");
                st.logged.insert(*number, block.clone());
                blocks.push(block);
            }
            let mut crc = crc32fast::Hasher::new();
            crc.update(&head);
            for b in &blocks {
                crc.update(b);
            }
            let crc = crc.finalize();
            head[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
            let at = st.log_end;
            st.log_end += (head.len() + n * BLOCK as usize) as u64;
            st.next_seq += 1;
            st.min_len = st.len;
            st.synced_len = st.len;
            (head, blocks, at)
        };
        // Readers find the blocks in `logged` meanwhile; only redb's writer syncs. One write
        // from the blocks where they are.
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(blocks.len() + 1);
        slices.push(IoSlice::new(&head));
        slices.extend(blocks.iter().map(|b| IoSlice::new(b)));
        if let Err(e) = write_all_vectored_at(&log.file, &mut slices, at) {
            self.shared.fail();
            return Err(e);
        }
        let written = {
            let mut p = lock(&self.shared.progress);
            p.written += 1;
            p.written
        };
        let mut st = lock(&self.state);
        if st.log_end >= self.limits.0 || st.logged.len() as u64 * BLOCK >= self.limits.1 {
            // The database file takes only durable batches.
            self.shared.sync_through(written)?;
            self.checkpoint(&mut st, &mut log)?;
        }
        drop(st);
        drop(log);
        self.finish_sync()
    }

    /// The end of a sync: wait for every written batch to be durable, unless deferring.
    fn finish_sync(&self) -> io::Result<()> {
        if DEFER.with(Cell::get) {
            return Ok(());
        }
        self.shared.sync_through(self.shared.written())
    }

    /// Write everything to the database file and leave the log empty (a clean close).
    fn close_inner(&self) -> io::Result<()> {
        self.sync_inner()?;
        self.shared.sync_through(self.shared.written())?;
        let mut log = lock(&self.log);
        let mut st = lock(&self.state);
        if !st.logged.is_empty() || st.next_seq > 0 {
            self.checkpoint(&mut st, &mut log)?;
        }
        Ok(())
    }
}

impl StorageBackend for WalBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.state).len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let st = lock(&self.state);
        let end = offset + out.len() as u64;
        if end > st.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the database file",
            ));
        }
        if st.pending.is_empty() && st.logged.is_empty() {
            return self.track(self.read_main(&st, offset, out));
        }
        let mut at = offset / BLOCK * BLOCK;
        let mut in_file: Option<u64> = None; // start of a run of blocks read from the file
        while at < end {
            let b = st
                .pending
                .get(&(at / BLOCK))
                .or_else(|| st.logged.get(&(at / BLOCK)));
            match b {
                Some(b) => {
                    if let Some(from) = in_file.take() {
                        let lo = from.max(offset);
                        self.track(self.read_main(
                            &st,
                            lo,
                            &mut out[(lo - offset) as usize..(at - offset) as usize],
                        ))?;
                    }
                    let lo = at.max(offset);
                    let hi = (at + BLOCK).min(end);
                    out[(lo - offset) as usize..(hi - offset) as usize]
                        .copy_from_slice(&b[(lo - at) as usize..(hi - at) as usize]);
                }
                None => {
                    in_file.get_or_insert(at);
                }
            }
            at += BLOCK;
        }
        if let Some(from) = in_file {
            let lo = from.max(offset);
            self.track(self.read_main(&st, lo, &mut out[(lo - offset) as usize..]))?;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.refuse_after_failure()?;
        let mut st = lock(&self.state);
        if len < st.len {
            st.main_valid = st.main_valid.min(len);
            st.min_len = st.min_len.min(len);
            st.pending.retain(|&n, _| n * BLOCK < len);
            st.logged.retain(|&n, _| n * BLOCK < len);
            let last = len / BLOCK;
            if !len.is_multiple_of(BLOCK) {
                // The block across the new end keeps its head only.
                let mut b = self.track(self.block(&st, last))?.to_vec();
                b[(len % BLOCK) as usize..].fill(0);
                st.logged.remove(&last);
                st.pending.insert(last, b.into());
            }
        }
        st.len = len;
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.refuse_after_failure()?;
        let r = self.sync_inner();
        self.track(r)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.refuse_after_failure()?;
        let mut st = lock(&self.state);
        let end = offset + data.len() as u64;
        let mut at = offset / BLOCK * BLOCK;
        while at < end {
            let number = at / BLOCK;
            let lo = at.max(offset);
            let hi = (at + BLOCK).min(end);
            let src = &data[(lo - offset) as usize..(hi - offset) as usize];
            if hi - lo == BLOCK {
                st.pending.insert(number, Block::from(src));
            } else {
                let mut b = match st.pending.remove(&number) {
                    Some(b) => b,
                    None => self.track(self.block(&st, number))?,
                };
                match Arc::get_mut(&mut b) {
                    Some(m) => m[(lo - at) as usize..(hi - at) as usize].copy_from_slice(src),
                    None => {
                        let mut v = b.to_vec();
                        v[(lo - at) as usize..(hi - at) as usize].copy_from_slice(src);
                        b = v.into();
                    }
                }
                st.pending.insert(number, b);
            }
            at += BLOCK;
        }
        st.len = st.len.max(end);
        Ok(())
    }

    fn close(&self) -> io::Result<()> {
        let r = if self.failed.load(Ordering::Acquire) {
            Ok(()) // the log holds what was synced; the next open replays it
        } else {
            self.close_inner()
        };
        let closed = self.main.close();
        r.and(closed)
    }

    fn try_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<bool, redb::BackendError> {
        self.main.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<bool, redb::BackendError> {
        self.main.try_lock_shared_range(start, end)
    }

    fn lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<(), redb::BackendError> {
        self.main.lock_range(start, end)
    }

    fn lock_shared_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<(), redb::BackendError> {
        self.main.lock_shared_range(start, end)
    }

    fn unlock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<(), redb::BackendError> {
        self.main.unlock_range(start, end)
    }

    fn query_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> std::result::Result<bool, redb::BackendError> {
        self.main.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn db_file(dir: &Path) -> PathBuf {
        dir.join("kbdb.redb")
    }

    /// Open as the store does: replay the log, then the backend. Dropping the result without
    /// `close` is a crash: the files stay as the process left them.
    fn open(dir: &Path) -> WalBackend {
        let path = db_file(dir);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        let main = FileBackend::new(file).unwrap();
        let log = recover(&path, &main).unwrap();
        WalBackend::new(main, log).unwrap()
    }

    fn contents(b: &WalBackend) -> Vec<u8> {
        let mut out = vec![0u8; b.len().unwrap() as usize];
        b.read(0, &mut out).unwrap();
        out
    }

    fn apply_len(model: &mut Vec<u8>, len: u64) {
        model.resize(len as usize, 0);
    }

    fn apply_write(model: &mut Vec<u8>, offset: u64, data: &[u8]) {
        let end = offset as usize + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(data);
    }

    #[test]
    fn random_writes_read_back_and_a_crash_keeps_exactly_the_last_sync() {
        for seed in 1..=12u64 {
            let tmp = tempfile::tempdir().unwrap();
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed);
            let mut b = open(tmp.path());
            // Small limits so that checkpoints happen often.
            b.limits = (64 * BLOCK, 24 * BLOCK);
            let mut model: Vec<u8> = Vec::new();
            let mut durable: Vec<u8> = Vec::new();
            for step in 0..400 {
                match rng.below(10) {
                    0..=5 => {
                        let blocks = 40;
                        let offset = if rng.below(2) == 0 {
                            rng.below(blocks) * BLOCK
                        } else {
                            rng.below(blocks * BLOCK)
                        };
                        let len = 1 + rng.below(3 * BLOCK) as usize;
                        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                        if model.len() < offset as usize + len {
                            let l = offset + len as u64;
                            b.set_len(l).unwrap();
                            apply_len(&mut model, l);
                        }
                        b.write(offset, &data).unwrap();
                        apply_write(&mut model, offset, &data);
                    }
                    6 => {
                        let l = rng.below(45 * BLOCK);
                        b.set_len(l).unwrap();
                        apply_len(&mut model, l);
                    }
                    7 | 8 => {
                        b.sync_data().unwrap();
                        durable = model.clone();
                    }
                    _ => {
                        drop(b); // a crash
                        b = open(tmp.path());
                        b.limits = (64 * BLOCK, 24 * BLOCK);
                        model = durable.clone();
                    }
                }
                assert_eq!(
                    b.len().unwrap(),
                    model.len() as u64,
                    "seed {seed} step {step}"
                );
                assert!(
                    contents(&b) == model,
                    "seed {seed} step {step}: contents differ"
                );
            }
            // A clean close leaves the whole state in the database file and an empty log.
            b.close().unwrap();
            drop(b);
            assert!(
                std::fs::read(db_file(tmp.path())).unwrap() == model,
                "seed {seed}"
            );
            let (_log, batches) = open_log(&db_file(tmp.path()), true).unwrap();
            assert!(
                batches.is_empty(),
                "seed {seed}: the log still holds batches"
            );
        }
    }

    /// Two synced batches, then a crash; returns the database file's contents after each.
    fn two_batches(dir: &Path) -> (Vec<u8>, Vec<u8>) {
        let b = open(dir);
        b.set_len(4 * BLOCK).unwrap();
        b.write(0, &[1u8; 4 * BLOCK as usize]).unwrap();
        b.sync_data().unwrap();
        let first = contents(&b);
        b.write(BLOCK, &[2u8; 2 * BLOCK as usize]).unwrap();
        b.sync_data().unwrap();
        let second = contents(&b);
        assert_ne!(first, second);
        (first, second)
    }

    fn log_len(dir: &Path) -> u64 {
        std::fs::metadata(log_path(&db_file(dir))).unwrap().len()
    }

    #[test]
    fn a_torn_last_batch_is_not_replayed() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, second) = two_batches(tmp.path());
        // The second batch: a header block and two data blocks at the end of the log.
        let len = log_len(tmp.path());
        let f = OpenOptions::new()
            .write(true)
            .open(log_path(&db_file(tmp.path())))
            .unwrap();
        f.set_len(len - BLOCK).unwrap();
        drop(f);
        assert_eq!(contents(&open(tmp.path())), first);
        // Intact, the same log gives the second state.
        let tmp = tempfile::tempdir().unwrap();
        let (_, second_again) = two_batches(tmp.path());
        assert_eq!(second_again, second);
        assert_eq!(contents(&open(tmp.path())), second);
    }

    #[test]
    fn a_corrupt_last_batch_is_not_replayed() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, _) = two_batches(tmp.path());
        let len = log_len(tmp.path());
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(log_path(&db_file(tmp.path())))
            .unwrap();
        let mut byte = [0u8; 1];
        f.read_exact_at(&mut byte, len - 100).unwrap();
        f.write_all_at(&[byte[0] ^ 0x40], len - 100).unwrap();
        drop(f);
        assert_eq!(contents(&open(tmp.path())), first);
    }

    #[test]
    fn batches_of_an_earlier_round_are_never_replayed() {
        let tmp = tempfile::tempdir().unwrap();
        let b = open(tmp.path());
        b.set_len(8 * BLOCK).unwrap();
        // A round of batches of the same shape as the next round's (one block each), so that
        // the old round's second batch starts right where the new round's first one ends.
        for i in 0..20u8 {
            b.write(0, &[i; BLOCK as usize]).unwrap();
            b.sync_data().unwrap();
        }
        let before = log_len(tmp.path());
        b.close().unwrap();
        drop(b);
        // A new round with one small batch; the old round's later batches stay in the file.
        let b = open(tmp.path());
        b.write(0, &[99u8; BLOCK as usize]).unwrap();
        b.sync_data().unwrap();
        let expected = contents(&b);
        drop(b); // crash
        assert_eq!(
            log_len(tmp.path()),
            before,
            "the old batches are still in the file"
        );
        assert_eq!(contents(&open(tmp.path())), expected);
    }

    #[test]
    fn only_one_process_holds_the_log_for_writing() {
        let tmp = tempfile::tempdir().unwrap();
        let path = db_file(tmp.path());
        let (held, _) = open_log(&path, true).unwrap();
        let again = open_log(&path, true).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
        let shared = open_log(&path, false).unwrap_err();
        assert_eq!(shared.kind(), io::ErrorKind::WouldBlock);
        drop(held);
        open_log(&path, true).unwrap();
    }

    #[test]
    fn deferred_syncs_are_durable_only_once_waited_for() {
        let tmp = tempfile::tempdir().unwrap();
        let b = open(tmp.path());
        let shared = b.shared();
        b.set_len(BLOCK).unwrap();
        b.write(0, &[7u8; BLOCK as usize]).unwrap();
        deferring(|| b.sync_data()).unwrap();
        let written = shared.written();
        assert_eq!(written, 1);
        assert_eq!(
            lock(&shared.progress).durable,
            0,
            "a deferred sync must not fsync"
        );
        shared.sync_through(written).unwrap();
        assert_eq!(lock(&shared.progress).durable, 1);
        // Outside `deferring` a sync waits for its batch.
        b.write(0, &[8u8; BLOCK as usize]).unwrap();
        b.sync_data().unwrap();
        assert_eq!(lock(&shared.progress).durable, 2);
    }
}
