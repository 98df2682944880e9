//! The document index behind `query`: every document's view — `{id, title, model, meta}` — in
//! memory, so a query over thousands of documents reads no section content and no store rows.
//! It is derived from the `documents` table and follows the change log (`DocumentChanged`,
//! `DocumentRemoved`) like the other derived indexes; a change of the models reassigns every
//! document's model. It also keeps the documents ordered by `updated_at` (the web page's
//! listing reads one page of it) and, once asked, every document's validation
//! ([`Validations`]), brought up to date for the documents the change log names.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, OnceLock};

use redb::{Database, ReadableDatabase, ReadableTable};
use serde_json::{Map, Value};

use super::filter::Doc;
use super::validations::Validations;
use crate::error::Result;
use crate::store::tables::{CHANGES, DOCUMENTS};
use crate::types::records::{ChangeKind, ChangeRecord, DocumentRecord, decode};

/// Metadata maps up to this size are searched by a linear scan (keys compare by length first,
/// and their bytes are shared, so a scan touches one allocation).
const LINEAR_SCAN_MAX: usize = 32;

/// A document as queries see it: the parts of its view `{id, title, model, meta}`, laid out
/// for scanning thousands of documents per query. A JSON view keeps every field behind a
/// string-keyed map whose keys live in their own allocations, so each lookup chased several
/// cache misses; here the model is a number and the metadata a flat slice whose keys are
/// shared by every document. [`DocEntry::view`] builds the JSON view of a returned document.
#[derive(Debug, Clone)]
pub struct DocEntry {
    /// The model's number in [`DocIndex`] (filtering by model compares numbers).
    model_ix: u32,
    /// The view's `id` (a string), `title` (a string or null) and `model` (a string).
    pub id: Value,
    pub title: Value,
    pub model: Value,
    /// The metadata, sorted by key (the order of a JSON map); keys are interned.
    meta: Box<[(Arc<str>, Value)]>,
    /// The metadata as one JSON object, built when a query names `meta` itself.
    meta_value: OnceLock<Box<Value>>,
    /// The record's `updated_at` (RFC 3339 UTC, so the text sorts as the time does).
    pub updated_at: String,
    /// How many sections the document lists.
    pub sections: usize,
}

impl DocEntry {
    pub fn id_str(&self) -> &str {
        self.id.as_str().unwrap_or_default()
    }

    pub fn title_str(&self) -> Option<&str> {
        self.title.as_str()
    }

    pub fn model_name(&self) -> &str {
        self.model.as_str().unwrap_or_default()
    }

    /// The metadata as a JSON map.
    pub fn meta_map(&self) -> Map<String, Value> {
        self.meta
            .iter()
            // Not `k.to_string()`: on an `Arc<str>` that goes through the formatter.
            .map(|(k, v)| (String::from(&**k), v.clone()))
            .collect()
    }

    /// `{id, title, model, meta}`. Built field by field: `json!` would serialise each value
    /// into a second copy.
    pub fn view(&self) -> Value {
        let mut view = Map::new();
        view.insert("id".into(), self.id.clone());
        view.insert("title".into(), self.title.clone());
        view.insert("model".into(), self.model.clone());
        view.insert("meta".into(), Value::Object(self.meta_map()));
        Value::Object(view)
    }
}

impl Doc for DocEntry {
    type Meta<'a> = &'a DocEntry;

    #[inline]
    fn id(&self) -> Option<&Value> {
        Some(&self.id)
    }

    #[inline]
    fn title(&self) -> Option<&Value> {
        Some(&self.title)
    }

    #[inline]
    fn model(&self) -> Option<&Value> {
        Some(&self.model)
    }

    #[inline]
    fn meta(&self) -> &DocEntry {
        self
    }

    #[inline]
    fn meta_field<'a>(e: Self::Meta<'a>, key: &str) -> Option<&'a Value> {
        if e.meta.len() <= LINEAR_SCAN_MAX {
            e.meta
                .iter()
                // Length and first byte first: most keys differ there, without a `memcmp`.
                .find(|(k, _)| {
                    k.len() == key.len()
                        && k.as_bytes().first() == key.as_bytes().first()
                        && **k == *key
                })
                .map(|(_, v)| v)
        } else {
            e.meta
                .binary_search_by(|(k, _)| (**k).cmp(key))
                .ok()
                .map(|i| &e.meta[i].1)
        }
    }

    fn meta_value<'a>(e: Self::Meta<'a>) -> Option<&'a Value> {
        Some(
            e.meta_value
                .get_or_init(|| Box::new(Value::Object(e.meta_map()))),
        )
    }
}

/// Assigns a model name to a document (from the loaded models).
pub type ModelOf<'a> = dyn Fn(&str, &Map<String, Value>) -> String + 'a;

