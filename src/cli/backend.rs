//! Where commands run: through the database's daemon (the default; started on demand), or
//! in this process with `--embedded` / `KBDB_EMBEDDED=1`. Both go through the same method
//! dispatcher (`kbdb::daemon::methods`), so a command behaves the same either way.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use kbdb::daemon::client::{Client, create_database, daemon_info};
use kbdb::daemon::methods::{self, CallError};
use kbdb::daemon::operations::{Op, op};
use kbdb::daemon::params::{ExportParams, ImportParams, LearnManyParams, RecallParams};
use kbdb::{
    ExportOptions, ExportResult, ImportResult, Kb, KbError, LearnRequest, LearnResult,
    RecallRequest, Recalled,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub enum Backend {
    Embedded(Box<Kb>),
    Daemon(RefCell<Client>),
}

/// An absolute form of a user path, so the daemon (whose working directory differs) reads
/// and writes where the user meant.
fn absolute(p: &Path) -> Result<PathBuf, KbError> {
    std::path::absolute(p).map_err(|e| KbError::io(format!("cannot resolve {}", p.display()), e))
}

impl Backend {
    /// Open the database in `db`. `create`: create it when missing (learn, import); returns
    /// whether it was created.
    pub fn open(db: &Path, embedded: bool, create: bool) -> Result<(Backend, bool), KbError> {
        if embedded {
            let opened = if create {
                Kb::open_or_create(db)
            } else {
                Kb::open(db).map(|kb| (kb, false))
            };
            return match opened {
                Ok((kb, created)) => Ok((Backend::Embedded(Box::new(kb)), created)),
                Err(KbError::Locked(path)) => Err(match daemon_info(&path).ok().flatten() {
                    Some(info) => KbError::Daemon(format!(
                        "--embedded: the kbdb daemon (pid {}) holds {}; drop --embedded to go through it, or stop it with `kbdb daemon stop`",
                        info.pid,
                        path.display()
                    )),
                    None => KbError::Locked(path),
                }),
                Err(e) => Err(e),
            };
        }
        let mut created = false;
        if !db.join(kbdb::store::DB_FILE).exists() {
            // Missing: create it here (or report why not), then hand it to a daemon. Under the
            // daemon's start lock, so that a racing client does not start a daemon meanwhile.
            if create {
                created = create_database(db)?;
            } else {
                Kb::open(db)?;
            }
        }
        Ok((Backend::Daemon(RefCell::new(Client::connect(db)?)), created))
    }

    fn call(
        &self,
        method: &str,
        params: Value,
        progress: Option<&dyn Fn(u64, u64)>,
    ) -> Result<Value, KbError> {
        match self {
            Backend::Embedded(kb) => {
                let none = |_: u64, _: u64| {};
                methods::call(kb, method, params, progress.unwrap_or(&none)).map_err(|e| match e {
                    CallError::Kb(e) => e,
                    CallError::InvalidParams(m) => KbError::invalid("params", m),
                    CallError::UnknownMethod(m) => KbError::Daemon(format!("unknown method {m}")),
                })
            }
            Backend::Daemon(c) => c.borrow_mut().call(method, params, progress),
        }
    }

    /// Run an operation of the table (`op::…`), here or through the daemon.
    pub fn run<P: Serialize, R: DeserializeOwned>(
        &self,
        op: Op<P, R>,
        params: &P,
    ) -> Result<R, KbError> {
        self.run_progress(op, params, None)
    }

    /// `run` with a progress callback `(done, total)`.
    pub fn run_progress<P: Serialize, R: DeserializeOwned>(
        &self,
        op: Op<P, R>,
        params: &P,
        progress: Option<&dyn Fn(u64, u64)>,
    ) -> Result<R, KbError> {
        let params = serde_json::to_value(params).map_err(|e| KbError::Storage(e.to_string()))?;
        let v = self.call(op.method, params, progress)?;
        serde_json::from_value(v)
            .map_err(|e| KbError::Daemon(format!("unexpected {} result: {e}", op.method)))
    }

    /// Learn a stream of batches, each in one transaction, `done` getting each batch's results
    /// in order: in this process the next batch is prepared while one is written
    /// (`Kb::learn_stream`); through the daemon, batch after batch (it prepares on its own
    /// threads).
    pub fn learn_stream(
        &self,
        batches: impl Iterator<Item = Vec<LearnRequest>> + Send,
        mut done: impl FnMut(Result<Vec<Result<LearnResult, KbError>>, KbError>) + Send,
    ) {
        match self {
            Backend::Embedded(kb) => kb.learn_stream(batches, done),
            Backend::Daemon(c) => {
                let calls = batches.map(|requests| LearnManyParams { requests });
                c.borrow_mut()
                    .call_stream(op::LEARN_MANY.method, calls, |answer| {
                        done(answer.and_then(learn_many_results))
                    });
            }
        }
    }

    pub fn recall(&self, req: &RecallRequest) -> Result<Recalled, KbError> {
        // The request was validated here; send it in the wire form.
        let (kbid, kbids) = if req.batch {
            (None, Some(req.kbids.clone()))
        } else {
            (Some(req.kbids[0].clone()), None)
        };
        let params = RecallParams {
            kbid,
            kbids,
            depth: Some(i64::from(req.depth)),
            max_chars: req.max_chars.map(|m| m as i64),
        };
        self.run(op::RECALL, &params)
    }

    pub fn export_with_progress(
        &self,
        opts: &ExportOptions,
        p: &dyn Fn(u64, u64),
    ) -> Result<ExportResult, KbError> {
        let params = ExportParams {
            path: Some(absolute(&opts.path)?),
            with_indexes: opts.with_indexes,
            force: opts.force,
            confine_to: opts.confine_to.clone(),
        };
        self.run_progress(op::EXPORT, &params, Some(p))
    }

    pub fn import_with_progress(
        &self,
        path: &Path,
        strict: bool,
        p: &dyn Fn(u64, u64),
    ) -> Result<ImportResult, KbError> {
        let params = ImportParams {
            path: absolute(path)?,
            strict,
        };
        self.run_progress(op::IMPORT, &params, Some(p))
    }

    /// The database folder (canonical).
    pub fn dir(&self) -> PathBuf {
        match self {
            Backend::Embedded(kb) => kb.dir().to_path_buf(),
            Backend::Daemon(c) => PathBuf::from(&c.borrow().info.db),
        }
    }
}

/// `learn_many`'s answer as it came from the daemon: each learn's result or its error.
fn learn_many_results(answer: Value) -> Result<Vec<Result<LearnResult, KbError>>, KbError> {
    let Value::Array(items) = answer else {
        return Err(KbError::Daemon(format!(
            "unexpected learn_many result: {answer}"
        )));
    };
    Ok(items
        .into_iter()
        .map(|mut item| match item.get_mut("ok").map(Value::take) {
            Some(ok) => serde_json::from_value(ok)
                .map_err(|e| KbError::Daemon(format!("unexpected learn result: {e}"))),
            None => Err(methods::error_from_object(&item["error"])),
        })
        .collect())
}
