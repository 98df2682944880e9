//! The durability policy: how a write group's transaction becomes durable. Groups commit
//! through the write journal (src/store/journal.rs) unless `daemon.journal = false`: a group's
//! changes are appended to the journal and fsynced once, then committed in redb without an fsync;
//! every `daemon.journal_checkpoint_ms` (or 64 MiB of journal) a group commits durably in redb
//! instead, which empties the journal. The daemon journals every group; a process of its own (a
//! library user, the embedded CLI) starts the journal at its first write and commits bulk batches
//! (`STREAM_MAX_JOURNALED_BATCH`) and the first group after the start durably in redb.

use std::time::Instant;

use redb::{Durability, WriteTransaction};

use super::journal::{self, Record};
use crate::error::Result;

/// Journal bytes after which a group commits durably in redb instead (a checkpoint, as every
/// `daemon.journal_checkpoint_ms`): bounds the journal, the commits held in redb's memory, and
/// the replay after a crash.
pub(crate) const JOURNAL_CHECKPOINT_BYTES: u64 = 64 << 20;

/// Writes in a group's first batch past which a process of its own (`Kb::start_journal_when_off`)
/// commits the group durably in redb instead of through the journal: a bulk
/// batch changes so many pages that a durable commit of its own costs little more than its
/// fsync, and recording every change for the journal cost a 100k-section load ~4 % more CPU.
/// The daemon journals every group: there a bulk client's batch that commits durably in redb
/// holds the writer, which its other clients share, for longer (docs/decisions.md).
pub(crate) const STREAM_MAX_JOURNALED_BATCH: usize = 256;

pub(crate) struct JournalState {
    /// Groups whose first batch holds more writes commit durably in redb (None: none do).
    pub(crate) max_batch: Option<usize>,
    pub(crate) journal: journal::Journal,
    pub(crate) last_durable: Instant,
    /// `daemon.journal_checkpoint_ms`.
    pub(crate) every: std::time::Duration,
    /// A record that may be in the journal although its transaction did not commit (the
    /// append or the commit failed): the next commit is durable and claims this number, so a
    /// replay skips it.
    pub(crate) skip_to: Option<u64>,
    /// The number of a record appended (or being appended) whose transaction has not
    /// committed yet: still set after a panic on the way, when the recovery takes it back
    /// (`take_back_unfinished`).
    pub(crate) unfinished: Option<u64>,
    /// A durable commit must come before the next record (an append failed, and its torn
    /// record could hide the next ones from a replay; or the journal was just opened and holds
    /// records the next ones overwrite).
    pub(crate) durable_first: bool,
    /// The store a failed group's record is refused to (`Store::refuse_replay`).
    pub(crate) store: std::sync::Arc<super::Store>,
}

impl JournalState {
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.durable_first
            || self.skip_to.is_some()
            || self.last_durable.elapsed() >= self.every
            || self.journal.bytes() >= JOURNAL_CHECKPOINT_BYTES
    }

    /// Whether a checkpoint has anything to make durable: a record appended since the last
    /// durable commit, or a number to claim. Nothing, right after the journal started (its
    /// file's records are in the database) or after a checkpoint: a process that wrote once
    /// (durably, the first group after a start) closes without another commit.
    pub(crate) fn holds_writes(&self) -> bool {
        self.journal.bytes() > 0 || self.skip_to.is_some()
    }

    /// Before a durable commit: claim a record that must not be replayed.
    pub(crate) fn before_durable(&mut self, txn: &redb::WriteTransaction) -> Result<()> {
        if let Some(seq) = self.skip_to {
            let held = journal::applied_seq(txn)?;
            journal::set_applied_seq(txn, held.max(seq))?;
        }
        Ok(())
    }

    /// A group whose record was appended, or was being appended, failed: its append or its
    /// commit returned an error, or it panicked on the way (`Kb::recover_from_panic`). Its
    /// writers are told that it failed, so no replay may apply its record, neither the store's
    /// reopen after the failure nor the open after a crash: the record is taken back from the
    /// file (`Journal::take_back_last`), and the next commit is durable and claims its number,
    /// which keeps every later replay from applying it. If the file did not take the zeros,
    /// the store's next reopen leaves the record out of its replay and claims its number
    /// (`Store::refuse_replay`); only a crash before that reopen would still apply it.
    pub(crate) fn take_back_unfinished(&mut self) {
        if let Some(seq) = self.unfinished.take() {
            self.store.refuse_replay(seq);
            if let Err(e) = self.journal.take_back_last() {
                tracing::error!("cannot take back the journal record of a failed group: {e}");
            }
            self.skip_to = Some(self.skip_to.map_or(seq, |s| s.max(seq)));
        }
        self.durable_first = true;
    }

    /// After a durable commit: every record is in the database; the journal starts over.
    pub(crate) fn after_durable(&mut self) {
        self.skip_to = None;
        self.durable_first = false;
        self.last_durable = Instant::now();
        self.journal.reset();
    }
}

/// Commit a write group's transaction under the durability policy: journaled when `journal` is
/// enabled, no checkpoint is due and the group has a `record` (the caller asked for one only in
/// that case), durably in redb otherwise.
pub(crate) fn commit_group(
    journal: Option<&mut JournalState>,
    mut txn: WriteTransaction,
    record: Option<Record>,
) -> Result<()> {
    // The record's bytes, unless the group commits durably in redb (a checkpoint, a write the
    // record does not cover, or a record too large for a replay).
    let encoded = match record {
        Some(record) => {
            let seq = journal::applied_seq(&txn)? + 1;
            journal::encode_record(seq, &record).map(|bytes| (seq, bytes))
        }
        None => None,
    };
    match (journal, encoded) {
        (Some(j), Some((seq, bytes))) => {
            // Durable in the journal first, then visible: nothing is seen that a crash could
            // take back.
            journal::set_applied_seq(&txn, seq)?;
            txn.set_durability(Durability::None)?;
            // Until the commit returns; a panic on the way leaves it set for the recovery.
            j.unfinished = Some(seq);
            if let Err(e) = j.journal.append(&bytes) {
                j.take_back_unfinished();
                return Err(e);
            }
            if let Err(e) = txn.commit() {
                // The record is whole in the file, and the store's reopen after a failed
                // commit would replay it.
                j.take_back_unfinished();
                return Err(e.into());
            }
            j.unfinished = None;
        }
        (Some(j), None) => {
            j.before_durable(&txn)?;
            txn.commit()?;
            j.after_durable();
        }
        (None, _) => txn.commit()?,
    }
    Ok(())
}