#[derive(Debug, Default)]
pub struct DocIndex {
    applied_seq: u64,
    /// The models' generation the views were built with.
    pub models_generation: u64,
    /// Every document by docid. Changed only through [`DocIndex::put`] and
    /// [`DocIndex::forget`], which keep `by_updated` in step.
    pub docs: BTreeMap<String, DocEntry>,
    /// (`updated_at`, docid) of every document, newest first (ties by docid).
    by_updated: BTreeSet<(Reverse<String>, String)>,
    /// Every document's validation, once asked for (`Kb::validation_report`); dropped with the
    /// index when the models change.
    pub validations: Option<Validations>,
    /// Model names by number ([`DocEntry::model_ix`]).
    model_names: Vec<String>,
    /// Metadata keys, shared by the documents that have them (never pruned: bounded by the
    /// distinct keys seen since the index was loaded).
    keys: HashSet<Arc<str>>,
}

impl DocIndex {
    /// Load every document.
    pub fn load(db: &Database, generation: u64, model_of: &ModelOf<'_>) -> Result<DocIndex> {
        let txn = db.begin_read()?;
        let changes = txn.open_table(CHANGES)?;
        let applied_seq = changes.last()?.map(|(k, _)| k.value()).unwrap_or(0);
        let documents = txn.open_table(DOCUMENTS)?;
        let mut ix = DocIndex {
            applied_seq,
            models_generation: generation,
            ..DocIndex::default()
        };
        for row in documents.iter()? {
            let (k, v) = row?;
            let rec: DocumentRecord = decode("documents", k.value(), v.value())?;
            let e = ix.entry(k.value(), &rec, model_of);
            ix.put(k.value(), e);
        }
        Ok(ix)
    }

