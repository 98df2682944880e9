//! Every `Kb` operation as a named method with JSON parameters and a JSON result: the one
//! dispatcher behind the daemon's JSON-RPC, the embedded CLI and the MCP server
//! (docs/daemon.md lists the methods).

use std::path::PathBuf;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::KbError;
use crate::model::{LearnRequest, RecallRequest};
use crate::{ExportOptions, Kb, SearchRequest, WriteOp, WriteOutcome};

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    UnknownMethod(String),
    /// The parameters do not have the method's shape (JSON-RPC -32602).
    InvalidParams(String),
    /// The operation itself failed.
    Kb(KbError),
}

impl From<KbError> for CallError {
    fn from(e: KbError) -> Self {
        CallError::Kb(e)
    }
}

pub type CallResult = std::result::Result<Value, CallError>;

/// Methods that change the store through the write group (the daemon batches these).
pub const WRITE_METHODS: &[&str] = &[
    "learn",
    "learn_many",
    "learn_document",
    "unlearn",
    "create_document",
    "update_document",
    "update_section",
    "delete_document",
];

/// Methods that only read: safe to retry after a lost connection.
pub const IDEMPOTENT_METHODS: &[&str] = &[
    "hello",
    "retrieve",
    "recall",
    "content",
    "docs",
    "search",
    "synonyms_list",
    "status",
    "check",
    "skill_list",
    "skills",
    "skill_get",
    "agent_list",
    "agent_get",
    "changes_since",
    "retrieve_many",
    "kbids_with_prefix",
    "models_show",
    "query",
    "validate",
    "list_collection",
    "inspect",
    "schema",
    "model_info",
    "toc",
    "models_summary",
    "primer",
    "query_guide",
    "create_prompt",
    "document_json",
    "model_instance",
    "section_by_heading",
    "search_content",
    "text_search",
    "sync_roots",
    // Not reads, but safe to repeat: a sync makes documents match files, whatever ran before.
    "sync",
];

/// Methods that may run long; clients wait for them without a timeout.
pub const LONG_METHODS: &[&str] = &["check", "gc", "rebuild", "export", "import", "sync"];

