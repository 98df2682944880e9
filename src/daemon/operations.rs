//! The table of operations: every `Kb` operation the daemon serves, once, with its method
//! name, its kind (which decides how the daemon runs it, whether a client may retry it after
//! a lost connection, whether subscribers are told), its handler, and — for the operations
//! the MCP server offers as tools — the tool's name, title, description, annotations and
//! parameter type, from which the tool's input schema is generated (`params.rs`).
//!
//! Everything else reads this table: the daemon's dispatcher (`server.rs`), the embedded
//! dispatcher (`methods::call`), the client's retry and timeout rules (`client.rs`), the MCP
//! tool list and `tools/call` (`mcp/tools.rs`), and the documentation tests (docs/mcp.md,
//! docs/daemon.md, README.md list what is served here).

use std::marker::PhantomData;

use serde_json::{Value, json};

use super::methods::{CallError, CallResult, params, to_value};
use super::params::*;
use crate::collections::edit::DocEdit;
use crate::error::KbError;
use crate::types::RecallRequest;
use crate::{ExportOptions, Kb, WriteOp};

/// A handler's progress callback: `(done, total)`.
pub type Progress<'a> = &'a dyn Fn(u64, u64);
/// Runs an operation in the caller's thread, in its own transaction(s).
pub type CallFn = fn(&Kb, Value, Progress<'_>) -> CallResult;
/// Turns a grouped write's parameters into the write operations the writer commits.
pub type WriteFn = fn(&Kb, Value) -> Result<Vec<WriteOp>, CallError>;
/// Runs a folder sync, committing its batches through the writer given.
pub type SyncFn = fn(&Kb, Value, Progress<'_>, crate::writes::Writer<'_>) -> CallResult;

/// How an operation runs, and what that means for its callers.
#[derive(Clone, Copy)]
pub enum Kind {
    /// Only reads: safe to retry after a lost connection.
    Read(CallFn),
    /// Changes the store through the write group: the daemon batches these with other
    /// clients' writes into shared transactions (group commit).
    Write(WriteFn, Answer),
    /// Makes documents match a folder, in batches through the writer. `repeatable`: running
    /// it again gives the same end state whatever ran before, so a client may retry it.
    Sync(SyncFn, Repeatable),
    /// Changes the store in its own transaction (not grouped); subscribers are told afterwards
    /// (their lists of prompts or resources may have changed).
    Change(CallFn),
    /// Housekeeping that is neither a read nor safe to repeat blindly (rebuild, export).
    Maintenance(CallFn),
    /// Answered by the daemon itself (it needs the daemon's state), never by `methods::call`.
    Daemon(Repeatable),
}

/// Whether a client may send the operation again after a lost connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Repeatable {
    Yes,
    No,
}

/// The result of a grouped write.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The first (only) operation's outcome.
    One,
    /// One `{ok}` / `{error}` item per operation, in order (`learn_many`).
    Each,
}

/// One operation of the daemon.
pub struct Operation {
    /// The daemon's JSON-RPC method.
    pub method: &'static str,
    pub kind: Kind,
    /// May run long: clients wait for it without a timeout, and it may report progress.
    pub long: bool,
    /// The MCP tool that calls it, if any.
    pub tool: Option<Tool>,
}

/// How an MCP tool presents an operation.
pub struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub hints: Hints,
    /// The input schema, generated from the parameter type.
    pub schema: fn() -> Value,
    pub output: Output,
    /// Arguments whose JSON types the MCP server leaves to the operation's own parser (it
    /// accepts more than the schema says and names the field in its errors).
    pub lenient: &'static [&'static str],
}

/// The spec's tool annotation hints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// How a tool's JSON result is written. The spec's "Returns" texts say 2-space indentation for
/// some and compact for others (`content` in "Error Handling"); for `retrieve`, `recall`,
/// `status`, `check`, `gc` and `rebuild` it says nothing ("most tools use 2-space
/// indentation" in "Error Handling"): those are `Unstated` and written with 2 spaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Pretty,
    Compact,
    Unstated,
}

const fn hints(read_only: bool, destructive: bool, idempotent: bool) -> Hints {
    Hints {
        read_only,
        destructive,
        idempotent,
        open_world: false,
    }
}

/// Reads.
const READS: Hints = hints(true, false, true);
/// Adds, or replaces what it names; the same call twice has the effect of one.
const ADDS: Hints = hints(false, false, true);
/// Removes what it names; the same call twice has the effect of one.
const REMOVES: Hints = hints(false, true, true);
/// Edits: repeating it edits again.
const EDITS: Hints = hints(false, true, false);

impl Operation {
    /// Changes something (the store, the server's files): everything but a plain read. A
    /// read-only token of `kbdb serve` may call only the operations for which this is false.
    pub fn writes(&self) -> bool {
        !matches!(self.kind, Kind::Read(_))
    }

    /// Safe to send again after a lost connection (reads, and repeatable syncs).
    pub fn idempotent(&self) -> bool {
        matches!(
            self.kind,
            Kind::Read(_) | Kind::Sync(_, Repeatable::Yes) | Kind::Daemon(Repeatable::Yes)
        )
    }
}

