//! Collections: models kept in the store, the document index, and every collection
//! operation the CLI and the MCP server expose (docs/collections.md).

use super::Kb;
use crate::collections::doc_index::{DocEntry, DocIndex};
use crate::collections::edit::{DocEdit, EditResult};
use crate::collections::filter::{self as query, QueryOutcome, QuerySpec};
use crate::collections::schema::{self as model, ModelSet, Validation};
use crate::collections::state::*;
use crate::collections::validations::{ValidationReport, Validations};
use crate::error::{KbError, Result};
use crate::store::tables::{COLLECTION, CONTENT, DOCUMENTS, SECTIONS};
use crate::types::records::{DocumentRecord, SectionRecord, decode};
use crate::writes::WriteOp;
use redb::ReadableDatabase;
use serde_json::{Map, Value, json};
use std::sync::{Arc, MutexGuard};

impl Kb {
    /// The loaded models (only `Base` until `models_load`).
    pub fn models(&self) -> Result<Arc<ModelSet>> {
        if let Some(m) = self.collection.models.read().map_err(poisoned)?.as_ref() {
            return Ok(m.clone());
        }
        let text = self.models_toml()?;
        let set = match text {
            Some(t) => ModelSet::from_toml(&t).map_err(|e| KbError::Corrupt {
                table: "collection",
                key: MODELS_KEY.into(),
                detail: e.to_string(),
            })?,
            None => ModelSet::new(),
        };
        let set = Arc::new(set);
        *self.collection.models.write().map_err(poisoned)? = Some(set.clone());
        Ok(set)
    }

    /// The TOML text of the loaded models (None: never loaded).
    pub fn models_toml(&self) -> Result<Option<String>> {
        let txn = self.db()?.begin_read()?;
        let t = txn.open_table(COLLECTION)?;
        Ok(t.get(MODELS_KEY)?.map(|g| g.value().to_string()))
    }

    /// Replace the models with those of `toml_text` (checked first: an invalid file changes
    /// nothing). Returns the model names and how many documents each now holds.
    pub fn models_load(&self, toml_text: &str) -> Result<Value> {
        let set = ModelSet::from_toml(toml_text).map_err(|e| KbError::invalid("models", e))?;
        self.write_engine(crate::writes::EngineOp::set_models(toml_text.to_string()))?;
        *self.collection.models.write().map_err(poisoned)? = Some(Arc::new(set));
        self.collection
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inspect()
    }

    /// The document index, loaded on first use and caught up with the store and the models.
    pub(super) fn doc_index(&self) -> Result<(MutexGuard<'_, Option<DocIndex>>, Arc<ModelSet>)> {
        let models = self.models()?;
        let generation = self
            .collection
            .generation
            .load(std::sync::atomic::Ordering::SeqCst);
        let model_of =
            |docid: &str, meta: &Map<String, Value>| models.model_for(docid, meta).name.clone();
        let mut guard = self.collection.index.lock().map_err(poisoned)?;
        match guard.as_mut() {
            Some(ix) if ix.models_generation == generation => {
                ix.catch_up(&*self.db()?, &model_of)?
            }
            _ => *guard = Some(DocIndex::load(&*self.db()?, generation, &model_of)?),
        }
        Ok((guard, models))
    }

