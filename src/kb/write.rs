//! The one door for writes. Every change to the store goes through `write_prepared_joining`:
//! writes are prepared outside the transaction (`prepare_write`: validation, hashes, shingles),
//! applied in order in one transaction (`writes::apply`), flushed (`WriteTables::flush`:
//! detached sections collected, the sync write-back run), then committed through the
//! durability policy of `store::durability` (the daemon's journal, or a durable redb commit).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Instant;

use redb::ReadableDatabase;

use super::{Kb, PreparedWrite};
use crate::error::{KbError, Result};
use crate::store::durability::JournalState;
use crate::store::txn::{ReadTables, WriteTables};
use crate::types::*;
use crate::writes::{self, WriteOp, WriteOutcome, Writer};
use crate::{elapsed_ms, now};
use crate::{learn, store, types};

/// The most writes of a group that is written by the thread that received it when nothing else
/// is under way, rather than handed to a writer thread (a learn stream's, the daemon's): below
/// this, the hand-offs between threads cost more than overlapping the next group saves.
pub(crate) const WRITTEN_WHERE_READ: usize = 64;

impl Kb {
    /// Learn one section (see `learn_many` for batches). One durable transaction.
    pub fn learn(&self, req: LearnRequest) -> Result<LearnResult> {
        let mut results = self.learn_many(vec![req])?;
        results.pop().expect("one result per request")
    }

    /// Learn many sections in one durable transaction. Each request gets its own result:
    /// invalid requests fail alone and change nothing; a storage failure fails the whole batch.
    pub fn learn_many(&self, reqs: Vec<LearnRequest>) -> Result<Vec<Result<LearnResult>>> {
        let ops = reqs.into_iter().map(WriteOp::Learn).collect();
        Ok(learned(self.write_group(ops)?))
    }

    /// Learn a stream of batches, each in one durable transaction like `learn_many`, for a bulk
    /// load in this process: while one batch is applied and committed, the next is prepared
    /// (hashes, shingles, near-duplicate candidates) on the other cores, and the lexical index
    /// takes the committed changes on a thread of its own, so the writer only applies.
    /// `done` gets each batch's results in order, once that batch is durable (a storage failure
    /// fails that batch only, as `learn_many`). The index has caught up when this returns;
    /// a search meanwhile catches up by itself (see `write_group_unindexed`).
    pub fn learn_stream(
        &self,
        batches: impl Iterator<Item = Vec<LearnRequest>> + Send,
        mut done: impl FnMut(Result<Vec<Result<LearnResult>>>) + Send,
    ) {
        self.journaling(|| self.learn_stream_journaled(batches, &mut done))
    }