    /// Apply the document changes committed since the last call.
    pub fn catch_up(&mut self, db: &Database, model_of: &ModelOf<'_>) -> Result<()> {
        let txn = db.begin_read()?;
        let changes = txn.open_table(CHANGES)?;
        let documents = txn.open_table(DOCUMENTS)?;
        let mut touched = BTreeSet::new();
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
            let existed = self.docs.contains_key(&docid);
            let exists = match documents.get(docid.as_str())? {
                Some(v) => {
                    let rec: DocumentRecord = decode("documents", &docid, v.value())?;
                    let e = self.entry(&docid, &rec, model_of);
                    self.put(&docid, e);
                    true
                }
                None => {
                    self.forget(&docid);
                    false
                }
            };
            if let Some(v) = self.validations.as_mut() {
                v.touched(&docid, existed != exists);
            }
        }
        self.applied_seq = last;
        Ok(())
    }

    /// Add or replace a document's entry.
    fn put(&mut self, docid: &str, e: DocEntry) {
        self.by_updated
            .insert((Reverse(e.updated_at.clone()), docid.to_string()));
        if let Some(old) = self.docs.insert(docid.to_string(), e)
            && old.updated_at != self.docs[docid].updated_at
        {
            self.by_updated
                .remove(&(Reverse(old.updated_at), docid.to_string()));
        }
    }

    /// Remove a document's entry.
    fn forget(&mut self, docid: &str) {
        if let Some(old) = self.docs.remove(docid) {
            self.by_updated
                .remove(&(Reverse(old.updated_at), docid.to_string()));
        }
    }

    /// The documents most recently updated first (ties by docid), from the `offset`-th on:
    /// reads only what it returns, whatever the number of documents before them.
    pub fn newest_first(&self, offset: usize) -> impl Iterator<Item = &DocEntry> {
        self.by_updated
            .iter()
            .skip(offset)
            .filter_map(|(_, docid)| self.docs.get(docid))
    }

    /// The documents of `model` (every document when `None`; none when no document has it),
    /// in docid order. Names compare ignoring ASCII case.
    pub fn of_model<'a>(&'a self, model: Option<&str>) -> impl Iterator<Item = &'a DocEntry> {
        // Which model numbers pass: the same test for every document, done once per model.
        let wanted: Option<Vec<bool>> = model.map(|m| {
            self.model_names
                .iter()
                .map(|n| n.eq_ignore_ascii_case(m))
                .collect()
        });
        self.docs
            .values()
            .filter(move |e| wanted.as_ref().is_none_or(|w| w[e.model_ix as usize]))
    }

    fn entry(&mut self, docid: &str, rec: &DocumentRecord, model_of: &ModelOf<'_>) -> DocEntry {
        let meta = match rec.metadata_value() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let model = model_of(docid, &meta);
        let mut e = self.make_entry(docid, rec.title.clone(), model, meta);
        e.updated_at = rec.updated_at.clone();
        e.sections = rec.kbids.len();
        e
    }

    fn make_entry(
        &mut self,
        docid: &str,
        title: Option<String>,
        model: String,
        meta: Map<String, Value>,
    ) -> DocEntry {
        let model_ix = match self.model_names.iter().position(|n| *n == model) {
            Some(i) => i,
            None => {
                self.model_names.push(model.clone());
                self.model_names.len() - 1
            }
        };
        DocEntry {
            model_ix: model_ix as u32,
            id: Value::String(docid.to_string()),
            title: title.map_or(Value::Null, Value::String),
            model: Value::String(model),
            meta: meta.into_iter().map(|(k, v)| (self.intern(k), v)).collect(),
            meta_value: OnceLock::new(),
            updated_at: String::new(),
            sections: 0,
        }
    }

    fn intern(&mut self, key: String) -> Arc<str> {
        if let Some(k) = self.keys.get(key.as_str()) {
            return k.clone();
        }
        let k: Arc<str> = key.into();
        self.keys.insert(k.clone());
        k
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::collections::filter::{self as query, QuerySpec};

    /// An index of `docs` (docid, title, model, meta) and the same documents as JSON views.
    fn index(docs: &[(&str, Option<&str>, &str, Value)]) -> (DocIndex, Vec<Value>) {
        let mut ix = DocIndex::default();
        for (docid, title, model, meta) in docs {
            let Value::Object(meta) = meta.clone() else {
                panic!("meta must be an object");
            };
            let e = ix.make_entry(docid, title.map(str::to_string), model.to_string(), meta);
            ix.put(docid, e);
        }
        let views = ix.docs.values().map(DocEntry::view).collect();
        (ix, views)
    }

    #[test]
    fn entries_answer_queries_as_their_views_do() {
        let mut big = Map::new();
        for i in 0..50 {
            big.insert(format!("k{i:02}"), json!(i));
        }
        big.insert("status".into(), json!("open"));
        let (ix, views) = index(&[
            (
                "stories/a",
                Some("A"),
                "Story",
                json!({"status": "open", "points": 3, "labels": ["x", "y"], "team": {"name": "t1"}}),
            ),
            (
                "stories/b",
                None,
                "Story",
                json!({"status": "done", "points": 5.0, "labels": [], "due": null}),
            ),
            ("stories/c", Some("C"), "Story", Value::Object(big)),
            (
                "epics/e",
                Some("E"),
                "Epic",
                json!({"status": "open", "points": 1}),
            ),
            ("notes/n", Some("N"), "Base", json!({})),
            (
                "stories/d",
                Some("D"),
                "Story",
                json!({"0": "zero", "points": 3}),
            ),
        ]);
        let e = &ix.docs["stories/a"];
        assert_eq!(
            e.view(),
            json!({"id": "stories/a", "title": "A", "model": "Story", "meta": {
                "labels": ["x", "y"], "points": 3, "status": "open", "team": {"name": "t1"}}})
        );
        assert_eq!(ix.docs["stories/b"].view()["title"], Value::Null);
        // Keys are shared between documents.
        let key = |docid: &str, k: &str| {
            ix.docs[docid]
                .meta
                .iter()
                .find(|(x, _)| &**x == k)
                .map(|(x, _)| x.clone())
                .unwrap()
        };
        assert!(Arc::ptr_eq(
            &key("stories/a", "status"),
            &key("epics/e", "status")
        ));
        let queries = [
            json!({}),
            json!({"model": "story"}),
            json!({"model": "STORY", "where": {"status": "open"}}),
            json!({"model": "Nope"}),
            json!({"where": {"points": {"$gte": 3}}, "sort": ["-points", "id"]}),
            json!({"where": {"labels": "x"}}),
            json!({"where": {"meta.team.name": "t1"}}),
            json!({"where": {"k49": 49, "k00": {"$lt": 1}}}),
            json!({"where": {"due": {"$exists": false}}, "sort": "-title"}),
            json!({"where": {"meta": {"$eq": {}}}}),
            json!({"where": {"meta": {"$exists": true}}, "sort": ["meta", "-id"]}),
            json!({"where": {"0": "zero"}}),
            json!({"where": {"title": {"$regex": "^[AC]$"}}}),
            json!({"where": {"id": {"$startsWith": "stories/"}}, "limit": 2, "offset": 1}),
            json!({"where": {"model": "Epic"}}),
            json!({"sort": "title", "method": "last"}),
            json!({"sort": "-points", "method": "first", "offset": 2}),
            json!({"model": "Story", "method": "count"}),
        ];
        for q in queries {
            let spec = QuerySpec::from_json(&q).unwrap();
            let got = query::run_of_model(ix.of_model(spec.model.as_deref()), &spec);
            let want = query::run(&views, &spec);
            let got_views: Vec<Value> = got.docs().iter().map(|e| e.view()).collect();
            let want_views: Vec<Value> = want.docs().iter().map(|v| (*v).clone()).collect();
            assert_eq!(got_views, want_views, "{q}");
            assert_eq!(got.total_matched(), want.total_matched(), "{q}");
        }
    }
}