/// Folder-sync methods that write in batches through a writer (the daemon's group-commit
/// writer, or `Kb::write_group`): see [`call_sync`].
pub const SYNC_METHODS: &[&str] = &["sync", "sync_forget"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirParam {
    dir: PathBuf,
}

/// Run a folder-sync method, committing its writes through `write`.
pub fn call_sync(
    kb: &Kb,
    method: &str,
    p: Value,
    progress: &dyn Fn(u64, u64),
    write: crate::sync::engine::Writer<'_>,
) -> CallResult {
    match method {
        "sync" => to_value(kb.sync_with(&params(p)?, write, progress)?),
        "sync_forget" => to_value(kb.sync_forget_with(&params::<DirParam>(p)?.dir, write)?),
        other => Err(CallError::UnknownMethod(other.to_string())),
    }
}

pub fn params<T: DeserializeOwned>(p: Value) -> std::result::Result<T, CallError> {
    let p = if p.is_null() { json!({}) } else { p };
    serde_json::from_value(p).map_err(|e| CallError::InvalidParams(e.to_string()))
}

fn to_value<T: serde::Serialize>(v: T) -> CallResult {
    serde_json::to_value(v).map_err(|e| CallError::Kb(KbError::Storage(e.to_string())))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KbidParam {
    kbid: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetrieveParams {
    kbid: Option<String>,
    docid: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallParams {
    kbid: Option<String>,
    kbids: Option<Vec<String>>,
    depth: Option<i64>,
    max_chars: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdsParams {
    ids: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnManyParams {
    pub requests: Vec<LearnRequest>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LearnDocumentParams {
    pub docid: String,
    pub markdown: String,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Tags for every section of the document.
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SynonymsParams {
    term: String,
    #[serde(default)]
    synonyms: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportParams {
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    with_indexes: bool,
    #[serde(default)]
    force: bool,
    #[serde(default)]
    confine_to: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImportParams {
    path: PathBuf,
    #[serde(default)]
    strict: bool,
}

/// One result of a batch: `{"ok": …}` or `{"error": {code, message, field?}}`.
pub fn item_result<T: serde::Serialize>(r: crate::Result<T>) -> Value {
    match r {
        Ok(v) => json!({ "ok": v }),
        Err(e) => json!({ "error": error_object(&e) }),
    }
}

/// The wire form of an error: `{code, message, field?}`.
pub fn error_object(e: &KbError) -> Value {
    let mut o = json!({ "code": e.code(), "message": e.to_string() });
    if let Some(f) = e.field() {
        o["field"] = f.into();
    }
    o
}

/// An error back from its wire form.
pub fn error_from_object(o: &Value) -> KbError {
    KbError::Remote {
        code: o["code"].as_str().unwrap_or("internal").to_string(),
        message: o["message"].as_str().unwrap_or("unknown error").to_string(),
        field: o["field"].as_str().map(str::to_string),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocidParam {
    #[serde(alias = "pathId")]
    docid: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateDocumentParams {
    #[serde(alias = "pathId")]
    docid: String,
    #[serde(default)]
    meta: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateSectionParams {
    #[serde(alias = "pathId")]
    docid: String,
    heading: String,
    action: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    occurrence: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsLoadParams {
    toml: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetParam {
    #[serde(default, alias = "pathId", alias = "docid")]
    target: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListCollectionParams {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelParam {
    model: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelInstanceParams {
    model: String,
    #[serde(alias = "pathId")]
    docid: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionByHeadingParams {
    #[serde(alias = "pathId")]
    docid: String,
    heading: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreatePromptParams {
    model: String,
    title: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchContentParams {
    pattern: String,
    #[serde(default)]
    model: Option<String>,
}

/// Parse a write method's parameters into write operations (one, or many for `learn_many`).
pub fn write_ops(kb: &Kb, method: &str, p: Value) -> std::result::Result<Vec<WriteOp>, CallError> {
    use crate::collections::edit::DocEdit;
    Ok(match method {
        "create_document" => vec![kb.create_document_op(&params(p)?)?],
        "update_document" => {
            let p: UpdateDocumentParams = params(p)?;
            vec![WriteOp::EditDocument {
                docid: p.docid,
                edit: DocEdit::Update {
                    metadata: p.meta,
                    body: p.content,
                    title: p.title,
                },
            }]
        }
        "update_section" => {
            let p: UpdateSectionParams = params(p)?;
            vec![WriteOp::EditDocument {
                docid: p.docid,
                edit: DocEdit::Section {
                    heading: p.heading,
                    action: p.action,
                    content: p.content,
                    occurrence: p.occurrence,
                },
            }]
        }
        "delete_document" => vec![WriteOp::EditDocument {
            docid: params::<DocidParam>(p)?.docid,
            edit: DocEdit::Delete,
        }],
        "learn" => vec![WriteOp::Learn(params(p)?)],
        "learn_many" => params::<LearnManyParams>(p)?
            .requests
            .into_iter()
            .map(WriteOp::Learn)
            .collect(),
        "learn_document" => {
            let p: LearnDocumentParams = params(p)?;
            vec![WriteOp::LearnDocument {
                docid: p.docid,
                markdown: p.markdown,
                title: p.title,
                metadata: p.metadata,
                tags: p.tags,
            }]
        }
        "unlearn" => vec![WriteOp::Unlearn {
            kbid: params::<KbidParam>(p)?.kbid,
        }],
        other => return Err(CallError::UnknownMethod(other.to_string())),
    })
}

/// The JSON result of a write method from the outcomes of its operations.
pub fn write_result(
    kb: &Kb,
    method: &str,
    outcomes: Vec<crate::Result<WriteOutcome>>,
) -> CallResult {
    if let Some(Ok(WriteOutcome::Edited(_))) = outcomes.first() {
        let Some(Ok(WriteOutcome::Edited(r))) = outcomes.into_iter().next() else {
            unreachable!("matched above");
        };
        return Ok(kb.edit_answer(r)?);
    }
    if method == "learn_many" {
        return Ok(Value::Array(
            outcomes.into_iter().map(item_result).collect(),
        ));
    }
    match outcomes.into_iter().next() {
        Some(Ok(o)) => to_value(o),
        Some(Err(e)) => Err(CallError::Kb(e)),
        None => Err(CallError::Kb(KbError::Storage("no result".into()))),
    }
}

/// Run `method` on `kb`. Writes run as their own group here; the daemon batches them instead.
pub fn call(kb: &Kb, method: &str, p: Value, progress: &dyn Fn(u64, u64)) -> CallResult {
    match method {
        m if WRITE_METHODS.contains(&m) => {
            let ops = write_ops(kb, m, p)?;
            write_result(kb, m, kb.write_group(ops)?)
        }
        m if SYNC_METHODS.contains(&m) => call_sync(kb, m, p, progress, &|ops| kb.write_group(ops)),
        "sync_roots" => to_value(kb.sync_roots()?),
        "models_load" => Ok(kb.models_load(&params::<ModelsLoadParams>(p)?.toml)?),
        "models_show" => Ok(json!({
            "toml": kb.models_toml()?,
            "schema": kb.schema()?,
        })),
        "query" => Ok(kb.query(&(if p.is_null() { json!({}) } else { p }))?),
        "validate" => Ok(kb.validate_documents(params::<TargetParam>(p)?.target.as_deref())?),
        "list_collection" => {
            let p: ListCollectionParams = params(p)?;
            Ok(kb.list_collection(p.model.as_deref(), p.prefix.as_deref())?)
        }
        "inspect" => Ok(kb.inspect()?),
        "schema" => Ok(kb.schema()?),
        "model_info" => Ok(kb.model_info(&params::<ModelParam>(p)?.model)?),
        "toc" => Ok(Value::String(kb.toc()?)),
        "models_summary" => Ok(Value::String(kb.models_summary()?)),
        "primer" => Ok(Value::String(kb.primer()?)),
        "query_guide" => Ok(Value::String(crate::collections::schema::query_guide(
            kb.models()?.as_ref(),
        ))),
        "create_prompt" => {
            let p: CreatePromptParams = params(p)?;
            let models = kb.models()?;
            let m = models
                .get(&p.model)
                .ok_or_else(|| KbError::NotFound(format!("no model {:?}", p.model)))?;
            Ok(Value::String(crate::collections::schema::create_prompt(
                m, &p.title,
            )))
        }
        "document_json" => Ok(kb.document_json(&params::<DocidParam>(p)?.docid)?),
        "model_instance" => {
            let p: ModelInstanceParams = params(p)?;
            Ok(kb.model_instance(&p.model, &p.docid)?)
        }
        "section_by_heading" => {
            let p: SectionByHeadingParams = params(p)?;
            Ok(Value::String(kb.section_by_heading(&p.docid, &p.heading)?))
        }
        "search_content" => {
            let p: SearchContentParams = params(p)?;
            Ok(kb.search_content(&p.pattern, p.model.as_deref())?)
        }
        "text_search" => Ok(kb.text_search(&params(p)?)?),
        "retrieve" => {
            let p: RetrieveParams = params(p)?;
            to_value(kb.retrieve(p.kbid.as_deref(), p.docid.as_deref())?)
        }
        "recall" => {
            let p: RecallParams = params(p)?;
            let req = RecallRequest::new(p.kbid, p.kbids, p.depth, p.max_chars)?;
            to_value(kb.recall(&req)?)
        }
        "content" => to_value(kb.content(&params::<IdsParams>(p)?.ids)?),
        "retrieve_many" => {
            let kbids = params::<KbidsParam>(p)?.kbids;
            let refs: Vec<&str> = kbids.iter().map(String::as_str).collect();
            to_value(kb.read_sections(&refs)?)
        }
        "docs" => to_value(kb.list_documents()?),
        "search" => to_value(kb.search(&params::<SearchRequest>(p)?)?),
        "synonyms_add" => {
            let p: SynonymsParams = params(p)?;
            to_value(kb.synonyms_add(&p.term, &p.synonyms)?)
        }
        "synonyms_remove" => {
            let p: SynonymsParams = params(p)?;
            to_value(json!({"term": p.term, "removed": kb.synonyms_remove(&p.term, &p.synonyms)?}))
        }
        "synonyms_list" => to_value(kb.synonyms_list()?),
        "status" => to_value(kb.status()?),
        "check" => to_value(kb.check_with_progress(progress)?),
        "gc" => to_value(kb.gc()?),
        "rebuild" => to_value(kb.rebuild_with_progress(progress)?),
        "export" => {
            let p: ExportParams = params(p)?;
            let opts = ExportOptions {
                path: p.path.unwrap_or_else(|| PathBuf::from("kbdb-export")),
                with_indexes: p.with_indexes,
                force: p.force,
                confine_to: p.confine_to,
            };
            to_value(kb.export_with_progress(&opts, progress)?)
        }
        "import" => {
            let p: ImportParams = params(p)?;
            to_value(kb.import_with_progress(&p.path, p.strict, progress)?)
        }
        "skill_learn" => to_value(kb.skill_learn(params(p)?)?),
        "skill_list" => to_value(kb.skill_list()?),
        "skills" => to_value(kb.skills()?),
        "skill_get" => {
            let p: NameOrKbid = params(p)?;
            to_value(kb.skill_get(p.name.as_deref(), p.kbid.as_deref())?)
        }
        "skill_delete" => {
            let kbid = params::<KbidParam>(p)?.kbid;
            let removed = kb.skill_delete(&kbid)?;
            to_value(json!({"kbid": kbid, "removed": removed}))
        }
        "agent_create" => to_value(kb.agent_create(params(p)?)?),
        "agent_list" => to_value(kb.agent_list()?),
        "agent_get" => to_value(kb.agent_get(&params::<DocidParam>(p)?.docid)?),
        "agent_delete" => {
            let docid = params::<DocidParam>(p)?.docid;
            let removed = kb.agent_delete(&docid)?;
            to_value(json!({"docid": docid, "removed": removed}))
        }
        "kbids_with_prefix" => {
            let p: PrefixParams = params(p)?;
            to_value(kb.kbids_with_prefix(&p.prefix, p.limit.unwrap_or(100).min(1000))?)
        }
        "changes_since" => to_value(kb.changes_since(params::<SeqParam>(p)?.seq)?),
        other => Err(CallError::UnknownMethod(other.to_string())),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KbidsParam {
    kbids: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameOrKbid {
    name: Option<String>,
    kbid: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefixParams {
    prefix: String,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeqParam {
    seq: u64,
}