    fn learn_stream_journaled(
        &self,
        batches: impl Iterator<Item = Vec<LearnRequest>> + Send,
        done: &mut (impl FnMut(Result<Vec<Result<LearnResult>>>) + Send),
    ) {
        // A batch of at most `WRITTEN_WHERE_READ` writes, drawn while nothing is in flight, is
        // written and reported on the thread that drew it: a writer that awaits each result
        // (one line at a time) then pays no hand-off to the writer and the reporter (~50 µs of
        // a ~350 µs durable write). A larger batch, or one drawn while another is written, goes
        // through the pipeline.

        let done = std::sync::Mutex::new(done);
        let report = |r: Result<Vec<Result<LearnResult>>>| {
            (*done.lock().unwrap_or_else(PoisonError::into_inner))(r)
        };
        // Batches handed to the writer and not reported yet.
        let in_flight = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let index_behind = IndexBehind::start(self, s);
            // Results are handed on (printed, by the CLI) on a thread of their own, off the
            // writer's: formatting a batch's 1,024 lines took ~5 % of its time. Two batches
            // wait at most: a reader that stops reading the results stops the load.
            let (results_tx, results_rx) = std::sync::mpsc::sync_channel(2);
            let reporter = s.spawn(|| {
                for r in results_rx {
                    report(r);
                    in_flight.fetch_sub(1, Ordering::Release);
                }
            });
            // One batch prepared ahead: enough to keep the writer busy, and a bound on memory.
            let (prepared_tx, prepared_rx) = std::sync::mpsc::sync_channel(1);
            let (in_flight, report) = (&in_flight, &report);
            let index = index_behind.signal();
            let drawer = s.spawn(move || {
                for reqs in batches {
                    if reqs.len() <= WRITTEN_WHERE_READ && in_flight.load(Ordering::Acquire) == 0 {
                        // The writer and the reporter are idle, and every earlier batch has
                        // been reported: order is kept.
                        let mut r = self
                            .write_group_unindexed(reqs.into_iter().map(WriteOp::Learn).collect());
                        index.committed(&mut r);
                        report(r.map(learned));
                        continue;
                    }
                    // No near-duplicate scan here: the batch being written meanwhile is not
                    // in the index yet, so the writer would scan again.
                    let prepared =
                        self.prepare_group(reqs.into_iter().map(WriteOp::Learn).collect(), false);
                    in_flight.fetch_add(1, Ordering::Release);
                    if prepared_tx.send(prepared).is_err() {
                        break;
                    }
                }
            });
            for prepared in prepared_rx {
                let mut r = prepared.and_then(|p| self.write_prepared_unindexed(p));
                index_behind.committed(&mut r);
                if results_tx.send(r.map(learned)).is_err() {
                    break;
                }
            }
            drop(results_tx);
            // A panic while reporting (a bug) is this caller's, as when it reported itself.
            for thread in [reporter, drawer] {
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            index_behind.finish();
        });
    }

    /// Run `work` with a writer that commits the batches it is handed, in order, on a thread of
    /// its own, while `work` reads and prepares the next (a folder sync); the lexical index
    /// takes the commits on another thread. Both have caught up when this returns.
    pub fn with_index_behind<T>(&self, work: impl FnOnce(Writer<'_>) -> T) -> T {
        self.journaling(|| self.with_index_behind_journaled(work))
    }

    fn with_index_behind_journaled<T>(&self, work: impl FnOnce(Writer<'_>) -> T) -> T {
        type Job = (
            Vec<Result<PreparedWrite>>,
            std::sync::mpsc::Sender<writes::BatchOutcome>,
        );
        std::thread::scope(|s| {
            let index = IndexBehind::start(self, s);
            let (jobs, queued) = std::sync::mpsc::channel::<Job>();
            let signal = index.signal();
            let writer = s.spawn(move || {
                for (prepared, reply) in queued {
                    let mut r = self.write_prepared_unindexed(prepared);
                    signal.committed(&mut r);
                    let _ = reply.send(r);
                }
            });
            let out = {
                let write = |prepared: Vec<Result<PreparedWrite>>| {
                    let (reply, pending) = writes::WriteAnswer::channel(writer_stopped);
                    jobs.send((prepared, reply)).map_err(|_| writer_stopped())?;
                    Ok(pending)
                };
                work(&write)
            };
            drop(jobs);
            // A panic while committing (a bug) is this caller's, as when it committed itself.
            if let Err(panic) = writer.join() {
                std::panic::resume_unwind(panic);
            }
            index.finish();
            out
        })
    }

    /// Apply many writes in one durable transaction (group commit), in order. Each gets its
    /// own result: invalid ones fail alone and change nothing; a storage failure fails the
    /// whole group (nothing of it is written).
    pub fn write_group(&self, ops: Vec<WriteOp>) -> Result<Vec<Result<WriteOutcome>>> {
        let mut r = self.write_group_unindexed(ops);
        // A group that failed committed nothing to follow.
        if r.is_ok() {
            if self.index_follower.committed(&self.lexical, &self.store) {
                self.train_content_dictionary_when_due();
            } else {
                self.follow_commits();
            }
        }
        if let Ok(out) = r.as_mut() {
            self.embed_after_write(out);
        }
        r
    }

    /// `write_group` without feeding the lexical index: the caller calls `index_pending`
    /// later (the daemon does it on another thread, off the acknowledgement path). Searches
    /// catch up by themselves, so nothing is ever missed.
    pub fn write_group_unindexed(&self, ops: Vec<WriteOp>) -> Result<Vec<Result<WriteOutcome>>> {
        let prepared = self.prepare_group(ops, true)?;
        self.write_prepared_unindexed(prepared)
    }

    /// `prepare_write` for each write of a group, on every core: preparing (hashing, shingling,
    /// reference markers, near-duplicate candidates) costs more per section than applying it,
    /// and a bulk load's group (a client's `learn_many`) would otherwise prepare on one core
    /// while the others wait. Results keep the writes' order. `scan`: look for near duplicates
    /// among what is committed (see `prepare_write`); false for a group prepared while an
    /// earlier one of the same client is still to commit: the writer would scan again anyway
    /// once more than a few sections were committed since, so it does (`learn::complete_scan`).
    /// A group larger than `limits.max_batch` is refused whole (`check_batch`).
    pub fn prepare_group(
        &self,
        ops: Vec<WriteOp>,
        scan: bool,
    ) -> Result<Vec<Result<PreparedWrite>>> {
        self.check_batch(ops.len())?;
        /// Fewer writes than this per thread are prepared where they are (a thread costs more).
        const MIN_PER_THREAD: usize = 64;
        let threads = crate::process::cores().min(ops.len() / MIN_PER_THREAD);
        if threads <= 1 {
            return Ok(ops
                .into_iter()
                .map(|op| self.prepare_write_scanning(op, scan))
                .collect());
        }
        let per = ops.len().div_ceil(threads);
        let mut chunks: Vec<Vec<WriteOp>> = Vec::with_capacity(threads);
        let mut ops = ops.into_iter();
        loop {
            let chunk: Vec<WriteOp> = ops.by_ref().take(per).collect();
            if chunk.is_empty() {
                break;
            }
            chunks.push(chunk);
        }
        Ok(std::thread::scope(|s| {
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|chunk| {
                    let len = chunk.len();
                    let h = s.spawn(move || {
                        // Second to the writer, which commits the batch before this one.
                        crate::process::lower_this_thread_priority();
                        chunk
                            .into_iter()
                            .map(|op| self.prepare_write_scanning(op, scan))
                            .collect::<Vec<_>>()
                    });
                    (len, h)
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|(len, h)| match h.join() {
                    Ok(prepared) => prepared,
                    // A panic while preparing is a bug: that thread's writes fail (one result
                    // each), the others go on.
                    Err(_) => (0..len)
                        .map(|_| {
                            Err(KbError::Storage(
                                "a write could not be prepared (internal error)".into(),
                            ))
                        })
                        .collect(),
                })
                .collect()
        }))
    }

    /// The batch limit of one write group (`limits.max_batch`).
    pub fn check_batch(&self, writes: usize) -> Result<()> {
        if writes > self.config.limits.max_batch {
            return Err(KbError::invalid(
                "batch",
                format!(
                    "has {writes} writes; the limit is {} (limits.max_batch)",
                    self.config.limits.max_batch
                ),
            ));
        }
        Ok(())
    }

    /// Validate a write and compute what does not need the store (hashes, shingles, reference
    /// markers), outside any transaction: the daemon does this on each client's thread, so the
    /// single writer only applies.
    pub fn prepare_write(&self, op: WriteOp) -> Result<PreparedWrite> {
        self.prepare_write_scanning(op, true)
    }

    /// `prepare_write`, with the near-duplicate scan left to the writer unless `scan`.
    fn prepare_write_scanning(&self, op: WriteOp, scan: bool) -> Result<PreparedWrite> {
        let mut op = store::content_codec::preparing_with(self.content_dictionary(), || {
            writes::prepare(op, &self.config.limits)
        })?;
        if let writes::PreparedOp::Learn(p) = &mut op
            && scan
        {
            self.scan_near_duplicates(p);
        }
        writes::pre_read(&mut op, || self.db());
        Ok(PreparedWrite(op))
    }

    /// Look for a learn's near duplicates before its transaction, so that the writer only
    /// completes the scan with what was committed since (the daemon runs this on each client's
    /// thread, in parallel, instead of on the one writer). A scan that cannot be made (the
    /// band index not loaded yet, a read failing) is left to the writer.
    pub(super) fn scan_near_duplicates(&self, p: &mut learn::Prepared) {
        let Some((point, candidates)) = self
            .indexes
            .read()
            .and_then(|index| learn::scan_candidates(p, &index.as_ref()?.bands))
        else {
            return;
        };
        let mut tables = None;
        let load = |kbid: &str| -> Result<Option<Vec<u8>>> {
            if tables.is_none() {
                tables = Some(ReadTables::open(&self.db()?.begin_read()?)?);
            }
            tables
                .as_ref()
                .expect("opened above")
                .content_unverified(kbid)
        };
        if let Err(e) = learn::scan_near_duplicates(p, point, candidates, &self.shingles, load) {
            tracing::debug!("near-duplicate scan left to the writer: {e}");
        }
    }

    /// Apply prepared writes in one durable transaction (see `write_group`), shared with the
    /// writes other threads of this process make meanwhile (src/kb/group_commit.rs); the
    /// lexical index is left to `index_pending`.
    pub fn write_prepared_unindexed(
        &self,
        prepared: Vec<Result<PreparedWrite>>,
    ) -> Result<Vec<Result<WriteOutcome>>> {
        self.commit_grouped(prepared)
    }

    /// Like `write_prepared_unindexed`, but writes that arrive while the transaction is being
    /// applied join it: after each batch, `more(room)` is asked for the next, of at most `room`
    /// writes (until it answers `None` or the group holds `limits.max_batch` writes), so writers
    /// who come back while a group is being applied share its commit instead of waiting for the
    /// next one. Results come in the order of the writes, the first batch's first.
    pub fn write_prepared_joining(
        &self,
        prepared: Vec<Result<PreparedWrite>>,
        mut more: impl FnMut(usize) -> Option<Vec<Result<PreparedWrite>>>,
    ) -> Result<Vec<Result<WriteOutcome>>> {
        // Declared first, so dropped after the journal and index guards below are released.
        let _recover = RecoverIfUnwinding(self);
        let start = Instant::now();
        self.check_batch(prepared.len())?;
        let limit = self.config.limits.max_batch;
        // The next batch to join, while the group has room.
        let mut next_batch = |done: usize| {
            if done < limit {
                more(limit - done)
            } else {
                None
            }
        };
        let mut batch = prepared;
        let mut out: Vec<Result<WriteOutcome>> = Vec::with_capacity(batch.len());
        // Failed preparations only: nothing to open a transaction for.
        while batch.iter().all(|p| p.is_err()) {
            out.extend(batch.into_iter().filter_map(|p| p.err()).map(Err));
            match next_batch(out.len()) {
                Some(next) => batch = next,
                None => return Ok(out),
            }
        }
        let turn = self.loaded_index_turn()?;
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        self.start_journal_when_off(&mut journal);
        // Engine writes (imports, gc…) commit durably in redb: logging a bulk import for the
        // journal would hold a second copy of every change in memory. They are never joined by
        // other batches (only the daemon's grouped writes are), so the first batch decides.
        // So do a stream's bulk batches (`JournalState::max_batch`).
        let journaled = journal
            .as_ref()
            .is_some_and(|j| !j.checkpoint_due() && j.max_batch.is_none_or(|m| batch.len() <= m))
            && batch
                .iter()
                .flatten()
                .all(|PreparedWrite(op)| op.journaled());
        let txn = self.begin_write()?;
        let (changes, record, contents) = {
            let mut t = WriteTables::open_logging(&txn, now(), journaled)?;
            t.indexes = turn.get();
            t.shingle_cache = Some(&self.shingles);
            t.dictionary = self.content_dictionary();
            loop {
                for p in batch {
                    out.push(match p {
                        Ok(PreparedWrite(p)) => writes::apply(&mut t, p)?,
                        Err(e) => Err(e),
                    });
                }
                match next_batch(out.len()) {
                    Some(next) => batch = next,
                    None => break,
                }
            }
            writes::finish(&mut t)?;
            let record = if journaled {
                t.take_record(store::migrate::current_version())
            } else {
                None
            };
            (t.take_index_changes(), record, t.last_content_seq())
        };
        if out.iter().flatten().any(|o| o.changed_something()) {
            store::durability::commit_group(journal.as_mut(), txn, record)?;
            turn.apply(&changes);
            drop(journal);
            if let Some(contents) = contents {
                // Trained by whoever indexes behind this writer, off the writer's way.
                self.contents_stored.fetch_max(contents, Ordering::Relaxed);
            }
        } else {
            txn.abort()?;
        }
        let elapsed = elapsed_ms(start);
        for r in out.iter_mut().flatten() {
            r.set_elapsed(elapsed);
        }
        self.flag_embedding_state(&mut out);
        Ok(out)
    }

    pub(super) fn write_one(&self, op: WriteOp) -> Result<WriteOutcome> {
        self.write_group(vec![op])?
            .pop()
            .expect("one result per write")
    }

    /// Learn a markdown text as the document `docid`: its heading sections (the shared rule,
    /// `text::markdown`), in order, in one transaction. Learning the same text again changes
    /// nothing; an edited text replaces the document's membership: unchanged sections keep their
    /// kbid, vanished ones are detached. `title` defaults to the first heading.
    pub fn learn_document(
        &self,
        docid: &str,
        markdown: &str,
        title: Option<&str>,
    ) -> Result<DocumentLearnResult> {
        self.learn_document_tagged(docid, markdown, title, &[])
    }

    /// `learn_document`, giving every section of the document `tags` (added to the tags a
    /// section already has).
    pub fn learn_document_tagged(
        &self,
        docid: &str,
        markdown: &str,
        title: Option<&str>,
        tags: &[String],
    ) -> Result<DocumentLearnResult> {
        writes::outcome(self.write_one(WriteOp::LearnDocument {
            docid: docid.to_string(),
            markdown: markdown.to_string(),
            title: title.map(str::to_string),
            metadata: None,
            tags: tags.to_vec(),
        })?)
    }

    /// Remove a section and everything that points at it. Unknown kbid → `removed: false`.
    pub fn unlearn(&self, kbid: &str) -> Result<UnlearnResult> {
        writes::outcome(self.write_one(WriteOp::Unlearn {
            kbid: kbid.to_string(),
        })?)
    }

    /// Apply one write only the engine makes (`writes::EngineOp`) through the door.
    pub(crate) fn write_engine<T>(&self, w: writes::Engine<T>) -> Result<T> {
        let prepared = vec![Ok(PreparedWrite(writes::PreparedOp::Engine(w.op)))];
        let mut out = self.write_prepared_joining(prepared, |_| None)?;
        self.follow_commits();
        match out.pop().expect("one result per write")? {
            WriteOutcome::Engine(o) => (w.output)(o),
            _ => None,
        }
        .ok_or_else(writes::unexpected_outcome)
    }

    /// Make `docid` hold exactly `kbids` (which must exist), with these fields.
    pub(crate) fn set_document(
        &self,
        docid: &str,
        kbids: Vec<String>,
        title: Option<String>,
        doc_type: &str,
        metadata: Option<String>,
    ) -> Result<()> {
        let docid = &*types::validate::docid(docid)?;
        self.write_engine(writes::EngineOp::set_document(
            docid.to_string(),
            kbids,
            title,
            doc_type.to_string(),
            metadata,
        ))
    }

    /// Remove a section like `unlearn`, except that the documents of type `keep_doc_type` go on
    /// listing it (a dangling entry, as agents keep a deleted skill).
    pub(crate) fn remove_section_keeping(&self, kbid: &str, keep_doc_type: &str) -> Result<bool> {
        types::kbid::validate_kbid("kbid", kbid)?;
        self.write_engine(writes::EngineOp::remove_section_keeping(
            kbid.to_string(),
            keep_doc_type.to_string(),
        ))
    }

    /// Remove a document (its manifest and memberships); its sections that no other document
    /// holds and that were not learned on their own are removed with it. The same primitive
    /// as a collection document's delete, without the write-back to a synced file.
    pub fn remove_document(&self, docid: &str) -> Result<bool> {
        let docid = &*types::validate::docid(docid)?;
        self.write_engine(writes::EngineOp::remove_document(docid.to_string()))
    }

    /// Add user synonyms: `term` and each of `synonyms` match each other at query time.
    pub fn synonyms_add(
        &self,
        term: &str,
        synonyms: &[String],
    ) -> Result<Vec<store::synonyms::SynonymEntry>> {
        self.write_engine(writes::EngineOp::add_synonyms(
            term.to_string(),
            synonyms.to_vec(),
        ))?;
        self.synonyms_list()
    }

    /// Remove `synonyms` of `term` (all of them when empty).
    pub fn synonyms_remove(&self, term: &str, synonyms: &[String]) -> Result<u64> {
        self.write_engine(writes::EngineOp::remove_synonyms(
            term.to_string(),
            synonyms.to_vec(),
        ))
    }

    /// Bring what follows the writer up to date now (see `write_group_unindexed`): the lexical
    /// index takes the committed changes, then the content dictionary is trained if it is due
    /// (`train_content_dictionary_when_due`). Whoever calls this is off the writer's way: the
    /// daemon's indexer thread, a stream's index thread, or a `write_group` after its own write
    /// when the `Kb`'s index thread cannot be started (src/kb/index_follower.rs).
    /// A failure here never fails a write (it is durable in the store): the next search or
    /// open replays the change log, and a training that fails is tried again later.
    pub fn index_pending(&self) {
        self.follow_commits()
    }

    pub(super) fn follow_commits(&self) {
        if let Err(e) = self.lexical().and_then(|mut l| l.catch_up(&*self.db()?)) {
            tracing::warn!("lexical index update deferred: {e}");
        }
        self.train_content_dictionary_when_due();
    }

    /// Commit every write group through the write journal from now on (one sequential fsync
    /// per group; redb made durable every `daemon.journal_checkpoint_ms`), bulk batches
    /// included: the daemon's policy. src/store/journal.rs.
    pub fn enable_journal(&self) -> Result<()> {
        let mut slot = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.as_mut() {
            Some(j) => j.max_batch = None,
            None => *slot = Some(self.new_journal(None)?),
        }
        Ok(())
    }

    /// The journal of a process of its own (a library user, the embedded CLI), started by its
    /// first write unless `daemon.journal = false`: groups of up to
    /// `STREAM_MAX_JOURNALED_BATCH` writes commit through the journal, larger ones durably in
    /// redb. The first group after the start commits durably anyway (`durable_first`), so a
    /// process that writes once costs what it did without a journal; one that goes on writing
    /// pays an fsync of the journal per group instead of a durable redb commit (docs/storage.md).
    /// A journal that cannot be opened is tried again at the next write; writes commit durably
    /// in redb meanwhile.
    fn start_journal_when_off(&self, slot: &mut Option<JournalState>) {
        if slot.is_some() || !self.config.daemon.journal {
            return;
        }
        match self.new_journal(Some(store::durability::STREAM_MAX_JOURNALED_BATCH)) {
            Ok(j) => *slot = Some(j),
            Err(e) => tracing::warn!("writing without the journal: {e}"),
        }
    }

    /// A journal state for `start_journal_when_off` and `enable_journal`: groups whose first
    /// batch holds more than `max_batch` writes commit durably in redb (None: none do).
    fn new_journal(&self, max_batch: Option<usize>) -> Result<JournalState> {
        Ok(JournalState {
            max_batch,
            journal: store::journal::Journal::open(&self.dir, self.plan.clone())?,
            last_durable: Instant::now(),
            every: std::time::Duration::from_millis(self.config.daemon.journal_checkpoint_ms),
            skip_to: None,
            unfinished: None,
            // Whatever the file holds is in the database (replayed when it opened).
            durable_first: true,
            store: self.store.clone(),
        })
    }

    /// After a panic while a write group was applied or committed (a damaged page: the daemon's
    /// writer, a library user's threads go on): the database is closed and opened again at the
    /// next access (redb's state in memory may be half-changed), the failed group's journal
    /// record, if it wrote one, is taken back so that no replay applies it (its writers were
    /// told it failed), and the next group commits durably (`JournalState::take_back_unfinished`).
    fn recover_from_panic(&self) {
        self.store.mark_failed();
        self.journal.clear_poison();
        let mut slot = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(j) = slot.as_mut() {
            j.take_back_unfinished();
        }
        drop(slot);
        self.recover_locks();
    }

    /// Close the knowledge base for good while others may still hold it (a stopping daemon,
    /// whose threads share it): make the journaled writes durable, commit the lexical index,
    /// then close the database so redb marks the file cleanly shut (the next open then needs no
    /// recovery walk). Later calls fail.
    pub fn close(&self) -> Result<()> {
        self.index_follower.stop();
        // Nothing left to make durable then: dropping the `Kb` later has no journal to flush.
        let journal = self.checkpoint_journal_then(true);
        if let Ok(mut l) = self.lexical.lock() {
            let _ = l.commit();
        }
        self.store.shut();
        journal
    }

    /// Run `writes` — a stream of write groups, each acknowledged once durable, journaled as
    /// every write of this process is (`start_journal_when_off`) — then checkpoint: the
    /// stream's writes are made durable in redb and the journal starts over, so that a process
    /// killed later has no stream to replay. A process killed during the stream leaves the
    /// journal, which the next open replays (docs/storage.md).
    pub(super) fn journaling<T>(&self, writes: impl FnOnce() -> T) -> T {
        let out = writes();
        if let Err(e) = self.checkpoint_journal() {
            // The next checkpoint (at the latest when the database is closed) or the next
            // open's replay makes its writes durable in redb.
            tracing::warn!("journal checkpoint after a stream of writes failed: {e}");
        }
        out
    }

    /// Make every journaled write durable in redb and empty the journal (a clean stop leaves
    /// nothing to replay).
    pub fn checkpoint_journal(&self) -> Result<()> {
        self.checkpoint_journal_then(false)
    }

    /// `checkpoint_journal`, and with `stop` the journal turned off, under one hold of its
    /// lock: no group may slip into the journal between the checkpoint and the stop, where
    /// nothing would make it durable in redb before the next open.
    fn checkpoint_journal_then(&self, stop: bool) -> Result<()> {
        let mut slot = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(j) = slot.as_mut() else {
            return Ok(());
        };
        if j.holds_writes() {
            let txn = self.begin_write()?;
            j.before_durable(&txn)?;
            txn.commit()?;
            j.after_durable();
        }
        // Emptied once a durable commit of this process holds every record. Before the first,
        // the file's records may be in this process's view only (a read-only open, on a full
        // disk, replays them in memory): it is left as it is.
        if !j.durable_first {
            j.journal.truncate();
        }
        if stop {
            slot.take();
        }
        Ok(())
    }
}

/// Recovers the `Kb` when a write group panics on its way (`Kb::recover_from_panic`), for every
/// caller of `write_prepared_joining`: the daemon's writer, the threads of a library user's
/// group commit, an engine write. redb skips a panicked transaction's abort (its pages are
/// leaked and the file marked for repair), the in-memory indexes may be half-applied, and the
/// journal's next record number may be taken: the store is reopened at the next access and the
/// next group commits durably.
struct RecoverIfUnwinding<'kb>(&'kb Kb);

