//! Where commands run: through the database's daemon (the default; started on demand), or
//! in this process with `--embedded` / `KBDB_EMBEDDED=1`. Both go through the same method
//! dispatcher (`kbdb::daemon::methods`), so a command behaves the same either way.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use kbdb::daemon::client::{Client, daemon_info};
use kbdb::daemon::methods::{self, CallError};
use kbdb::{
    CheckResult, ComposedContent, DocumentLearnResult, DocumentSummary, ExportOptions,
    ExportResult, GcResult, ImportResult, Kb, KbError, LearnRequest, LearnResult, RebuildResult,
    RecallRequest, Recalled, Retrieved, SearchRequest, SearchResponse, Status, UnlearnResult,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

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
            // Missing: create it here (or report why not), then hand it to a daemon.
            if create {
                created = Kb::open_or_create(db)?.1;
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
        debug_assert!(
            kbdb::daemon::operations::by_method(method).is_some(),
            "{method}: not in the table of operations"
        );
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

    /// Call any method; the raw JSON result.
    pub fn call_json(&self, method: &str, params: Value) -> Result<Value, KbError> {
        self.call(method, params, None)
    }

    /// Call any method with a progress callback `(done, total)`; the result as `T`.
    pub fn call_progress<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        progress: &dyn Fn(u64, u64),
    ) -> Result<T, KbError> {
        self.call_as_progress(method, params, Some(progress))
    }

    fn call_as<T: DeserializeOwned>(&self, method: &str, params: Value) -> Result<T, KbError> {
        self.call_as_progress(method, params, None)
    }

    fn call_as_progress<T: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        progress: Option<&dyn Fn(u64, u64)>,
    ) -> Result<T, KbError> {
        let v = self.call(method, params, progress)?;
        serde_json::from_value(v)
            .map_err(|e| KbError::Daemon(format!("unexpected {method} result: {e}")))
    }

    pub fn learn(&self, req: LearnRequest) -> Result<LearnResult, KbError> {
        self.call_as("learn", serde_json::to_value(req).unwrap_or_default())
    }

    pub fn learn_many(
        &self,
        reqs: Vec<LearnRequest>,
    ) -> Result<Vec<Result<LearnResult, KbError>>, KbError> {
        let items: Vec<Value> = self.call_as("learn_many", json!({ "requests": reqs }))?;
        Ok(items
            .into_iter()
            .map(|item| match item.get("ok") {
                Some(ok) => serde_json::from_value(ok.clone())
                    .map_err(|e| KbError::Daemon(format!("unexpected learn result: {e}"))),
                None => Err(methods::error_from_object(&item["error"])),
            })
            .collect())
    }

    pub fn learn_document(
        &self,
        docid: &str,
        markdown: &str,
        title: Option<&str>,
        tags: &[String],
    ) -> Result<DocumentLearnResult, KbError> {
        self.call_as(
            "learn_document",
            json!({"docid": docid, "markdown": markdown, "title": title, "tags": tags}),
        )
    }

    pub fn unlearn(&self, kbid: &str) -> Result<UnlearnResult, KbError> {
        self.call_as("unlearn", json!({ "kbid": kbid }))
    }

    pub fn retrieve(&self, kbid: Option<&str>, docid: Option<&str>) -> Result<Retrieved, KbError> {
        self.call_as("retrieve", json!({"kbid": kbid, "docid": docid}))
    }

    pub fn recall(&self, req: &RecallRequest) -> Result<Recalled, KbError> {
        // The request was validated here; send it in the wire form.
        let params = if req.batch {
            json!({"kbids": req.kbids, "depth": req.depth, "max_chars": req.max_chars})
        } else {
            json!({"kbid": req.kbids[0], "depth": req.depth, "max_chars": req.max_chars})
        };
        self.call_as("recall", params)
    }

    pub fn content(&self, ids: &[String]) -> Result<ComposedContent, KbError> {
        self.call_as("content", json!({ "ids": ids }))
    }

    pub fn list_documents(&self) -> Result<Vec<DocumentSummary>, KbError> {
        self.call_as("docs", json!({}))
    }

    pub fn search(&self, req: &SearchRequest) -> Result<SearchResponse, KbError> {
        self.call_as("search", serde_json::to_value(req).unwrap_or_default())
    }

    pub fn synonyms_add(&self, term: &str, synonyms: &[String]) -> Result<Value, KbError> {
        self.call_as("synonyms_add", json!({"term": term, "synonyms": synonyms}))
    }

    pub fn synonyms_remove(&self, term: &str, synonyms: &[String]) -> Result<u64, KbError> {
        let v: Value = self.call_as(
            "synonyms_remove",
            json!({"term": term, "synonyms": synonyms}),
        )?;
        Ok(v["removed"].as_u64().unwrap_or(0))
    }

    pub fn synonyms_list(&self) -> Result<Vec<kbdb::store::synonyms::SynonymEntry>, KbError> {
        self.call_as("synonyms_list", json!({}))
    }

    pub fn status(&self) -> Result<Status, KbError> {
        self.call_as("status", json!({}))
    }

    pub fn check_with_progress(&self, p: &dyn Fn(u64, u64)) -> Result<CheckResult, KbError> {
        self.call_as_progress("check", json!({}), Some(p))
    }

    pub fn gc(&self) -> Result<GcResult, KbError> {
        self.call_as("gc", json!({}))
    }

    pub fn rebuild_with_progress(&self, p: &dyn Fn(u64, u64)) -> Result<RebuildResult, KbError> {
        self.call_as_progress("rebuild", json!({}), Some(p))
    }

    pub fn export_with_progress(
        &self,
        opts: &ExportOptions,
        p: &dyn Fn(u64, u64),
    ) -> Result<ExportResult, KbError> {
        let params = json!({
            "path": absolute(&opts.path)?,
            "with_indexes": opts.with_indexes,
            "force": opts.force,
            "confine_to": opts.confine_to,
        });
        self.call_as_progress("export", params, Some(p))
    }

    pub fn import_with_progress(
        &self,
        path: &Path,
        strict: bool,
        p: &dyn Fn(u64, u64),
    ) -> Result<ImportResult, KbError> {
        self.call_as_progress(
            "import",
            json!({"path": absolute(path)?, "strict": strict}),
            Some(p),
        )
    }

    /// The database folder (canonical).
    pub fn dir(&self) -> PathBuf {
        match self {
            Backend::Embedded(kb) => kb.dir().to_path_buf(),
            Backend::Daemon(c) => PathBuf::from(&c.borrow().info.db),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every method the CLI calls by name is an operation of the table (a misspelt name would
    /// only fail at run time, as an unknown method).
    #[test]
    fn the_cli_calls_only_methods_of_the_table() {
        let sources = [
            include_str!("backend.rs"),
            include_str!("collections.rs"),
            include_str!("commands.rs"),
            include_str!("learn.rs"),
            include_str!("maintenance.rs"),
            include_str!("mod.rs"),
            include_str!("recall.rs"),
            include_str!("skills.rs"),
            include_str!("sync.rs"),
        ];
        let call = regex::Regex::new(
            r#"\b(?:call_as|call_json|call_progress|call_as_progress)(?:::<[^>]*>)?\(\s*"([a-z_]+)""#,
        )
        .unwrap();
        let mut seen = 0;
        for src in sources {
            for c in call.captures_iter(src) {
                let m = &c[1];
                assert!(
                    kbdb::daemon::operations::by_method(m).is_some(),
                    "{m}: not in the table of operations"
                );
                seen += 1;
            }
        }
        assert!(
            seen >= 30,
            "only {seen} calls found: has the pattern gone stale?"
        );
    }
}
