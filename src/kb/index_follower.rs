//! The lexical index's catch-up after the writes of `Kb::write_group` (a library user's
//! `Kb::learn`, the CLI's `--embedded` writes), on a thread of the `Kb`'s own instead of the
//! writer's: the caller is acknowledged once its write is durable, and the index takes the
//! change meanwhile (~10 % of a durable write made one at a time). Nothing is missed: a search,
//! `status` and `check` catch up with the change log themselves before they read the index, so
//! a write is found as soon as its call returns. The daemon and streams of writes have index
//! threads of their own (`Kb::index_pending`, `IndexBehind`).
//!
//! The thread is started by the first write and stopped (after a last catch-up) when the `Kb`
//! closes or is dropped. A catch-up that fails is left to the next one, or to the next search,
//! as a failure of the inline catch-up was.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::index::lexical::LexicalIndex;
use crate::store::Store;

#[derive(Default)]
pub(crate) struct IndexFollower {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<FollowState>,
    wake: Condvar,
}

#[derive(Default)]
struct FollowState {
    /// Commits signalled so far.
    wanted: u64,
    /// The thread is to stop once it has caught up.
    stop: bool,
}

impl IndexFollower {
    /// A write committed: the thread catches the index up (started here the first time).
    /// Returns false when no thread could be started; the caller then catches up itself.
    pub(crate) fn committed(&self, lexical: &Arc<Mutex<LexicalIndex>>, store: &Arc<Store>) -> bool {
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if thread.is_none() {
            let (shared, lexical, store) = (self.shared.clone(), lexical.clone(), store.clone());
            match std::thread::Builder::new()
                .name("kbdb-index".into())
                .spawn(move || follow(&shared, &lexical, &store))
            {
                Ok(handle) => *thread = Some(handle),
                Err(e) => {
                    tracing::debug!("the index catches up on the writer's thread: {e}");
                    return false;
                }
            }
        }
        drop(thread);
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .wanted += 1;
        self.shared.wake.notify_one();
        true
    }

    /// Stop the thread after its last catch-up, and wait for it (closing the `Kb`).
    pub(crate) fn stop(&self) {
        let Some(handle) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = true;
        self.shared.wake.notify_one();
        // A panic of the thread was logged where it happened.
        let _ = handle.join();
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = false;
    }
}

fn follow(shared: &Shared, lexical: &Mutex<LexicalIndex>, store: &Store) {
    let mut seen = 0;
    loop {
        {
            let mut state = shared.state.lock().unwrap_or_else(PoisonError::into_inner);
            while state.wanted == seen && !state.stop {
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.wanted == seen {
                return;
            }
            seen = state.wanted;
        }
        let caught_up = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let Ok(mut lex) = lexical.lock() else {
                // Poisoned by a panic elsewhere: the Kb reports it to its callers.
                return Ok(());
            };
            lex.catch_up(&*store.read()?)
        }));
        match caught_up {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("lexical index update deferred: {e}"),
            Err(_) => {
                tracing::error!("the lexical index's catch-up panicked; the next search retries it")
            }
        }
    }
}
