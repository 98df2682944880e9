//! The document index behind `query`: every document's view — `{id, title, model, meta}` — in
//! memory, so a query over thousands of documents reads no section content and no store rows.
//! It is derived from the `documents` table and follows the change log (`DocumentChanged`,
//! `DocumentRemoved`) like the other derived indexes; a change of the models reassigns every
//! document's model.

use std::collections::BTreeMap;

use redb::{Database, ReadableDatabase, ReadableTable};
use serde_json::{Map, Value};

use crate::error::Result;
use crate::model::records::{ChangeKind, ChangeRecord, DocumentRecord, decode};
use crate::store::tables::{CHANGES, DOCUMENTS};

/// A document as queries see it.
#[derive(Debug, Clone)]
pub struct DocEntry {
    /// The document's model (also in the view), for filtering without touching the view.
    pub model: String,
    pub title: Option<String>,
    pub meta: Map<String, Value>,
    /// `{id, title, model, meta}`.
    pub view: Value,
}

/// Assigns a model name to a document (from the loaded models).
pub type ModelOf<'a> = dyn Fn(&str, &Map<String, Value>) -> String + 'a;

#[derive(Debug, Default)]
pub struct DocIndex {
    applied_seq: u64,
    /// The models' generation the views were built with.
    pub models_generation: u64,
    pub docs: BTreeMap<String, DocEntry>,
}

fn entry(docid: &str, rec: &DocumentRecord, model_of: &ModelOf<'_>) -> DocEntry {
    let meta = match rec.metadata_value() {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let model = model_of(docid, &meta);
    DocEntry {
        view: serde_json::json!({
            "id": docid,
            "title": rec.title,
            "model": model,
            "meta": Value::Object(meta.clone()),
        }),
        model,
        title: rec.title.clone(),
        meta,
    }
}

impl DocIndex {
    /// Load every document.
    pub fn load(db: &Database, generation: u64, model_of: &ModelOf<'_>) -> Result<DocIndex> {
        let txn = db.begin_read()?;
        let changes = txn.open_table(CHANGES)?;
        let applied_seq = changes.last()?.map(|(k, _)| k.value()).unwrap_or(0);
        let documents = txn.open_table(DOCUMENTS)?;
        let mut docs = BTreeMap::new();
        for row in documents.iter()? {
            let (k, v) = row?;
            let rec: DocumentRecord = decode("documents", k.value(), v.value())?;
            docs.insert(k.value().to_string(), entry(k.value(), &rec, model_of));
        }
        Ok(DocIndex {
            applied_seq,
            models_generation: generation,
            docs,
        })
    }

    /// Apply the document changes committed since the last call.
    pub fn catch_up(&mut self, db: &Database, model_of: &ModelOf<'_>) -> Result<()> {
        let txn = db.begin_read()?;
        let changes = txn.open_table(CHANGES)?;
        let documents = txn.open_table(DOCUMENTS)?;
        let mut touched = std::collections::BTreeSet::new();
        let mut last = self.applied_seq;
        for row in changes.range(self.applied_seq + 1..)? {
            let (k, v) = row?;
            last = k.value();
            let c: ChangeRecord = decode("changes", &last.to_string(), v.value())?;
            if matches!(
                c.kind,
                ChangeKind::DocumentChanged | ChangeKind::DocumentRemoved
            ) {
                touched.insert(c.id);
            }
        }
        for docid in touched {
            match documents.get(docid.as_str())? {
                Some(v) => {
                    let rec: DocumentRecord = decode("documents", &docid, v.value())?;
                    let e = entry(&docid, &rec, model_of);
                    self.docs.insert(docid, e);
                }
                None => {
                    self.docs.remove(&docid);
                }
            }
        }
        self.applied_seq = last;
        Ok(())
    }
}