/// A typed handle on an operation of the table: its method, the type a caller sends (its JSON
/// form is the method's parameters) and the type the method answers with. Callers (the CLI's
/// `Backend::run`) take these from [`op`] instead of writing a method name, so a misspelt
/// method or a wrong parameter or result type fails to compile.
pub struct Op<P, R> {
    pub method: &'static str,
    types: PhantomData<fn(&P) -> R>,
}

impl<P, R> Op<P, R> {
    const fn new(method: &'static str) -> Self {
        Op {
            method,
            types: PhantomData,
        }
    }
}

// Manual: derive would require `P: Clone, R: Clone`.
impl<P, R> Clone for Op<P, R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, R> Copy for Op<P, R> {}

/// Declares the typed handles and the list the test checks against the table.
macro_rules! ops {
    ($($name:ident: $p:ty => $r:ty = $method:literal;)*) => {
        $(pub const $name: Op<$p, $r> = Op::new($method);)*
        /// Every handle's method, for the test that each is a row of the table.
        #[cfg(test)]
        pub(super) const ALL: &[&str] = &[$($method),*];
    };
}

/// The typed handles of the operations the CLI calls. A result typed `Value` is one the CLI
/// prints as the JSON it is; `query` takes any JSON object (its fields are the query's).
pub mod op {
    use serde_json::Value;

    use super::Op;
    use crate::daemon::params::*;
    use crate::store::synonyms::SynonymEntry;
    use crate::sync::{ForgetReport, SyncReport, SyncRequest, SyncRootInfo};
    use crate::*;

    ops! {
        SEARCH: SearchRequest => SearchResponse = "search";
        LEARN: LearnRequest => LearnResult = "learn";
        LEARN_MANY: LearnManyParams => Vec<Value> = "learn_many";
        LEARN_DOCUMENT: LearnDocumentParams => DocumentLearnResult = "learn_document";
        UNLEARN: UnlearnParams => UnlearnResult = "unlearn";
        RETRIEVE: RetrieveParams => Retrieved = "retrieve";
        RECALL: RecallParams => Recalled = "recall";
        CONTENT: IdsParams => ComposedContent = "content";
        DOCS: NoParams => Vec<DocumentSummary> = "docs";
        STATUS: NoParams => Status = "status";
        CHECK: NoParams => CheckResult = "check";
        GC: NoParams => GcResult = "gc";
        REBUILD: NoParams => RebuildResult = "rebuild";
        EXPORT: ExportParams => ExportResult = "export";
        IMPORT: ImportParams => ImportResult = "import";
        SYNONYMS_ADD: SynonymsParams => Value = "synonyms_add";
        SYNONYMS_REMOVE: SynonymsParams => Value = "synonyms_remove";
        SYNONYMS_LIST: NoParams => Vec<SynonymEntry> = "synonyms_list";
        SKILL_LEARN: SkillLearnParams => Value = "skill_learn";
        SKILL_LIST: NoParams => Value = "skill_list";
        SKILL_GET: SkillGetParams => Value = "skill_get";
        SKILL_DELETE: SkillDeleteParams => Value = "skill_delete";
        AGENT_CREATE: AgentInput => Value = "agent_create";
        AGENT_LIST: NoParams => Value = "agent_list";
        AGENT_GET: AgentParams => Value = "agent_get";
        AGENT_DELETE: AgentParams => Value = "agent_delete";
        MODELS_LOAD: ModelsLoadParams => Value = "models_load";
        MODELS_SHOW: NoParams => Value = "models_show";
        QUERY: Value => Value = "query";
        VALIDATE: ValidateParams => Value = "validate";
        CREATE_DOCUMENT: CreateDocument => Value = "create_document";
        UPDATE_DOCUMENT: UpdateDocumentParams => Value = "update_document";
        UPDATE_SECTION: UpdateSectionParams => Value = "update_section";
        DOCUMENT_JSON: DocidParam => Value = "document_json";
        DELETE_DOCUMENT: DeleteDocumentParams => Value = "delete_document";
        SYNC: SyncRequest => SyncReport = "sync";
        SYNC_ROOTS: NoParams => Vec<SyncRootInfo> = "sync_roots";
        SYNC_FORGET: DirParam => ForgetReport = "sync_forget";
    }
}

/// The operation behind a daemon method.
pub fn by_method(method: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().find(|o| o.method == method)
}

/// The operation behind an MCP tool.
pub fn by_tool(name: &str) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .find(|o| o.tool.as_ref().is_some_and(|t| t.name == name))
}

/// The MCP tools, in the order `tools/list` gives them.
pub fn tools() -> impl Iterator<Item = (&'static Operation, &'static Tool)> {
    OPERATIONS
        .iter()
        .filter_map(|o| o.tool.as_ref().map(|t| (o, t)))
}

fn text(s: String) -> CallResult {
    Ok(Value::String(s))
}

