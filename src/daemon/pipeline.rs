//! A connection's writes in flight. A client may send its next write before the answer to the
//! one before (`learn --jsonl` does, batch after batch): the connection's thread then reads and
//! prepares that next write while the writer commits the previous one, and the answers go out
//! in order from a thread of the connection's own. Anything else the connection asks waits
//! until its writes are answered, so that it sees them and its answer comes after theirs.

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};

use serde_json::Value;

use super::methods::{self, CallError};
use super::server::{Conn, guard_request, reply_line, send_line};
use crate::Kb;
use crate::writes::WriteAnswer;

/// Writes of one connection queued and not yet answered, at most. Two keep the writer busy
/// (one committing, the next prepared) and bound what a client that never reads can make the
/// daemon hold: its requests wait in its socket, not in memory.
pub(super) const IN_FLIGHT: usize = 2;

/// A queued write whose answer is still to be sent.
pub(super) struct Pending {
    pub id: Value,
    pub method: String,
    pub answer: WriteAnswer,
}

/// The writes in flight of one connection, and the thread that answers them (started with the
/// first write that is not answered at once).
pub(super) struct Pipeline {
    kb: Arc<Kb>,
    conn: Conn,
    queue: Option<mpsc::Sender<Pending>>,
    answering: Option<std::thread::JoinHandle<()>>,
    in_flight: Arc<(Mutex<usize>, Condvar)>,
}

impl Pipeline {
    pub fn new(kb: Arc<Kb>, conn: Conn) -> Pipeline {
        Pipeline {
            kb,
            conn,
            queue: None,
            answering: None,
            in_flight: Arc::new((Mutex::new(0), Condvar::new())),
        }
    }

    /// Whether a write of this connection is queued and not yet answered.
    pub fn busy(&self) -> bool {
        self.count() > 0
    }

    fn count(&self) -> usize {
        self.in_flight.0.lock().map_or(0, |n| *n)
    }

    /// Wait until fewer than `n` writes are in flight.
    fn wait_below(&self, n: usize) {
        let (lock, answered) = &*self.in_flight;
        let Ok(mut count) = lock.lock() else {
            return;
        };
        while *count >= n {
            count = match answered.wait(count) {
                Ok(c) => c,
                Err(_) => return,
            };
        }
    }

    /// Wait for room for one more write.
    pub fn wait_for_room(&self) {
        self.wait_below(IN_FLIGHT);
    }

    /// Wait until every write of this connection is answered.
    pub fn drain(&self) {
        self.wait_below(1);
    }

    /// Hand a queued write to the answering thread.
    pub fn push(&mut self, pending: Pending) -> std::io::Result<()> {
        if self.queue.is_none() {
            let (tx, rx) = mpsc::channel::<Pending>();
            let (kb, conn, in_flight) =
                (self.kb.clone(), self.conn.clone(), self.in_flight.clone());
            let thread = std::thread::Builder::new()
                .name("kbdb-answers".into())
                .spawn(move || answer_loop(&kb, &conn, &in_flight, rx))?;
            self.queue = Some(tx);
            self.answering = Some(thread);
        }
        if let Ok(mut n) = self.in_flight.0.lock() {
            *n += 1;
        }
        let sent = self.queue.as_ref().is_some_and(|q| q.send(pending).is_ok());
        if !sent {
            // The answering thread is gone (it panicked): nothing will answer this write.
            if let Ok(mut n) = self.in_flight.0.lock() {
                *n -= 1;
            }
            return Err(std::io::Error::other(
                "the connection's answering thread ended",
            ));
        }
        Ok(())
    }
}

impl Drop for Pipeline {
    /// The connection ended: its queued writes still commit (the writer has them); their
    /// answers are written if the client still reads.
    fn drop(&mut self) {
        self.queue.take();
        if let Some(t) = self.answering.take() {
            let _ = t.join();
        }
    }
}

/// Wait for a queued write's outcomes, and shape them as `method`'s result.
pub(super) fn answer_write(kb: &Kb, method: &str, answer: WriteAnswer) -> Result<Value, CallError> {
    guard_request(kb, method, || match answer.wait() {
        Ok(outcomes) => methods::write_result(kb, method, outcomes),
        Err(e) => Err(CallError::Kb(e)),
    })
}

/// Answer each queued write, in order, once the writer has its outcome.
fn answer_loop(
    kb: &Kb,
    conn: &Conn,
    in_flight: &(Mutex<usize>, Condvar),
    queue: mpsc::Receiver<Pending>,
) {
    for p in queue {
        let out = answer_write(kb, &p.method, p.answer);
        // A client gone meanwhile: its reader sees the end of the stream and stops.
        let _ = send_line(conn, &reply_line(&p.id, out));
        let (lock, answered) = in_flight;
        if let Ok(mut n) = lock.lock() {
            *n -= 1;
        }
        answered.notify_all();
    }
}
