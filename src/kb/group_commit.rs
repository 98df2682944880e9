//! Group commit for the threads of one process that write at the same time (a library user's
//! workers, an embedded server's requests): a thread that finds another committing queues its
//! prepared writes; the committing thread takes the queued ones into its transaction as it goes
//! (`Kb::write_prepared_joining`) and hands each its own results. One fsync then acknowledges
//! many threads' writes, where each thread paid its own before. The daemon groups its clients'
//! writes with a queue of its own (src/daemon/server.rs), which calls `write_prepared_joining`
//! directly.
//!
//! Each thread's writes stay one atomic unit in order: a queued batch is joined whole or not at
//! all, and a group that fails fails every batch in it (as a transaction of one thread's writes
//! would). A panic while a group is applied (a bug, or a damaged page) fails the batches joined
//! into it and is raised again on the thread that was committing.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::{Kb, PreparedWrite};
use crate::error::{KbError, Result};
use crate::writes::WriteOutcome;

type Outcomes = Result<Vec<Result<WriteOutcome>>>;

/// The writes waiting for the thread that commits, and whether one does.
#[derive(Default)]
pub(crate) struct CommitQueue {
    state: Mutex<QueueState>,
    /// Signalled when a group's results are handed out and when the committing thread is done.
    changed: Condvar,
}

#[derive(Default)]
struct QueueState {
    /// A thread is committing a group (and takes queued batches into it).
    committing: bool,
    /// Batches waiting, in arrival order.
    waiting: VecDeque<Arc<Queued>>,
}

/// One thread's batch: its prepared writes until a group takes them, then its results.
struct Queued {
    len: usize,
    writes: Mutex<Option<Vec<Result<PreparedWrite>>>>,
    outcome: Mutex<Option<Outcomes>>,
}

impl Queued {
    fn take_outcome(&self) -> Option<Outcomes> {
        self.outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn answer(&self, outcome: Outcomes) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
    }
}

impl CommitQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Batches waiting to join a group (tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Whether a thread is committing a group (tests).
    #[cfg(test)]
    pub(crate) fn committing(&self) -> bool {
        self.lock().committing
    }
}

/// Ends a thread's turn at committing, also when the group panicked: the next queued batch's
/// thread (or the next to arrive) commits next.
struct Committing<'q>(&'q CommitQueue);

impl Drop for Committing<'_> {
    fn drop(&mut self) {
        self.0.lock().committing = false;
        self.0.changed.notify_all();
    }
}

impl Kb {
    /// Commit `prepared` in one transaction, with the batches other threads queued meanwhile
    /// (see the module's comment); its results, in order.
    pub(super) fn commit_grouped(&self, prepared: Vec<Result<PreparedWrite>>) -> Outcomes {
        let queue = &self.commit_queue;
        let mut state = queue.lock();
        let prepared = if state.committing {
            let mine = Arc::new(Queued {
                len: prepared.len(),
                writes: Mutex::new(Some(prepared)),
                outcome: Mutex::new(None),
            });
            state.waiting.push_back(mine.clone());
            loop {
                state = queue
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(outcome) = mine.take_outcome() {
                    return outcome;
                }
                if !state.committing {
                    // Not taken into the last group: this thread commits the next one.
                    state.waiting.retain(|q| !Arc::ptr_eq(q, &mine));
                    break mine
                        .writes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take()
                        .expect("a batch still queued holds its writes");
                }
            }
        } else {
            prepared
        };
        state.committing = true;
        drop(state);
        let turn = Committing(queue);
        let own = prepared.len();
        let mut joined: Vec<Arc<Queued>> = Vec::new();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.write_prepared_joining(prepared, |room| {
                let mut state = queue.lock();
                if state.waiting.front()?.len > room {
                    return None;
                }
                let next = state.waiting.pop_front()?;
                let writes = next
                    .writes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                joined.push(next);
                writes
            })
        }));
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(panic) => {
                for q in &joined {
                    q.answer(Err(KbError::Storage(
                        "the write group this write was part of failed (internal error)".into(),
                    )));
                }
                drop(turn);
                std::panic::resume_unwind(panic);
            }
        };
        let mine = match outcome {
            Ok(mut results) => {
                // Each joined batch's results follow the ones before it, in order.
                let mut rest = results.split_off(own.min(results.len()));
                for q in &joined {
                    let tail = rest.split_off(q.len.min(rest.len()));
                    q.answer(Ok(std::mem::replace(&mut rest, tail)));
                }
                Ok(results)
            }
            Err(e) => {
                for q in &joined {
                    q.answer(Err(e.shared_copy()));
                }
                Err(e)
            }
        };
        drop(turn);
        mine
    }
}