/// Every operation. The tools come first, in `tools/list` order: the 19 of spec/kbdb-mcp.md in
/// the spec's order, then the 12 collection tools in the order of the descriptions document
/// (contentbase-mcp-descriptions.md).
pub static OPERATIONS: &[Operation] = &[
    Operation {
        method: op::SEARCH.method,
        kind: Kind::Read(|kb, p, _| {
            let req: SearchRequest = params(p)?;
            to_value(kb.search(&req)?)
        }),
        long: false,
        tool: Some(Tool {
            name: "search",
            title: "Search KB",
            description: "Search the knowledge base: returns ranked sections, each with its heading, type, \
                 docids, a ~150-character snippet around the matched words and the matched terms, so \
                 you can judge relevance without reading whole sections. Start here, with several \
                 short keyword queries rather than one long sentence: every word must match (stemmed, \
                 with synonyms), and when no section has them all the search falls back to any word \
                 and says `relaxed: true`; then call `recall` with the kbids worth reading. \"Quoted \
                 phrases\" match adjacent words; there are no operators (AND/OR/NOT/- are plain \
                 words). Pages hold at most 100 results; `mode: \"documents\"` groups hits by \
                 document and `mode: \"stats\"` returns only counts.",
            hints: READS,
            schema: input_schema::<SearchRequest>,
            output: Output::Pretty,
            lenient: &[],
        }),
    },
    Operation {
        method: op::LEARN.method,
        kind: Kind::Write(|_, p| Ok(vec![WriteOp::Learn(params(p)?)]), Answer::One),
        long: false,
        tool: Some(Tool {
            name: "learn",
            title: "Import Content",
            description: "Store durable knowledge — a fact, decision, correction, code snippet or image — as \
                 one section; it is searchable at once. Give a short `title` (it is the section's \
                 heading and weighs most in search; required for images) and `tags` for scoping; add \
                 a `docid` to make it part of a document. To update something learned before, learn \
                 the new version with `replace: true` and the same `docid` + `title` (or the same \
                 `source`): the old section is superseded and its kbid returned in `superseded`. \
                 Identical content is never stored twice; the result gives the new `kbid`, `warnings` \
                 and `near_duplicates` (similar existing sections you may want to replace or \
                 unlearn).",
            hints: ADDS,
            schema: input_schema::<LearnRequest>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::UNLEARN.method,
        kind: Kind::Write(
            |_, p| {
                Ok(vec![WriteOp::Unlearn {
                    kbid: params::<UnlearnParams>(p)?.kbid,
                }])
            },
            Answer::One,
        ),
        long: false,
        tool: Some(Tool {
            name: "unlearn",
            title: "Remove Section",
            description: "Permanently remove one section by kbid, with its index entries and the references it \
                 makes. Use for knowledge that is wrong or obsolete; to correct a section, prefer \
                 `learn` with `replace: true`, which keeps its place in documents. A document whose \
                 last section is removed is removed too; links from other sections to it stay, now \
                 dangling. Returns `{removed, elapsed_ms}`; `removed: false` when no such section \
                 exists.",
            hints: REMOVES,
            schema: input_schema::<UnlearnParams>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::RETRIEVE.method,
        kind: Kind::Read(|kb, p, _| {
            let p: RetrieveParams = params(p)?;
            to_value(kb.retrieve(p.kbid.as_deref(), p.docid.as_deref())?)
        }),
        long: false,
        tool: Some(Tool {
            name: "retrieve",
            title: "Fetch Content",
            description: "Low-level fetch by identifier. With `kbid`: the section's stored content, as \
                 `[{kbid, sectionType, content, size}]` (images as base64, `size` in bytes). With \
                 `docid`: the document record (title, type, ordered kbids, each section's heading, \
                 type and size, timestamps). Give `kbid` or `docid` (`kbid` wins when both are \
                 given). To read knowledge prefer `recall` (content with headings, documents and \
                 references) or `content` (a whole document as markdown).",
            hints: READS,
            schema: input_schema::<RetrieveParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::RECALL.method,
        kind: Kind::Read(|kb, p, _| {
            let p: RecallParams = params(p)?;
            let req = RecallRequest::new(p.kbid, p.kbids, p.depth, p.max_chars)?;
            to_value(kb.recall(&req)?)
        }),
        long: false,
        tool: Some(Tool {
            name: "recall",
            title: "Recall Context",
            description: "Read sections in full, usually after `search`: each section's content, heading, type \
                 and docids, plus context chosen by `depth` — 1: its documents' tables of contents \
                 and the sections that link to it; 2: also the references it makes and the full text \
                 of its sibling sections; 3: also the full text of the sections it references. Pass \
                 `kbid` for one object or `kbids` for an array in the same order (give one of them). \
                 Set `max_chars` to bound the added context; the requested sections themselves are \
                 always returned whole, and a section whose context was cut carries `truncated: \
                 true`. Unknown kbids are an error naming them.",
            hints: READS,
            schema: input_schema::<RecallParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::CONTENT.method,
        kind: Kind::Read(|kb, p, _| to_value(kb.content(&params::<IdsParams>(p)?.ids)?)),
        long: false,
        tool: Some(Tool {
            name: "content",
            title: "Compose Content",
            description: "Render sections and whole documents as one readable Markdown text, in the order \
                 given. Use to read a complete document, or to assemble chosen sections into one \
                 block of context. Accepts kbids and docids, mixed; a document renders as its title \
                 and its sections in order, code sections are fenced, images become \
                 `kbdb://section/<kbid>` links. Returns `{type: \"text/markdown\", data, total}` \
                 (`total` = characters of `data`); unknown ids are an error naming them.",
            hints: READS,
            schema: input_schema::<IdsParams>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::STATUS.method,
        kind: Kind::Read(|kb, _, _| to_value(kb.status()?)),
        long: false,
        tool: Some(Tool {
            name: "status",
            title: "DB Status",
            description: "Report the knowledge base's state: the database path (`contextPath`), whether it is \
                 ready, counts of sections and documents, schema version, change sequence, sizes and \
                 how far the search index has caught up. Use to confirm which knowledge base you are \
                 connected to, or whether it is empty, before searching. Cheap and read-only.",
            hints: READS,
            schema: input_schema::<NoParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::CHECK.method,
        kind: Kind::Read(|kb, _, progress| to_value(kb.check_with_progress(progress)?)),
        long: true,
        tool: Some(Tool {
            name: "check",
            title: "Integrity Check",
            description: "Verify the knowledge base's integrity: content checksums, type mismatches, orphan \
                 sections and documents, broken references, index agreement, circular references \
                 (warnings) and divergent content — sections sharing a source key with different \
                 content, i.e. contradictory versions to resolve with `learn` + `replace: true`. \
                 Returns `{ok, errors: [{type, entity, detail}], warnings, sections_checked, \
                 documents_checked, references_checked, elapsed_ms}`. It reads everything, so use it \
                 when results look wrong, not routinely.",
            hints: READS,
            schema: input_schema::<NoParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::GC.method,
        kind: Kind::Change(|kb, _, _| to_value(kb.gc()?)),
        long: true,
        tool: Some(Tool {
            name: "gc",
            title: "Garbage Collect",
            description: "Permanently delete sections that no document lists any more and that were never \
                 learned on their own — e.g. old sections left behind when a document was re-learned. \
                 Sections learned without a docid are never collected. Returns `{removed_sections, \
                 removed_bytes, elapsed_ms}` (all 0 when nothing is eligible). A housekeeping task; \
                 not needed for searching or learning.",
            hints: hints(false, true, false),
            schema: input_schema::<NoParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::REBUILD.method,
        kind: Kind::Maintenance(|kb, _, progress| to_value(kb.rebuild_with_progress(progress)?)),
        long: true,
        tool: Some(Tool {
            name: "rebuild",
            title: "Rebuild Indexes",
            description: "Rebuild the search index from the stored sections and documents; the stored \
                 knowledge itself is not changed. Use only to recover: when `check` reports index \
                 problems or search disagrees with what `retrieve` shows. Takes a while on a large \
                 knowledge base. Returns `{sections_reindexed, terms_indexed, elapsed_ms}`.",
            hints: hints(false, false, false),
            schema: input_schema::<NoParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::EXPORT.method,
        kind: Kind::Maintenance(|kb, p, progress| {
            let p: ExportParams = params(p)?;
            let opts = ExportOptions {
                path: p
                    .path
                    .unwrap_or_else(|| std::path::PathBuf::from("kbdb-export")),
                with_indexes: p.with_indexes,
                force: p.force,
                confine_to: p.confine_to,
            };
            to_value(kb.export_with_progress(&opts, progress)?)
        }),
        long: true,
        tool: Some(Tool {
            name: "export",
            title: "Export Snapshot",
            description: "Write a consistent snapshot of the knowledge base as plain files — sections, \
                 document manifests and a catalog — for backup or versioning; indexes are left out \
                 unless `with_indexes` (they can be rebuilt). The destination must be inside the \
                 folder that contains the database folder, and absent or empty; `force` replaces an \
                 earlier kbdb export there, and never any other folder. The snapshot appears \
                 atomically. Returns `{path, sections_exported, documents_exported, elapsed_ms}`.",
            hints: ADDS,
            schema: input_schema::<ExportParams>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::SKILL_LEARN.method,
        kind: Kind::Change(|kb, p, _| {
            let input = params::<SkillLearnParams>(p)?
                .try_into()
                .map_err(CallError::InvalidParams)?;
            to_value(kb.skill_learn(input)?)
        }),
        long: false,
        tool: Some(Tool {
            name: "skill-learn",
            title: "Create Skill",
            description: "Save a reusable prompt template (a skill) in the knowledge base. It is offered to \
                 the host as an MCP prompt of the same name and can be attached to agents \
                 (`agent-create`). `body` is the template, with `{{argName}}` placeholders; \
                 placeholders not declared in `arguments` become required arguments automatically. \
                 Returns the skill's `kbid`, `name` and final `arguments`.",
            hints: ADDS,
            schema: input_schema::<SkillLearnParams>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::SKILL_LIST.method,
        kind: Kind::Read(|kb, _, _| to_value(kb.skill_list()?)),
        long: false,
        tool: Some(Tool {
            name: "skill-list",
            title: "List Skills",
            description: "List every stored skill as `[{kbid, name, description, argumentCount}]`. Use it to \
                 find a skill's kbid for `skill-get`, `skill-delete` or `agent-create`.",
            hints: READS,
            schema: input_schema::<NoParams>,
            output: Output::Pretty,
            lenient: &[],
        }),
    },
    Operation {
        method: op::SKILL_GET.method,
        kind: Kind::Read(|kb, p, _| {
            let p: SkillGetParams = params(p)?;
            to_value(kb.skill_get(p.name.as_deref(), p.kbid.as_deref())?)
        }),
        long: false,
        tool: Some(Tool {
            name: "skill-get",
            title: "Get Skill",
            description: "Fetch one skill's full definition — `kbid`, `name`, `description`, `arguments` and \
                 template `body` — by `name` or by `kbid` (give one; `kbid` wins when both are \
                 given). Use `skill-list` to see which skills exist.",
            hints: READS,
            schema: input_schema::<SkillGetParams>,
            output: Output::Pretty,
            lenient: &[],
        }),
    },
    Operation {
        method: op::SKILL_DELETE.method,
        kind: Kind::Change(|kb, p, _| {
            let kbid = params::<SkillDeleteParams>(p)?.kbid;
            let removed = kb.skill_delete(&kbid)?;
            to_value(json!({"kbid": kbid, "removed": removed}))
        }),
        long: false,
        tool: Some(Tool {
            name: "skill-delete",
            title: "Delete Skill",
            description: "Permanently remove a skill by kbid. Agents that list it keep a dangling entry \
                 (`agent-get` shows it with `name: null`). Returns `{kbid, removed: true}`.",
            hints: REMOVES,
            schema: input_schema::<SkillDeleteParams>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::AGENT_CREATE.method,
        kind: Kind::Change(|kb, p, _| to_value(kb.agent_create(params(p)?)?)),
        long: false,
        tool: Some(Tool {
            name: "agent-create",
            title: "Create Agent",
            description: "Define an agent: a persona (system prompt) plus an ordered list of skills, stored as \
                 a document (docid `agent-<name>`) and offered to the host as the prompt \
                 `agent:<name>`. Each entry of `skills` must be the kbid of an existing skill (see \
                 `skill-list`; create missing ones with `skill-learn` first). Returns `{docid, name, \
                 skills}`.",
            hints: ADDS,
            schema: input_schema::<AgentInput>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    Operation {
        method: op::AGENT_LIST.method,
        kind: Kind::Read(|kb, _, _| to_value(kb.agent_list()?)),
        long: false,
        tool: Some(Tool {
            name: "agent-list",
            title: "List Agents",
            description: "List every agent as `[{docid, name, description, skillCount}]`. Use it to find an \
                 agent's docid for `agent-get` or `agent-delete`.",
            hints: READS,
            schema: input_schema::<NoParams>,
            output: Output::Pretty,
            lenient: &[],
        }),
    },
    Operation {
        method: op::AGENT_GET.method,
        kind: Kind::Read(|kb, p, _| to_value(kb.agent_get(&params::<AgentParams>(p)?.docid)?)),
        long: false,
        tool: Some(Tool {
            name: "agent-get",
            title: "Get Agent",
            description: "Fetch one agent by docid: its `name`, `description`, `persona` and ordered `skills` \
                 as `[{kbid, name, position}]`; a skill deleted since has `name: null`. Use \
                 `skill-get` for a skill's template.",
            hints: READS,
            schema: input_schema::<AgentParams>,
            output: Output::Pretty,
            lenient: &[],
        }),
    },
    Operation {
        method: op::AGENT_DELETE.method,
        kind: Kind::Change(|kb, p, _| {
            let docid = params::<AgentParams>(p)?.docid;
            let removed = kb.agent_delete(&docid)?;
            to_value(json!({"docid": docid, "removed": removed}))
        }),
        long: false,
        tool: Some(Tool {
            name: "agent-delete",
            title: "Delete Agent",
            description: "Remove an agent by docid. Only the agent document is deleted; the skills it lists \
                 stay. Returns `{docid, removed: true}`.",
            hints: REMOVES,
            schema: input_schema::<AgentParams>,
            output: Output::Compact,
            lenient: &[],
        }),
    },
    // ---- the collection tools ----
    Operation {
        method: "primer",
        kind: Kind::Read(|kb, _, _| text(kb.primer()?)),
        long: false,
        tool: Some(Tool {
            name: "read_me",
            title: "Collection Guide",
            description: "Returns the content collection guide. Call this BEFORE working with any documents. \
                 Contains model definitions, available tools, query syntax, and recommended workflow. \
                 Call this at the start of every session to understand the collection structure.",
            hints: READS,
            schema: input_schema::<NoParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: "inspect",
        kind: Kind::Read(|kb, _, _| Ok(kb.inspect()?)),
        long: false,
        tool: Some(Tool {
            name: "inspect",
            title: "Inspect Collection",
            description: "Overview of the collection — registered models, document count, available actions. \
                 Call `read_me` first if this is your first interaction.",
            hints: READS,
            schema: input_schema::<NoParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: "model_info",
        kind: Kind::Read(|kb, p, _| Ok(kb.model_info(&params::<ModelParams>(p)?.model)?)),
        long: false,
        tool: Some(Tool {
            name: "get_model_info",
            title: "Model Info",
            description: "Get detailed information about a single model — fields, sections, relationships, \
                 example document. Use when you need to understand a model before creating or editing \
                 its documents.",
            hints: READS,
            schema: input_schema::<ModelParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: "list_collection",
        kind: Kind::Read(|kb, p, _| {
            let p: ListDocumentsParams = params(p)?;
            Ok(kb.list_collection(p.model.as_deref(), p.prefix.as_deref())?)
        }),
        long: false,
        tool: Some(Tool {
            name: "list_documents",
            title: "List Documents",
            description: "List all document path IDs in the collection, optionally filtered by model name or \
                 prefix. The prefix before the slash indicates the model.",
            hints: READS,
            schema: input_schema::<ListDocumentsParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::QUERY.method,
        // The engine's query parser reads the parameters (QueryParams only describes them).
        kind: Kind::Read(|kb, p, _| Ok(kb.query(&(if p.is_null() { json!({}) } else { p }))?)),
        long: false,
        tool: Some(Tool {
            name: "query",
            title: "Query Documents",
            description: "Query typed model instances with MongoDB-style filtering. See `read_me` output for \
                 full syntax reference. Where clause: keys are dot-notation paths, values are \
                 literals (implies $eq), arrays (implies $in), or operator objects like { \"$gt\": 5 \
                 }. Operators: $eq, $neq, $in, $notIn, $gt, $lt, $gte, $lte, $contains, $startsWith, \
                 $endsWith, $regex, $exists. Supports sort, limit, offset, select, and method \
                 (fetchAll/first/last/count). Results are lean — `{id, title, model, meta}` — unless \
                 `select` asks for sections or related documents.",
            hints: READS,
            schema: input_schema::<QueryParams>,
            output: Output::Unstated,
            lenient: &["limit", "offset", "sort"],
        }),
    },
    Operation {
        method: "search_content",
        kind: Kind::Read(|kb, p, _| {
            let p: SearchContentParams = params(p)?;
            Ok(kb.search_content(&p.pattern, p.model.as_deref())?)
        }),
        long: false,
        tool: Some(Tool {
            name: "search_content",
            title: "Search Content",
            description: "Full-text regex search across all document content. Returns matching document IDs \
                 with context. Searches document body text, not metadata — for metadata filtering, \
                 use `query` instead.",
            hints: READS,
            schema: input_schema::<SearchContentParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: "text_search",
        kind: Kind::Read(|kb, p, _| Ok(kb.text_search(&params::<TextSearch>(p)?)?)),
        long: false,
        tool: Some(Tool {
            name: "text_search",
            title: "Text Search",
            description: "Search file contents with pattern matching, ripgrep-style (documents stand for \
                 files). Returns distinct file matches by default, or line-level detail with \
                 expanded=true.",
            hints: READS,
            schema: input_schema::<TextSearch>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::VALIDATE.method,
        kind: Kind::Read(|kb, p, _| {
            let target = params::<ValidateParams>(p)?
                .target()
                .map_err(CallError::InvalidParams)?;
            Ok(kb.validate_documents(target.as_deref())?)
        }),
        long: false,
        tool: Some(Tool {
            name: "validate",
            title: "Validate",
            description: "Validate a document against its model schema. Returns validation result with any \
                 errors. **ALWAYS call after create/update operations** to confirm the document \
                 conforms to its model.",
            hints: READS,
            schema: input_schema::<ValidateParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::CREATE_DOCUMENT.method,
        kind: Kind::Write(
            |kb, p| {
                let input: CreateDocument = params(p)?;
                Ok(vec![kb.create_document_op(&input)?])
            },
            Answer::One,
        ),
        long: false,
        tool: Some(Tool {
            name: "create_document",
            title: "Create Document",
            description: "**ALWAYS use this instead of writing markdown files directly.** Creates a new \
                 document with proper scaffolding from a model definition — generates correct \
                 frontmatter defaults and section headings. Call `validate` after creation (the \
                 result already carries a first validation).",
            hints: hints(false, false, false),
            schema: input_schema::<CreateDocument>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::UPDATE_DOCUMENT.method,
        kind: Kind::Write(
            |_, p| {
                let p: UpdateDocumentParams = params(p)?;
                Ok(vec![WriteOp::EditDocument {
                    docid: p.docid,
                    edit: DocEdit::Update {
                        metadata: p.meta,
                        body: p.content,
                        title: p.title,
                    },
                }])
            },
            Answer::One,
        ),
        long: false,
        tool: Some(Tool {
            name: "update_document",
            title: "Update Document",
            description: "Update a document's frontmatter and/or replace its entire content body. Use for \
                 frontmatter changes (a null value removes a key). For section-level edits, prefer \
                 `update_section` instead. Call `validate` after.",
            hints: EDITS,
            schema: input_schema::<UpdateDocumentParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::UPDATE_SECTION.method,
        kind: Kind::Write(
            |_, p| {
                let p: UpdateSectionParams = params(p)?;
                Ok(vec![WriteOp::EditDocument {
                    docid: p.docid,
                    edit: DocEdit::Section {
                        heading: p.heading,
                        action: p.action,
                        content: p.content,
                        occurrence: p.occurrence,
                    },
                }])
            },
            Answer::One,
        ),
        long: false,
        tool: Some(Tool {
            name: "update_section",
            title: "Update Section",
            description: "Preferred way to edit document content. Surgically edit a specific section — \
                 replace, append, or remove (or insert a new block before or after it). Target a \
                 section by its heading name (case-insensitive); when a heading appears more than \
                 once, `occurrence` picks one. Call `validate` after.",
            hints: EDITS,
            schema: input_schema::<UpdateSectionParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    Operation {
        method: op::DELETE_DOCUMENT.method,
        kind: Kind::Write(
            |_, p| {
                Ok(vec![WriteOp::EditDocument {
                    docid: params::<DeleteDocumentParams>(p)?.docid,
                    edit: DocEdit::Delete,
                }])
            },
            Answer::One,
        ),
        long: false,
        tool: Some(Tool {
            name: "delete_document",
            title: "Delete Document",
            description: "Delete a document from the collection permanently. Cannot be undone except through \
                 version control (or an export). Its sections leave search with it, except those \
                 another document holds or that were learned on their own.",
            hints: REMOVES,
            schema: input_schema::<DeleteDocumentParams>,
            output: Output::Unstated,
            lenient: &[],
        }),
    },
    // ---- methods without a tool: the CLI's, the resources' and prompts', the daemon's ----
    Operation {
        method: "hello",
        kind: Kind::Daemon(Repeatable::Yes),
        long: false,
        tool: None,
    },
    Operation {
        method: "shutdown",
        kind: Kind::Daemon(Repeatable::No),
        long: false,
        tool: None,
    },
    Operation {
        method: "subscribe",
        kind: Kind::Daemon(Repeatable::No),
        long: false,
        tool: None,
    },
    Operation {
        method: op::LEARN_MANY.method,
        kind: Kind::Write(
            |_, p| {
                Ok(params::<LearnManyParams>(p)?
                    .requests
                    .into_iter()
                    .map(WriteOp::Learn)
                    .collect())
            },
            Answer::Each,
        ),
        long: false,
        tool: None,
    },
    Operation {
        method: op::LEARN_DOCUMENT.method,
        kind: Kind::Write(
            |_, p| {
                let p: LearnDocumentParams = params(p)?;
                Ok(vec![WriteOp::LearnDocument {
                    docid: p.docid,
                    markdown: p.markdown,
                    title: p.title,
                    metadata: p.metadata,
                    tags: p.tags,
                }])
            },
            Answer::One,
        ),
        long: false,
        tool: None,
    },
    Operation {
        method: op::SYNC.method,
        kind: Kind::Sync(
            |kb, p, progress, write| to_value(kb.sync_with(&params(p)?, write, progress)?),
            // Documents are made to match the files, whatever ran before.
            Repeatable::Yes,
        ),
        long: true,
        tool: None,
    },
    Operation {
        method: op::SYNC_FORGET.method,
        kind: Kind::Sync(
            |kb, p, _, write| to_value(kb.sync_forget_with(&params::<DirParam>(p)?.dir, write)?),
            Repeatable::No,
        ),
        long: false,
        tool: None,
    },
    Operation {
        method: op::SYNC_ROOTS.method,
        kind: Kind::Read(|kb, _, _| to_value(kb.sync_roots()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: op::IMPORT.method,
        kind: Kind::Change(|kb, p, progress| {
            let p: ImportParams = params(p)?;
            to_value(kb.import_with_progress(&p.path, p.strict, progress)?)
        }),
        long: true,
        tool: None,
    },
    Operation {
        method: op::DOCS.method,
        kind: Kind::Read(|kb, _, _| to_value(kb.list_documents()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: "documents_page",
        kind: Kind::Read(|kb, p, _| {
            let p = params::<PageParams>(p)?;
            let limit = p.limit.unwrap_or(100).min(1000);
            to_value(kb.documents_page(p.offset.unwrap_or(0), limit)?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "validation_report",
        kind: Kind::Read(|kb, p, _| {
            let limit = params::<LimitParam>(p)?.limit.unwrap_or(500).min(10_000);
            to_value(kb.validation_report(limit)?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "tag_counts",
        kind: Kind::Read(|kb, p, _| {
            let limit = params::<LimitParam>(p)?.limit.unwrap_or(1000).min(10_000);
            to_value(kb.tag_counts(limit)?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "retrieve_many",
        kind: Kind::Read(|kb, p, _| {
            let kbids = params::<KbidsParam>(p)?.kbids;
            let refs: Vec<&str> = kbids.iter().map(String::as_str).collect();
            to_value(kb.read_sections(&refs)?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "kbids_with_prefix",
        kind: Kind::Read(|kb, p, _| {
            let p: PrefixParams = params(p)?;
            to_value(kb.kbids_with_prefix(&p.prefix, p.limit.unwrap_or(100).min(1000))?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "changes_since",
        kind: Kind::Read(|kb, p, _| to_value(kb.changes_since(params::<SeqParam>(p)?.seq)?)),
        long: false,
        tool: None,
    },
    Operation {
        method: op::SYNONYMS_ADD.method,
        kind: Kind::Change(|kb, p, _| {
            let p: SynonymsParams = params(p)?;
            to_value(kb.synonyms_add(&p.term, &p.synonyms)?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: op::SYNONYMS_REMOVE.method,
        kind: Kind::Change(|kb, p, _| {
            let p: SynonymsParams = params(p)?;
            let removed = kb.synonyms_remove(&p.term, &p.synonyms)?;
            to_value(json!({"term": p.term, "removed": removed}))
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: op::SYNONYMS_LIST.method,
        kind: Kind::Read(|kb, _, _| to_value(kb.synonyms_list()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: "skills",
        kind: Kind::Read(|kb, _, _| to_value(kb.skills()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: op::MODELS_LOAD.method,
        kind: Kind::Change(|kb, p, _| Ok(kb.models_load(&params::<ModelsLoadParams>(p)?.toml)?)),
        long: false,
        tool: None,
    },
    Operation {
        method: op::MODELS_SHOW.method,
        kind: Kind::Read(|kb, _, _| {
            Ok(json!({
                "toml": kb.models_toml()?,
                "schema": kb.schema()?,
            }))
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "schema",
        kind: Kind::Read(|kb, _, _| Ok(kb.schema()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: "toc",
        kind: Kind::Read(|kb, _, _| text(kb.toc()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: "models_summary",
        kind: Kind::Read(|kb, _, _| text(kb.models_summary()?)),
        long: false,
        tool: None,
    },
    Operation {
        method: "query_guide",
        kind: Kind::Read(|kb, _, _| {
            text(crate::collections::schema::query_guide(
                kb.models()?.as_ref(),
            ))
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "create_prompt",
        kind: Kind::Read(|kb, p, _| {
            let p: CreatePromptParams = params(p)?;
            let models = kb.models()?;
            let m = models
                .get(&p.model)
                .ok_or_else(|| KbError::NotFound(format!("no model {:?}", p.model)))?;
            text(crate::collections::schema::create_prompt(m, &p.title))
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: op::DOCUMENT_JSON.method,
        kind: Kind::Read(|kb, p, _| Ok(kb.document_json(&params::<DocidParam>(p)?.docid)?)),
        long: false,
        tool: None,
    },
    Operation {
        method: "model_instance",
        kind: Kind::Read(|kb, p, _| {
            let p: ModelInstanceParams = params(p)?;
            Ok(kb.model_instance(&p.model, &p.docid)?)
        }),
        long: false,
        tool: None,
    },
    Operation {
        method: "section_by_heading",
        kind: Kind::Read(|kb, p, _| {
            let p: SectionByHeadingParams = params(p)?;
            text(kb.section_by_heading(&p.docid, &p.heading)?)
        }),
        long: false,
        tool: None,
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn methods_and_tools_are_unique() {
        let methods: HashSet<&str> = OPERATIONS.iter().map(|o| o.method).collect();
        assert_eq!(methods.len(), OPERATIONS.len());
        let names: HashSet<&str> = tools().map(|(_, t)| t.name).collect();
        assert_eq!(names.len(), tools().count());
        assert_eq!(names.len(), 31);
    }

    #[test]
    fn tools_come_first_so_the_list_order_is_the_table_order() {
        let first_without = OPERATIONS.iter().position(|o| o.tool.is_none()).unwrap();
        assert!(OPERATIONS[first_without..].iter().all(|o| o.tool.is_none()));
    }

    /// A read-only tool is an operation of the read kind and the other way round: the
    /// annotation a host sees and the client's retry rule cannot disagree.
    #[test]
    fn read_only_tools_are_exactly_the_read_operations() {
        for (op, tool) in tools() {
            assert_eq!(
                tool.hints.read_only,
                matches!(op.kind, Kind::Read(_)),
                "{}",
                tool.name
            );
        }
    }

    #[test]
    fn only_reads_and_repeatable_syncs_are_retried() {
        let retried: Vec<&str> = OPERATIONS
            .iter()
            .filter(|o| o.idempotent())
            .map(|o| o.method)
            .filter(|m| !matches!(by_method(m).unwrap().kind, Kind::Read(_)))
            .collect();
        assert_eq!(retried, ["hello", "sync"]);
        for m in ["learn", "unlearn", "gc", "export", "import", "sync_forget"] {
            assert!(!by_method(m).unwrap().idempotent(), "{m}");
        }
    }

    /// `mode` and `search_mode` are parsed at the boundary into their enums, with the spec's
    /// error texts, as invalid input naming the field.
    #[test]
    fn search_modes_are_parsed_once_with_the_spec_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let kb = Kb::open_or_create(tmp.path()).unwrap().0;
        let err = |p: Value| match super::super::methods::call(&kb, "search", p, &|_, _| {}) {
            Err(CallError::Kb(e)) => (e.code().to_string(), e.to_string()),
            other => panic!("{:?}", other.map(|v| v.to_string())),
        };
        assert_eq!(
            err(json!({"query": "x", "mode": "bogus"})),
            (
                "invalid_input".into(),
                "mode: 'bogus' is not one of sections, documents, stats, lexical, vector, hybrid"
                    .into()
            )
        );
        assert_eq!(
            err(json!({"query": "x", "search_mode": "documents"})).1,
            "search_mode: 'documents' is not one of lexical, vector, hybrid"
        );
        for ok in [json!(" documents "), json!(""), Value::Null] {
            let r = super::super::methods::call(
                &kb,
                "search",
                json!({"query": "x", "mode": ok}),
                &|_, _| {},
            );
            assert!(r.is_ok(), "{ok}");
        }
    }

    /// Every typed handle names a row of the table (the rows take their method from the
    /// handles, so a handle without a row is the only way to go wrong).
    #[test]
    fn every_typed_handle_is_an_operation() {
        for m in op::ALL {
            assert!(
                by_method(m).is_some(),
                "{m}: not in the table of operations"
            );
        }
    }
}