impl Drop for RecoverIfUnwinding<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.recover_from_panic();
        }
    }
}

/// A group of learns' outcomes as their results.
fn learned(out: Vec<Result<WriteOutcome>>) -> Vec<Result<LearnResult>> {
    out.into_iter()
        .map(|r| r.and_then(writes::outcome))
        .collect()
}

/// The lexical index catching up on a thread of its own while a long run of writes goes on (a
/// learn stream, a folder sync): the writer only signals each commit, and commits that come
/// meanwhile are taken by the same catch-up.
struct IndexBehind<'scope, 'kb> {
    signal: IndexSignal<'kb>,
    thread: std::thread::ScopedJoinHandle<'scope, ()>,
}

/// What a writer holds to tell `IndexBehind` of its commits (a thread of the scope may hold
/// one of its own: `IndexBehind::signal`).
#[derive(Clone)]
struct IndexSignal<'kb> {
    kb: &'kb Kb,
    commits: std::sync::mpsc::Sender<()>,
}

impl IndexSignal<'_> {
    /// After a group: a committed one is indexed behind, and embedded (as `write_group` does).
    fn committed(&self, outcome: &mut Result<Vec<Result<WriteOutcome>>>) {
        if let Ok(out) = outcome.as_mut() {
            let _ = self.commits.send(());
            self.kb.embed_after_write(out);
        }
    }
}

impl<'scope, 'kb: 'scope> IndexBehind<'scope, 'kb> {
    fn start(kb: &'kb Kb, scope: &'scope std::thread::Scope<'scope, '_>) -> Self {
        let (commits, committed) = std::sync::mpsc::channel::<()>();
        let thread = scope.spawn(move || {
            while committed.recv().is_ok() {
                while committed.try_recv().is_ok() {}
                kb.follow_commits();
            }
        });
        IndexBehind {
            signal: IndexSignal { kb, commits },
            thread,
        }
    }

    fn committed(&self, outcome: &mut Result<Vec<Result<WriteOutcome>>>) {
        self.signal.committed(outcome)
    }

    /// A signal for another thread of the scope; it must be dropped before `finish`, which
    /// waits for every signal to be gone.
    fn signal(&self) -> IndexSignal<'kb> {
        self.signal.clone()
    }

    /// Wait until the index has taken every commit.
    fn finish(self) {
        drop(self.signal);
        if self.thread.join().is_err() {
            tracing::warn!("lexical index update deferred: its thread stopped");
        }
    }
}

/// The error of a batch whose writer thread stopped before answering (it panicked).
fn writer_stopped() -> KbError {
    KbError::Storage("the writer stopped before answering (internal error)".into())
}