    pub(super) fn read_stored_doc(&self, docid: &str) -> Result<StoredDoc> {
        let docid = &*crate::types::validate::docid(docid)?;
        let txn = self.db()?.begin_read()?;
        let docs = txn.open_table(DOCUMENTS)?;
        let rec: DocumentRecord = match docs.get(docid)? {
            Some(v) => decode("documents", docid, v.value())?,
            None => return Err(KbError::NotFound(format!("Document not found: {docid}"))),
        };
        let sections_t = txn.open_table(SECTIONS)?;
        let content_t = txn.open_table(CONTENT)?;
        let mut sections = Vec::with_capacity(rec.kbids.len());
        for kbid in &rec.kbids {
            let Some(s) = sections_t.get(kbid.as_str())? else {
                continue;
            };
            let s: SectionRecord = decode("sections", kbid, s.value())?;
            if s.section_type.starts_with("image/") {
                continue;
            }
            let text = crate::store::txn::record_content_unverified(&content_t, &s)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let level = text
                .lines()
                .next()
                .and_then(crate::text::markdown::atx_heading)
                .map(|(l, _)| l)
                .unwrap_or(0);
            sections.push((level, s.title.unwrap_or_default(), text));
        }
        let meta = match rec.metadata_value() {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        Ok(StoredDoc {
            rec,
            meta,
            sections,
        })
    }

    /// `query`: documents by model and metadata (docs/collections.md). `input` is the tool's
    /// JSON (`model`, `where`, `sort`, `limit`, `offset`, `select`, `method`).
    pub fn query(&self, input: &Value) -> Result<Value> {
        let mut spec = QuerySpec::from_json(input).map_err(|e| KbError::InvalidInput {
            message: e.to_string(),
            field: e.field,
        })?;
        if spec.limit.is_none() && spec.method == query::Method::FetchAll {
            spec.limit = Some(DEFAULT_QUERY_LIMIT);
        }
        let (guard, models) = self.doc_index()?;
        known_model(&models, spec.model.as_deref())?;
        let ix = guard.as_ref().expect("loaded above");
        let outcome = query::run_of_model(ix.of_model(spec.model.as_deref()), &spec);
        let select = input.get("select").cloned().unwrap_or(Value::Null);
        // Only the returned page becomes JSON.
        let lean = |e: &DocEntry| -> Result<Value> { self.shape_result(e, &select, &models, ix) };
        // The results are moved in after `json!`, which would serialise them into a copy.
        Ok(match outcome {
            QueryOutcome::Count(n) => json!({ "count": n }),
            QueryOutcome::Docs {
                docs,
                total_matched,
            } => match spec.method {
                query::Method::First | query::Method::Last => {
                    let mut out = json!({ "total": total_matched });
                    out["result"] = docs.first().map(|e| lean(e)).transpose()?.into();
                    out
                }
                _ => {
                    let mut out = json!({
                        "has_more": spec.offset + docs.len() < total_matched,
                        "total": total_matched,
                        "offset": spec.offset,
                        "limit": spec.limit,
                    });
                    out["results"] = docs.iter().map(|e| lean(e)).collect::<Result<_>>()?;
                    out
                }
            },
        })
    }

    /// A query result: `{id, title, model, meta}`, plus `sections` and `related` when selected.
    pub(super) fn shape_result(
        &self,
        entry: &DocEntry,
        select: &Value,
        models: &ModelSet,
        ix: &DocIndex,
    ) -> Result<Value> {
        let mut out = entry.view();
        let wanted = |key: &str| -> Vec<String> {
            select
                .get(key)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (sections, related) = (wanted("sections"), wanted("related"));
        if sections.is_empty() && related.is_empty() {
            return Ok(out);
        }
        let docid = entry.id_str();
        let doc = self.read_stored_doc(docid)?;
        if !sections.is_empty() {
            let mut m = Map::new();
            for want in &sections {
                let hit = doc.find_heading(want);
                m.insert(
                    want.clone(),
                    hit.map(|i| Value::String(section_body(&doc.section_with_children(i))))
                        .unwrap_or(Value::Null),
                );
            }
            out["sections"] = Value::Object(m);
        }
        if !related.is_empty() {
            let inputs = doc.inputs();
            let input = doc.input(docid, &inputs);
            let exists = |d: &str| ix.docs.contains_key(d);
            let rels = model::relationships_of(models, &input, &exists);
            let mut m = Map::new();
            for want in &related {
                let Some(r) = rels.iter().find(|r| r.name.eq_ignore_ascii_case(want)) else {
                    return Err(KbError::invalid(
                        "select.related",
                        format!("{docid} has no relationship {want:?}"),
                    ));
                };
                let items: Vec<Value> = r
                    .items
                    .iter()
                    .map(|i| match ix.docs.get(&i.docid) {
                        Some(e) => e.view(),
                        None => json!({ "id": i.docid, "exists": false }),
                    })
                    .collect();
                m.insert(want.clone(), Value::Array(items));
            }
            out["related"] = Value::Object(m);
        }
        Ok(out)
    }

    /// `validate`: one docid, every document of a model, or all (`None` / `"all"`).
    pub fn validate_documents(&self, target: Option<&str>) -> Result<Value> {
        let (guard, models) = self.doc_index()?;
        let ix = guard.as_ref().expect("loaded above");
        let target = target.map(str::trim).filter(|t| !t.is_empty());
        let docids: Vec<String> = match target {
            None | Some("all") => ix.docs.keys().cloned().collect(),
            Some(t) if ix.docs.contains_key(t) => vec![t.to_string()],
            Some(t) => match models.get(t) {
                Some(m) => ix
                    .docs
                    .iter()
                    .filter(|(_, e)| e.model_name() == m.name)
                    .map(|(k, _)| k.clone())
                    .collect(),
                None => {
                    return Err(KbError::NotFound(format!(
                        "{t:?} is neither a document nor a model (models: {})",
                        model_names(&models)
                    )));
                }
            },
        };
        let exists = |d: &str| ix.docs.contains_key(d);
        let mut results: Vec<Validation> = Vec::new();
        for docid in docids.iter().take(MAX_VALIDATE) {
            results.push(self.validate_stored(&models, docid, &exists)?);
        }
        let invalid = results.iter().filter(|r| !r.valid).count();
        if target.is_some_and(|t| ix.docs.contains_key(t))
            && let Some(one) = results.pop()
        {
            return Ok(serde_json::to_value(one).expect("serialisable"));
        }
        Ok(json!({
            "checked": results.len(),
            "valid": results.len() - invalid,
            "invalid": invalid,
            "truncated": docids.len() > MAX_VALIDATE,
            "results": results,
        }))
    }

    /// The validation of the stored document `docid` against `models`, `exists` telling which
    /// docids its relationships may name (the one way `validate` and the web page's report
    /// validate a document).
    fn validate_stored(
        &self,
        models: &ModelSet,
        docid: &str,
        exists: &dyn Fn(&str) -> bool,
    ) -> Result<Validation> {
        let doc = self.read_stored_doc(docid)?;
        let inputs = doc.inputs();
        Ok(model::validate(models, &doc.input(docid, &inputs), exists))
    }

    /// The web page's validation view: the counts over every document and the first `limit`
    /// documents with errors or warnings, by docid. The results are kept with the document index
    /// and validated again only for the documents the change log names since the last call (and
    /// those whose relationships named a docid created or removed since): the first call
    /// validates every document, later ones only what changed (docs/web.md).
    pub fn validation_report(&self, limit: usize) -> Result<ValidationReport> {
        let (mut guard, models) = self.doc_index()?;
        let ix = guard.as_mut().expect("loaded above");
        let mut v = match ix.validations.take() {
            Some(v) => v,
            None => Validations::all_stale(ix.docs.keys()),
        };
        let ix: &DocIndex = ix;
        let mut revalidated = 0;
        let done = (|| -> Result<()> {
            while let Some(docid) = v.stale.pop_first() {
                if !ix.docs.contains_key(&docid) {
                    v.set(&docid, None, Vec::new());
                    continue;
                }
                let asked = std::cell::RefCell::new(Vec::new());
                let exists = |d: &str| {
                    asked.borrow_mut().push(d.to_string());
                    ix.docs.contains_key(d)
                };
                let result = match self.validate_stored(&models, &docid, &exists) {
                    Ok(r) => r,
                    // Removed since the index caught up: the change log will say so.
                    Err(KbError::NotFound(_)) => {
                        v.set(&docid, None, Vec::new());
                        continue;
                    }
                    Err(e) => {
                        v.stale.insert(docid);
                        return Err(e);
                    }
                };
                let mut asked = asked.into_inner();
                asked.sort_unstable();
                asked.dedup();
                v.set(&docid, Some(result), asked);
                revalidated += 1;
            }
            Ok(())
        })();
        let report = done.map(|()| {
            let invalid = v.results.values().filter(|r| !r.valid).count();
            let mut with_problems = 0;
            let mut problems = Vec::new();
            for r in v.results.values() {
                if !r.errors.is_empty() || !r.warnings.is_empty() {
                    with_problems += 1;
                    if problems.len() < limit {
                        problems.push(r.clone());
                    }
                }
            }
            ValidationReport {
                checked: v.results.len(),
                valid: v.results.len() - invalid,
                invalid,
                with_problems,
                revalidated,
                problems,
            }
        });
        guard.as_mut().expect("loaded above").validations = Some(v);
        report
    }

    /// Apply one document edit (a write of its own, group-committed by the daemon).
    pub fn edit_document(&self, docid: &str, edit: DocEdit) -> Result<EditResult> {
        let mut out = self.write_group(vec![WriteOp::EditDocument {
            docid: docid.to_string(),
            edit,
        }])?;
        crate::writes::outcome(out.pop().expect("one result per write")?)
    }

    /// The write a `create_document` request becomes: the docid (given, or the model's folder
    /// plus the title's slug) and the scaffolded document (docs/collections.md).
    pub fn create_document_op(&self, input: &CreateDocument) -> Result<WriteOp> {
        let models = self.models()?;
        let model = models.get(&input.model).ok_or_else(|| {
            KbError::invalid(
                "model",
                format!(
                    "no model {:?}; the models are: {}",
                    input.model,
                    model_names(&models)
                ),
            )
        })?;
        let title = input.title.trim();
        if title.is_empty() {
            return Err(KbError::invalid("title", "must not be empty"));
        }
        let docid = match &input.docid {
            Some(d) => d.clone(),
            None => {
                let slug = crate::text::markers::slug(title);
                if slug.is_empty() {
                    return Err(KbError::invalid(
                        "title",
                        "has no letters or digits to make a docid from; give docid",
                    ));
                }
                format!("{}{slug}", model.docid_prefix())
            }
        };
        let (mut meta, scaffold) = model::scaffold(model, title, &input.meta);
        if !model.is_base() && models.model_for(&docid, &meta).name != model.name {
            meta.insert("_model".into(), Value::String(model.name.clone()));
        }
        let body = match &input.content {
            Some(c) if c.trim_start().starts_with('#') => c.clone(),
            Some(c) => format!("# {title}\n\n{c}"),
            None => scaffold,
        };
        Ok(WriteOp::EditDocument {
            docid,
            edit: DocEdit::Create {
                title: title.to_string(),
                metadata: meta,
                body,
            },
        })
    }

    /// `create_document`, then its validation.
    pub fn create_document(&self, input: &CreateDocument) -> Result<Value> {
        let WriteOp::EditDocument { docid, edit } = self.create_document_op(input)? else {
            unreachable!("create_document_op makes an edit");
        };
        let r = self.edit_document(&docid, edit)?;
        self.edit_answer(r)
    }

    /// An edit's result with the document's validation (edits save anyway: validation guards,
    /// it does not gate).
    pub fn edit_answer(&self, r: EditResult) -> Result<Value> {
        let mut out = serde_json::to_value(&r).expect("serialisable");
        if r.document.is_some() {
            out["validation"] = self.validate_documents(Some(&r.docid))?;
        }
        Ok(out)
    }

    /// Document ids with their model, optionally of one model or under a docid prefix.
    pub fn list_collection(&self, model: Option<&str>, prefix: Option<&str>) -> Result<Value> {
        let prefix = prefix.map(crate::types::validate::docid_prefix);
        let prefix = prefix.as_deref();
        let (guard, models) = self.doc_index()?;
        known_model(&models, model)?;
        let ix = guard.as_ref().expect("loaded above");
        let docs: Vec<Value> = ix
            .docs
            .iter()
            .filter(|(id, e)| {
                prefix.is_none_or(|p| id.starts_with(p))
                    && model.is_none_or(|m| e.model_name().eq_ignore_ascii_case(m))
            })
            .map(|(id, e)| json!({"id": id, "title": e.title, "model": e.model}))
            .collect();
        Ok(json!({ "count": docs.len(), "documents": docs }))
    }

    /// `inspect`: models with their document counts, totals.
    pub fn inspect(&self) -> Result<Value> {
        let (guard, models) = self.doc_index()?;
        let ix = guard.as_ref().expect("loaded above");
        let count = |name: &str| ix.docs.values().filter(|e| e.model_name() == name).count();
        let list: Vec<Value> = models
            .all()
            .map(|m| {
                json!({
                    "name": m.name,
                    "prefix": m.prefix,
                    "pattern": m.pattern,
                    "description": m.description,
                    "fields": m.fields.len(),
                    "sections": m.sections.len(),
                    "relationships": m.relationships.len(),
                    "documents": count(&m.name),
                })
            })
            .collect();
        Ok(json!({
            "database": self.dir.display().to_string(),
            "models": list,
            "totalDocuments": ix.docs.len(),
            "modelsLoaded": !models.is_empty(),
        }))
    }

    /// The schema resource: every model with fields, sections, relationships and counts.
    pub fn schema(&self) -> Result<Value> {
        let (guard, models) = self.doc_index()?;
        let ix = guard.as_ref().expect("loaded above");
        let count = |name: &str| ix.docs.values().filter(|e| e.model_name() == name).count();
        let mut v = model::schema_json(&models, &count);
        v["name"] = json!(
            self.dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        );
        v["rootPath"] = json!(self.dir.display().to_string());
        Ok(v)
    }

    /// One model's details for `get_model_info`, with an example document when one exists.
    pub fn model_info(&self, name: &str) -> Result<Value> {
        let schema = self.schema()?;
        let models = self.models()?;
        let m = models.get(name).ok_or_else(|| {
            KbError::NotFound(format!(
                "no model {name:?}; the models are: {}",
                model_names(&models)
            ))
        })?;
        let mut info = schema["models"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == json!(m.name)).cloned())
            .unwrap_or(Value::Null);
        let (guard, _) = self.doc_index()?;
        let example = guard.as_ref().and_then(|ix| {
            ix.docs
                .iter()
                .find(|(_, e)| e.model_name() == m.name)
                .map(|(id, _)| id.clone())
        });
        drop(guard);
        if let Some(id) = example {
            info["example"] = self.document_json(&id)?;
        }
        info["createPrompt"] = json!(model::create_prompt(m, "<title>"));
        Ok(info)
    }

    /// The table of contents: documents grouped by model, as markdown.
    pub fn toc(&self) -> Result<String> {
        let (guard, models) = self.doc_index()?;
        let ix = guard.as_ref().expect("loaded above");
        let mut out = String::from("# Table of contents\n");
        for m in models.all() {
            let docs: Vec<(&String, &DocEntry)> = ix
                .docs
                .iter()
                .filter(|(_, e)| e.model_name() == m.name)
                .collect();
            if docs.is_empty() {
                continue;
            }
            out.push_str(&format!("\n## {} ({})\n\n", m.name, docs.len()));
            for (id, e) in docs {
                out.push_str(&format!(
                    "- [{}](kbdb://document/{id}) `{id}`\n",
                    e.title_str().unwrap_or(id)
                ));
            }
        }
        Ok(out)
    }

    /// MODELS.md: the models described.
    pub fn models_summary(&self) -> Result<String> {
        Ok(model::summary_markdown(self.models()?.as_ref()))
    }

    /// The primer (`teach`, `read_me`): how to work with this collection, its models and
    /// contents.
    pub fn primer(&self) -> Result<String> {
        let models = self.models()?;
        Ok(format!(
            "{}\n\n{}\n\n{}\n\n{}",
            PRIMER,
            model::summary_markdown(&models),
            model::query_guide(&models),
            self.toc()?
        ))
    }

    /// A document for reading: id, title, slug, meta, content (with its front matter
    /// rendered out), outline and model.
    pub fn document_json(&self, docid: &str) -> Result<Value> {
        let docid = &*crate::types::validate::docid(docid)?;
        let doc = self.read_stored_doc(docid)?;
        let models = self.models()?;
        let model = models.model_for(docid, &doc.meta).name.clone();
        let outline = doc
            .sections
            .iter()
            .filter(|(l, _, _)| *l > 0)
            .map(|(l, h, _)| format!("{}- {h}", "  ".repeat(*l as usize - 1)))
            .collect::<Vec<_>>()
            .join("\n");
        Ok(json!({
            "id": docid,
            "title": doc.rec.title,
            "slug": docid.rsplit('/').next().unwrap_or(docid),
            "meta": doc.meta,
            "content": doc.markdown(),
            "outline": outline,
            "model": model,
        }))
    }

    /// The typed instance: the document with its sections by heading, relationships and
    /// validation (`kbdb://models/{model}/{docid}`).
    pub fn model_instance(&self, model_name: &str, docid: &str) -> Result<Value> {
        let docid = &*crate::types::validate::docid(docid)?;
        let mut v = self.document_json(docid)?;
        if !v["model"]
            .as_str()
            .is_some_and(|m| m.eq_ignore_ascii_case(model_name))
        {
            return Err(KbError::NotFound(format!(
                "{docid} is a {} document, not {model_name}",
                v["model"].as_str().unwrap_or("?")
            )));
        }
        let doc = self.read_stored_doc(docid)?;
        let (guard, models) = self.doc_index()?;
        let ix = guard.as_ref().expect("loaded above");
        let inputs = doc.inputs();
        let input = doc.input(docid, &inputs);
        let exists = |d: &str| ix.docs.contains_key(d);
        let mut sections = Map::new();
        for (i, (l, h, _)) in doc.sections.iter().enumerate() {
            if *l > 0 && !sections.contains_key(h) {
                let text = section_body(&doc.section_with_children(i));
                sections.insert(h.clone(), Value::String(text));
            }
        }
        v["sections"] = Value::Object(sections);
        v["relationships"] =
            serde_json::to_value(model::relationships_of(&models, &input, &exists))
                .expect("serialisable");
        v["validation"] =
            serde_json::to_value(model::validate(&models, &input, &exists)).expect("serialisable");
        Ok(v)
    }

    /// One section of a document by heading (case-insensitive; the first that matches), with
    /// its sub-sections.
    pub fn section_by_heading(&self, docid: &str, heading: &str) -> Result<String> {
        let docid = &*crate::types::validate::docid(docid)?;
        let doc = self.read_stored_doc(docid)?;
        doc.find_heading(heading)
            .map(|i| doc.section_with_children(i))
            .ok_or_else(|| {
                KbError::NotFound(format!(
                    "{docid} has no section {heading:?}; its headings are: {}",
                    doc.sections
                        .iter()
                        .filter(|(l, _, _)| *l > 0)
                        .map(|(_, h, _)| format!("{h:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
    }

    /// `search_content`: a regex (or plain text) over document bodies, with context.
    pub fn search_content(&self, pattern: &str, model: Option<&str>) -> Result<Value> {
        let re = build_regex("pattern", pattern, false)?;
        let (guard, models) = self.doc_index()?;
        known_model(&models, model)?;
        let ids: Vec<String> = guard
            .as_ref()
            .expect("loaded above")
            .docs
            .iter()
            .filter(|(_, e)| model.is_none_or(|m| e.model_name().eq_ignore_ascii_case(m)))
            .map(|(id, _)| id.clone())
            .collect();
        drop(guard);
        let mut results = Vec::new();
        let mut total = 0usize;
        for id in ids {
            let doc = self.read_stored_doc(&id)?;
            let text = doc.markdown();
            let title = doc.rec.title.clone().unwrap_or_default();
            let mut contexts = Vec::new();
            let in_title = re.is_match(&title);
            for m in re.find_iter(&text).take(5) {
                contexts.push(context_of(&text, m.start(), m.end()));
            }
            let count = re.find_iter(&text).count();
            if count > 0 || in_title {
                total += count;
                results.push(json!({
                    "id": id,
                    "title": doc.rec.title,
                    "matches": count,
                    "titleMatch": in_title,
                    "contexts": contexts,
                }));
                if results.len() >= MAX_TEXT_MATCHES {
                    break;
                }
            }
        }
        Ok(
            json!({ "pattern": pattern, "documents": results.len(), "matches": total, "results": results }),
        )
    }

    /// `text_search`: line-level matches over document texts (a ripgrep-like view: docids
    /// stand for files).
    pub fn text_search(&self, req: &TextSearch) -> Result<Value> {
        let re = build_regex("pattern", &req.pattern, req.ignore_case)?;
        let include = req.include.as_deref().map(glob_regex).transpose()?;
        let exclude = req.exclude.as_deref().map(glob_regex).transpose()?;
        let max = req
            .max_results
            .unwrap_or(MAX_TEXT_MATCHES)
            .min(MAX_TEXT_MATCHES);
        let ids: Vec<String> = {
            let (guard, _) = self.doc_index()?;
            guard
                .as_ref()
                .expect("loaded above")
                .docs
                .keys()
                .filter(|id| include.as_ref().is_none_or(|g| g.is_match(id)))
                .filter(|id| !exclude.as_ref().is_some_and(|g| g.is_match(id)))
                .cloned()
                .collect()
        };
        let mut files = Vec::new();
        let mut matched_lines = 0usize;
        for id in ids {
            if files.len() >= max || (req.expanded && matched_lines >= max) {
                break;
            }
            let text = self.read_stored_doc(&id)?.file_text();
            if !req.expanded {
                if re.is_match(&text) {
                    files.push(Value::String(id));
                }
                continue;
            }
            let mut matches = Vec::new();
            for (n, line) in text.lines().enumerate() {
                if let Some(m) = re.find(line) {
                    matches.push(json!({
                        "line": n + 1,
                        "column": line[..m.start()].chars().count() + 1,
                        "content": crate::text::preview(line, 500),
                    }));
                    matched_lines += 1;
                    if matched_lines >= max {
                        break;
                    }
                }
            }
            if !matches.is_empty() {
                files.push(json!({ "file": id, "matches": matches }));
            }
        }
        Ok(json!({ "files": files, "count": files.len() }))
    }

    /// The documents a search's `model`/`where` allow (None: no collection filter).
    pub(crate) fn collection_filter(
        &self,
        req: &crate::search::SearchRequest,
    ) -> Result<Option<std::collections::HashSet<String>>> {
        if !req.has_collection_filter() {
            return Ok(None);
        }
        let mut q = json!({});
        if let Some(m) = &req.model {
            q["model"] = json!(m);
        }
        if let Some(w) = &req.where_ {
            q["where"] = w.clone();
        }
        let spec = QuerySpec::from_json(&q).map_err(|e| KbError::InvalidInput {
            message: e.to_string(),
            field: e.field,
        })?;
        let (guard, models) = self.doc_index()?;
        known_model(&models, spec.model.as_deref())?;
        let ix = guard.as_ref().expect("loaded above");
        let outcome = query::run_of_model(ix.of_model(spec.model.as_deref()), &spec);
        Ok(Some(
            outcome
                .docs()
                .iter()
                .map(|e| e.id_str().to_string())
                .collect(),
        ))
    }
}
