//! The MCP tool list: the 19 tools of `spec/kbdb-mcp.md`, in the spec's order, with
//! descriptions written for a model choosing between them, JSON Schemas of their arguments and
//! the annotations of the spec's "Tool Annotations" table.
//!
//! This module only describes the tools; `tools/call` dispatch lives beside it. Parameters
//! beyond the spec are kbdb's (docs/mcp.md): search `tags`/`type`/`docid`, learn `source`,
//! recall `max_chars`, export `with_indexes`/`force`. Search `mode` takes both specs' values:
//! `sections|documents|stats` (kbdb-mcp.md, the result shape) and `lexical|vector|hybrid`
//! (kbdb-hybrid-search.md, the retrieval path); the two sets are disjoint.

use serde_json::{Value, json};

/// Every tool definition, as the `tools` array of a `tools/list` result.
pub fn tool_definitions() -> Value {
    Value::Array(
        vec![
            search(),
            learn(),
            unlearn(),
            retrieve(),
            recall(),
            content(),
            status(),
            check(),
            gc(),
            rebuild(),
            export(),
            skill_learn(),
            skill_list(),
            skill_get(),
            skill_delete(),
            agent_create(),
            agent_list(),
            agent_get(),
            agent_delete(),
        ]
        .into_iter()
        .chain(super::collection_tools::definitions())
        .collect(),
    )
}

/// Tools whose result JSON the spec says is serialised with 2-space indentation (each tool's
/// "Returns" text says so).
pub fn pretty_tools() -> &'static [&'static str] {
    &[
        "search",
        "skill-list",
        "skill-get",
        "agent-list",
        "agent-get",
    ]
}

/// Tools whose result JSON the spec says is compact: `learn`, `unlearn`, `export`,
/// `skill-learn`, `skill-delete`, `agent-create`, `agent-delete` in their "Returns" text;
/// `content` in "Error Handling" ("`learn`, `unlearn`, and `content` return compact JSON").
///
/// In neither list — the spec's per-tool text says nothing about indentation: `retrieve`,
/// `recall`, `status`, `check`, `gc`, `rebuild`. ("Error Handling" says "most tools use 2-space
/// indentation", which would make them pretty; the CLI prints `retrieve`, `recall`, `status` and
/// `check` with 2 spaces and `gc`, `rebuild` compact.) The caller decides for these.
pub fn compact_tools() -> &'static [&'static str] {
    &[
        "learn",
        "unlearn",
        "content",
        "export",
        "skill-learn",
        "skill-delete",
        "agent-create",
        "agent-delete",
    ]
}

/// The spec's annotation hints, in table order: readOnly, destructive, idempotent, openWorld.
pub(crate) struct Hints(pub bool, pub bool, pub bool, pub bool);

pub(crate) fn tool(name: &str, title: &str, description: &str, schema: Value, h: Hints) -> Value {
    json!({
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": schema,
        "annotations": {
            "title": title,
            "readOnlyHint": h.0,
            "destructiveHint": h.1,
            "idempotentHint": h.2,
            "openWorldHint": h.3,
        },
    })
}

/// An object schema that rejects unknown properties.
pub(crate) fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn no_params() -> Value {
    object(json!({}), &[])
}

const KBID: &str = "a 26-character kbid, as returned by search, recall or learn";

fn search() -> Value {
    tool(
        "search",
        "Search KB",
        "Search the knowledge base: returns ranked sections, each with its heading, type, \
         docids, a ~150-character snippet around the matched words and the matched terms, so \
         you can judge relevance without reading whole sections. Start here, with several short \
         keyword queries rather than one long sentence: every word must match (stemmed, with \
         synonyms), and when no section has them all the search falls back to any word and \
         says `relaxed: true`; then call `recall` with the kbids worth reading. \"Quoted \
         phrases\" match adjacent words; there are no operators (AND/OR/NOT/- are plain \
         words). Pages hold at most 100 results; `mode: \"documents\"` groups hits by \
         document and `mode: \"stats\"` returns only counts.",
        object(
            json!({
                "query": {
                    "type": "string",
                    "description": "Keywords to look for. Only the first 32 words / 1,000 \
                                    characters are used (the result then warns \
                                    `query_truncated`)."
                },
                "mode": {
                    "type": "string",
                    "enum": ["sections", "documents", "stats", "lexical", "vector", "hybrid"],
                    "default": "sections",
                    "description": "Result shape or retrieval path. `sections` (default): one \
                                    item per matching section. `documents`: hits grouped by \
                                    document, best first (`total` counts documents). `stats`: \
                                    no items, only counts by type, tag and document and each \
                                    word's document frequency. `lexical` is the default \
                                    retrieval (keyword ranking) with `sections` results; \
                                    `vector` (meaning, by embedding similarity) and `hybrid` \
                                    (keywords and meaning fused by reciprocal rank) need an \
                                    embedding provider configured for the database \
                                    (EMBEDDING_PROVIDER_NOT_CONFIGURED otherwise); they return \
                                    `sections` results."
                },
                "search_mode": {
                    "type": "string",
                    "enum": ["lexical", "vector", "hybrid"],
                    "default": "lexical",
                    "description": "The retrieval path, stated explicitly (the same values as in \
                                    `mode`; giving both with different values is an error). \
                                    `hybrid` finds sections that say the same thing in other \
                                    words; when the stored vectors are of another model the \
                                    search answers lexically with `vector_index_stale: true`. \
                                    `vector` and `hybrid` pages end at offset + limit = 200."
                },
            "min_score": {
                    "type": "number",
                    "minimum": -1,
                    "maximum": 1,
                    "default": 0.15,
                    "description": "`vector` and `hybrid`: the relevance floor, the least cosine \
                                    similarity between the query and a section found by its \
                                    meaning (sections that hold the query's words stay in \
                                    `hybrid`). 0 lists every section; lexical search ignores it."
                },
                                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 20,
                    "description": "Results per page (1-100)."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 9999,
                    "default": 0,
                    "description": "Zero-based index of the first result, for paging; \
                                    `offset + limit` must not exceed 10,000. Use the previous \
                                    page's `has_more` to know whether to ask again."
                },
                "content": {
                    "type": "boolean",
                    "default": false,
                    "description": "Include each section's full text in its item. Usually \
                                    better left false: judge by snippets, then `recall` the \
                                    sections you need."
                },
                "tags": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "Only sections carrying all of these tags (kbdb filter; \
                                    does not change the ranking)."
                },
                "type": {
                    "type": "string",
                    "description": "Only sections of this MIME type, e.g. `text/markdown`, \
                                    `text/x-rust`, `image/png` (kbdb filter)."
                },
                "docid": {
                    "type": "string",
                    "description": "Only sections of this document (kbdb filter)."
                },
                "model": {
                    "type": "string",
                    "description": "Only sections of documents of this collection model (see \
                                    `inspect`)."
                },
                "where": {
                    "description": "Only sections of documents whose metadata matches — the \
                                    `where` of the `query` tool (object or array form).",
                    "anyOf": [{"type": "object"}, {"type": "array"}]
                }
            }),
            &["query"],
        ),
        Hints(true, false, true, false),
    )
}

fn learn() -> Value {
    tool(
        "learn",
        "Import Content",
        "Store durable knowledge — a fact, decision, correction, code snippet or image — as one \
         section; it is searchable at once. Give a short `title` (it is the section's heading \
         and weighs most in search; required for images) and `tags` for scoping; add a `docid` \
         to make it part of a document. To update something learned before, learn the new \
         version with `replace: true` and the same `docid` + `title` (or the same `source`): \
         the old section is superseded and its kbid returned in `superseded`. Identical \
         content is never stored twice; the result gives the new `kbid`, `warnings` and \
         `near_duplicates` (similar existing sections you may want to replace or unlearn).",
        object(
            json!({
                "content": {
                    "type": "string",
                    "description": "The text (markdown by default; source code or JSON for \
                                    those types), or base64-encoded image bytes for `image/*` \
                                    types. At most 10 MiB by default (`limits.max_content_bytes`)."
                },
                "type": {
                    "type": "string",
                    "default": "text/markdown",
                    "description": "MIME type: `text/markdown` (default), any other `text/*` \
                                    type (e.g. `text/plain`, `text/x-rust`, `text/x-python`), \
                                    `application/json` (must be valid JSON), or `image/*` \
                                    (e.g. `image/png`; `content` is base64 and `title` is \
                                    required)."
                },
                "title": {
                    "type": "string",
                    "description": "Section title (heading), at most 1,024 characters. Required \
                                    for `image/*` types. For markdown without a title, a first \
                                    line `# Heading` is taken as the title."
                },
                "description": {
                    "type": "string",
                    "description": "Optional summary of the section, at most 4,096 characters; \
                                    searchable."
                },
                "docid": {
                    "type": "string",
                    "description": "Add the section to this document (created when missing), \
                                    e.g. `decisions/storage`. At most 256 bytes; `/` separates \
                                    folders; no leading `/`, `..`, backslashes or control \
                                    characters. If the same content already exists, it is \
                                    attached to this document instead of being duplicated."
                },
                "tags": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "Tags for scoping and filtering (search `tags`); at most 64, \
                                    each at most 128 characters."
                },
                "replace": {
                    "type": "boolean",
                    "default": false,
                    "description": "Supersede the section(s) with the same source key: the new \
                                    section takes the old one's place in its documents and the \
                                    old one is removed. The source key is `source` when given, \
                                    else `docid#title` (`#title` without a docid)."
                },
                "source": {
                    "type": "string",
                    "description": "Explicit source key for `replace` (kbdb extension), e.g. a \
                                    file path or URL the content came from; at most 1,024 \
                                    characters. Defaults to `docid#title`."
                }
            }),
            &["content"],
        ),
        Hints(false, false, true, false),
    )
}

fn unlearn() -> Value {
    tool(
        "unlearn",
        "Remove Section",
        "Permanently remove one section by kbid, with its index entries and the references it \
         makes. Use for knowledge that is wrong or obsolete; to correct a section, prefer \
         `learn` with `replace: true`, which keeps its place in documents. A document whose \
         last section is removed is removed too; links from other sections to it stay, now \
         dangling. Returns `{removed, elapsed_ms}`; `removed: false` when no such section \
         exists.",
        object(
            json!({
                "kbid": {
                    "type": "string",
                    "description": format!("The section to remove: {KBID}.")
                }
            }),
            &["kbid"],
        ),
        Hints(false, true, true, false),
    )
}

fn retrieve() -> Value {
    tool(
        "retrieve",
        "Fetch Content",
        "Low-level fetch by identifier. With `kbid`: the section's stored content, as \
         `[{kbid, sectionType, content, size}]` (images as base64, `size` in bytes). With \
         `docid`: the document record (title, type, ordered kbids, each section's heading, \
         type and size, timestamps). Give `kbid` or `docid` (`kbid` wins when both are given). \
         To read knowledge prefer `recall` (content with headings, documents and references) \
         or `content` (a whole document as markdown).",
        object(
            json!({
                "kbid": {
                    "type": "string",
                    "description": format!("Section to fetch: {KBID}.")
                },
                "docid": {
                    "type": "string",
                    "description": "Document whose record to fetch."
                }
            }),
            &[],
        ),
        Hints(true, false, true, false),
    )
}

fn recall() -> Value {
    tool(
        "recall",
        "Recall Context",
        "Read sections in full, usually after `search`: each section's content, heading, type \
         and docids, plus context chosen by `depth` — 1: its documents' tables of contents and \
         the sections that link to it; 2: also the references it makes and the full text of \
         its sibling sections; 3: also the full text of the sections it references. Pass \
         `kbid` for one object or `kbids` for an array in the same order (give one of them). \
         Set `max_chars` to bound the added context; the requested sections themselves are \
         always returned whole, and a section whose context was cut carries \
         `truncated: true`. Unknown kbids are an error naming them.",
        object(
            json!({
                "kbid": {
                    "type": "string",
                    "description": format!(
                        "One section: {KBID}. The result is a single object (an array when \
                         `kbids` is also given; `kbid` is then appended)."
                    )
                },
                "kbids": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "Several sections; the result is an array in this order \
                                    (repeats dropped)."
                },
                "depth": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Context to add, 0-3: 0 the sections only (default); \
                                    1 + documents and back-references; 2 + forward references \
                                    and siblings' text; 3 + referenced sections' text. Values \
                                    above 3 are treated as 3."
                },
                "max_chars": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Budget, in characters of compact JSON, for the context \
                                    added by `depth` (kbdb extension). Context is added in a \
                                    fixed order and stops at the first piece that does not \
                                    fit. Omit for no limit."
                }
            }),
            &[],
        ),
        Hints(true, false, true, false),
    )
}

fn content() -> Value {
    tool(
        "content",
        "Compose Content",
        "Render sections and whole documents as one readable Markdown text, in the order \
         given. Use to read a complete document, or to assemble chosen sections into one \
         block of context. Accepts kbids and docids, mixed; a document renders as its title \
         and its sections in order, code sections are fenced, images become \
         `kbdb://section/<kbid>` links. Returns `{type: \"text/markdown\", data, total}` \
         (`total` = characters of `data`); unknown ids are an error naming them.",
        object(
            json!({
                "ids": {
                    "type": "array",
                    "items": { "type": "string" },
                    "minItems": 1,
                    "description": "kbids and/or docids, in the order to render them."
                }
            }),
            &["ids"],
        ),
        Hints(true, false, true, false),
    )
}

fn status() -> Value {
    tool(
        "status",
        "DB Status",
        "Report the knowledge base's state: the database path (`contextPath`), whether it is \
         ready, counts of sections and documents, schema version, change sequence, sizes and \
         how far the search index has caught up. Use to confirm which knowledge base you are \
         connected to, or whether it is empty, before searching. Cheap and read-only.",
        no_params(),
        Hints(true, false, true, false),
    )
}

fn check() -> Value {
    tool(
        "check",
        "Integrity Check",
        "Verify the knowledge base's integrity: content checksums, type mismatches, orphan \
         sections and documents, broken references, index agreement, circular references \
         (warnings) and divergent content — sections sharing a source key with different \
         content, i.e. contradictory versions to resolve with `learn` + `replace: true`. \
         Returns `{ok, errors: [{type, entity, detail}], warnings, sections_checked, \
         documents_checked, references_checked, elapsed_ms}`. It reads everything, so use it \
         when results look wrong, not routinely.",
        no_params(),
        Hints(true, false, true, false),
    )
}

fn gc() -> Value {
    tool(
        "gc",
        "Garbage Collect",
        "Permanently delete sections that no document lists any more and that were never \
         learned on their own — e.g. old sections left behind when a document was re-learned. \
         Sections learned without a docid are never collected. Returns `{removed_sections, \
         removed_bytes, elapsed_ms}` (all 0 when nothing is eligible). A housekeeping \
         task; not needed for searching or learning.",
        no_params(),
        Hints(false, true, false, false),
    )
}

fn rebuild() -> Value {
    tool(
        "rebuild",
        "Rebuild Indexes",
        "Rebuild the search index from the stored sections and documents; the stored \
         knowledge itself is not changed. Use only to recover: when `check` reports index \
         problems or search disagrees with what `retrieve` shows. Takes a while on a large \
         knowledge base. Returns `{sections_reindexed, terms_indexed, elapsed_ms}`.",
        no_params(),
        Hints(false, false, false, false),
    )
}

fn export() -> Value {
    tool(
        "export",
        "Export Snapshot",
        "Write a consistent snapshot of the knowledge base as plain files — sections, \
         document manifests and a catalog — for backup or versioning; indexes are left out \
         unless `with_indexes` (they can be rebuilt). The destination must be inside the \
         folder that contains the database folder, and absent or empty; `force` replaces an \
         earlier kbdb export there, and never any other folder. The snapshot appears \
         atomically. Returns `{path, sections_exported, documents_exported, \
         elapsed_ms}`.",
        object(
            json!({
                "path": {
                    "type": "string",
                    "default": "./kbdb-export/",
                    "description": "Destination folder (default `./kbdb-export/`). A relative \
                                    path is taken from the folder that holds the database \
                                    folder; a destination outside that folder is refused, as \
                                    is a symbolic link or the database folder itself."
                },
                "with_indexes": {
                    "type": "boolean",
                    "default": false,
                    "description": "Also write `indexes/` (the index files other programs can \
                                    read; derived data) (kbdb extension)."
                },
                "force": {
                    "type": "boolean",
                    "default": false,
                    "description": "Replace the destination when it is an earlier kbdb \
                                    export (recognised by its catalog.toml); any other \
                                    non-empty folder is refused (kbdb extension)."
                }
            }),
            &[],
        ),
        Hints(false, false, true, false),
    )
}

fn skill_learn() -> Value {
    tool(
        "skill-learn",
        "Create Skill",
        "Save a reusable prompt template (a skill) in the knowledge base. It is offered to \
         the host as an MCP prompt of the same name and can be attached to agents \
         (`agent-create`). `body` is the template, with `{{argName}}` placeholders; \
         placeholders not declared in `arguments` become required arguments automatically. \
         Returns the skill's `kbid`, `name` and final `arguments`.",
        object(
            json!({
                "name": {
                    "type": "string",
                    "description": "Skill name, kebab-case (lowercase letters and digits, \
                                    words joined by `-`), e.g. `summarize-document`; it is \
                                    also the prompt name."
                },
                "description": {
                    "type": "string",
                    "description": "What the skill does; shown in prompt lists."
                },
                "arguments": {
                    "type": "array",
                    "description": "Template arguments, in order. Optional: placeholders of \
                                    `body` not listed here are added as required arguments.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {
                                "type": "string",
                                "description": "Placeholder name as written in `{{...}}`."
                            },
                            "description": {
                                "type": "string",
                                "description": "What to pass for it."
                            },
                            "required": {
                                "type": "boolean",
                                "default": false,
                                "description": "Whether rendering the prompt needs a value."
                            }
                        },
                        "required": ["name"],
                        "additionalProperties": false
                    }
                },
                "body": {
                    "type": "string",
                    "description": "Template text with `{{argName}}` placeholders; must not be \
                                    empty. Omit it only when your client supports sampling: \
                                    kbdb then asks your model to draft the body from the \
                                    description."
                }
            }),
            &["name", "description"],
        ),
        Hints(false, false, true, false),
    )
}

fn skill_list() -> Value {
    tool(
        "skill-list",
        "List Skills",
        "List every stored skill as `[{kbid, name, description, argumentCount}]`. Use it to \
         find a skill's kbid for `skill-get`, `skill-delete` or `agent-create`.",
        no_params(),
        Hints(true, false, true, false),
    )
}

fn skill_get() -> Value {
    tool(
        "skill-get",
        "Get Skill",
        "Fetch one skill's full definition — `kbid`, `name`, `description`, `arguments` and \
         template `body` — by `name` or by `kbid` (give one; `kbid` wins when both are given). \
         Use `skill-list` to see which skills exist.",
        object(
            json!({
                "name": {
                    "type": "string",
                    "description": "Skill name to look up."
                },
                "kbid": {
                    "type": "string",
                    "description": "Skill kbid to look up."
                }
            }),
            &[],
        ),
        Hints(true, false, true, false),
    )
}

fn skill_delete() -> Value {
    tool(
        "skill-delete",
        "Delete Skill",
        "Permanently remove a skill by kbid. Agents that list it keep a dangling entry \
         (`agent-get` shows it with `name: null`). Returns `{kbid, removed: true}`.",
        object(
            json!({
                "kbid": {
                    "type": "string",
                    "description": "Kbid of the skill to remove (see `skill-list`)."
                }
            }),
            &["kbid"],
        ),
        Hints(false, true, true, false),
    )
}

fn agent_create() -> Value {
    tool(
        "agent-create",
        "Create Agent",
        "Define an agent: a persona (system prompt) plus an ordered list of skills, stored as \
         a document (docid `agent-<name>`) and offered to the host as the prompt \
         `agent:<name>`. Each entry of `skills` must be the kbid of an existing skill (see \
         `skill-list`; create missing ones with `skill-learn` first). Returns `{docid, name, \
         skills}`.",
        object(
            json!({
                "name": {
                    "type": "string",
                    "description": "Agent name, kebab-case (lowercase letters and digits, \
                                    words joined by `-`), e.g. `code-reviewer`."
                },
                "description": {
                    "type": "string",
                    "description": "What the agent does; shown in prompt lists."
                },
                "persona": {
                    "type": "string",
                    "description": "System prompt text for the agent."
                },
                "skills": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "Skill kbids, in the order the agent lists them."
                }
            }),
            &["name", "description", "persona", "skills"],
        ),
        Hints(false, false, true, false),
    )
}

fn agent_list() -> Value {
    tool(
        "agent-list",
        "List Agents",
        "List every agent as `[{docid, name, description, skillCount}]`. Use it to find an \
         agent's docid for `agent-get` or `agent-delete`.",
        no_params(),
        Hints(true, false, true, false),
    )
}

fn agent_get() -> Value {
    tool(
        "agent-get",
        "Get Agent",
        "Fetch one agent by docid: its `name`, `description`, `persona` and ordered `skills` \
         as `[{kbid, name, position}]`; a skill deleted since has `name: null`. Use \
         `skill-get` for a skill's template.",
        object(
            json!({
                "docid": {
                    "type": "string",
                    "description": "Agent document ID, `agent-<name>` (see `agent-list`)."
                }
            }),
            &["docid"],
        ),
        Hints(true, false, true, false),
    )
}

fn agent_delete() -> Value {
    tool(
        "agent-delete",
        "Delete Agent",
        "Remove an agent by docid. Only the agent document is deleted; the skills it lists \
         stay. Returns `{docid, removed: true}`.",
        object(
            json!({
                "docid": {
                    "type": "string",
                    "description": "Agent document ID, `agent-<name>` (see `agent-list`)."
                }
            }),
            &["docid"],
        ),
        Hints(false, true, true, false),
    )
}

/// Check a tool's arguments against the JSON types of its input schema, so that an argument of
/// the wrong type is refused with its name and the JSON type expected
/// (`limit: expected a non-negative integer, got the string "ten"`) rather than with the
/// deserialiser's words, which name Rust types (`expected u32`) and no field. Only types are
/// checked here (and that integers with a `minimum` of 0 or more are not negative); ranges,
/// formats and unknown fields are the engine's to refuse, with its own messages.
///
/// `null` stands for an absent optional argument (the engine takes it so) but not for a
/// required one, nor for an element of an array. The `limit`, `offset` and `sort` of `query`
/// are left to its own parser, which accepts more than the schema says (the reference server's
/// `limit: "all"`, numbers in strings, `sort` as an object) and names the field in its errors.
pub fn check_argument_types(
    tool: &str,
    args: &serde_json::Map<String, Value>,
) -> std::result::Result<(), String> {
    let lenient: &[&str] = match tool {
        "query" => &["limit", "offset", "sort"],
        _ => &[],
    };
    // Built once: this runs on every call.
    static DEFS: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let defs = DEFS.get_or_init(tool_definitions);
    let Some(schema) = defs
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == tool))
        .map(|t| &t["inputSchema"])
    else {
        return Ok(());
    };
    if lenient.is_empty() {
        return check_members(schema, args, "");
    }
    let strict: serde_json::Map<String, Value> = args
        .iter()
        .filter(|(k, _)| !lenient.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    check_members(schema, &strict, "")
}

/// The members of an object against the `properties` and `required` of its schema.
fn check_members(
    schema: &Value,
    members: &serde_json::Map<String, Value>,
    prefix: &str,
) -> std::result::Result<(), String> {
    let required = schema["required"].as_array();
    for (name, value) in members {
        let Some(p) = schema["properties"].get(name) else {
            continue;
        };
        let path = format!("{prefix}{name}");
        if value.is_null() {
            if required.is_some_and(|r| r.iter().any(|n| n == name.as_str())) {
                return Err(format!("{path}: expected {}, got null", expected(p)));
            }
            continue;
        }
        check_value(p, value, &path)?;
    }
    Ok(())
}

fn check_value(p: &Value, v: &Value, path: &str) -> std::result::Result<(), String> {
    if !matches_type(p, v) {
        return Err(format!(
            "{path}: expected {}, got {}",
            expected(p),
            describe(v)
        ));
    }
    match v {
        Value::Array(items) if p["items"].is_object() => {
            for (i, item) in items.iter().enumerate() {
                check_value(&p["items"], item, &format!("{path}[{i}]"))?;
            }
        }
        Value::Object(members) if p["properties"].is_object() => {
            check_members(p, members, &format!("{path}."))?;
        }
        _ => {}
    }
    Ok(())
}

/// Whether `v` is of the type `p` declares (any of them for `anyOf`; anything without one).
fn matches_type(p: &Value, v: &Value) -> bool {
    if let Some(any) = p["anyOf"].as_array() {
        return any.iter().any(|b| matches_type(b, v));
    }
    match p["type"].as_str() {
        Some("string") => v.is_string(),
        Some("boolean") => v.is_boolean(),
        Some("object") => v.is_object(),
        Some("array") => v.is_array(),
        Some("number") => v.is_number(),
        Some("integer") => match v {
            Value::Number(n) if non_negative(p) => n.is_u64(),
            Value::Number(n) => n.is_i64() || n.is_u64(),
            _ => false,
        },
        _ => true,
    }
}

fn non_negative(p: &Value) -> bool {
    p["minimum"].as_f64().is_some_and(|m| m >= 0.0)
}

/// What a schema asks for, in JSON words.
fn expected(p: &Value) -> String {
    if let Some(any) = p["anyOf"].as_array() {
        let each: Vec<String> = any.iter().map(expected).collect();
        return each.join(" or ");
    }
    match p["type"].as_str() {
        Some("string") => "a string".into(),
        Some("boolean") => "a boolean (true or false)".into(),
        Some("object") => "an object".into(),
        Some("number") => "a number".into(),
        Some("integer") if non_negative(p) => "a non-negative integer".into(),
        Some("integer") => "an integer".into(),
        Some("array") => match p["items"]["type"].as_str() {
            Some("string") => "an array of strings".into(),
            Some("object") => "an array of objects".into(),
            _ => "an array".into(),
        },
        _ => "a value".into(),
    }
}

/// A JSON value as an error message shows it: its type, and the value when short.
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// A deserialiser's message (`invalid type: string "x", expected u32`) with the Rust types it
/// names replaced by JSON ones: the last line of defence for a type error that the schema
/// check above did not catch (a number too large for its field).
pub fn without_rust_types(message: &str) -> String {
    const TYPES: &[(&str, &str)] = &[
        ("expected usize", "expected a non-negative integer"),
        ("expected u64", "expected a non-negative integer"),
        (
            "expected u32",
            "expected a non-negative integer of at most 4294967295",
        ),
        (
            "expected u16",
            "expected a non-negative integer of at most 65535",
        ),
        (
            "expected u8",
            "expected a non-negative integer of at most 255",
        ),
        ("expected isize", "expected an integer"),
        ("expected i64", "expected an integer"),
        (
            "expected i32",
            "expected an integer between -2147483648 and 2147483647",
        ),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected an object"),
        ("expected a borrowed string", "expected a string"),
    ];
    let mut out = message.to_string();
    for (rust, json) in TYPES {
        // Whole words only: `expected u8` must not touch `expected u8x`.
        let mut from = 0;
        while let Some(at) = out[from..].find(rust).map(|i| i + from) {
            let end = at + rust.len();
            if out[end..].starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                from = end;
                continue;
            }
            out.replace_range(at..end, json);
            from = at + json.len();
        }
    }
    // `expected struct SkillArgument` / `expected enum Mode`: a Rust name, not a JSON type.
    for (rust, json) in [
        ("expected struct ", "expected an object"),
        ("expected enum ", "expected one of the allowed values"),
    ] {
        while let Some(at) = out.find(rust) {
            let name_end = out[at + rust.len()..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(out.len(), |i| at + rust.len() + i);
            out.replace_range(at..name_end, json);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The spec's "Tool Annotations" table, row for row:
    /// tool, title, readOnly, destructive, idempotent, openWorld.
    const ANNOTATIONS: [(&str, &str, bool, bool, bool, bool); 19] = [
        ("search", "Search KB", true, false, true, false),
        ("learn", "Import Content", false, false, true, false),
        ("unlearn", "Remove Section", false, true, true, false),
        ("retrieve", "Fetch Content", true, false, true, false),
        ("recall", "Recall Context", true, false, true, false),
        ("content", "Compose Content", true, false, true, false),
        ("status", "DB Status", true, false, true, false),
        ("check", "Integrity Check", true, false, true, false),
        ("gc", "Garbage Collect", false, true, false, false),
        ("rebuild", "Rebuild Indexes", false, false, false, false),
        ("export", "Export Snapshot", false, false, true, false),
        ("skill-learn", "Create Skill", false, false, true, false),
        ("skill-list", "List Skills", true, false, true, false),
        ("skill-get", "Get Skill", true, false, true, false),
        ("skill-delete", "Delete Skill", false, true, true, false),
        ("agent-create", "Create Agent", false, false, true, false),
        ("agent-list", "List Agents", true, false, true, false),
        ("agent-get", "Get Agent", true, false, true, false),
        ("agent-delete", "Delete Agent", false, true, true, false),
    ];

    fn tools() -> Vec<Value> {
        tool_definitions().as_array().expect("an array").clone()
    }

    #[test]
    fn nineteen_tools_with_unique_names_in_spec_order() {
        // The kbdb spec's 19 tools in its order, then the 12 collection tools.
        let tools = tools();
        assert_eq!(tools.len(), 31);
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        let unique: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), 31);
        let expected: Vec<&str> = ANNOTATIONS.iter().map(|r| r.0).collect();
        assert_eq!(names[..19], expected);
    }

    #[test]
    fn annotations_match_the_spec_table() {
        for (t, row) in tools().iter().zip(ANNOTATIONS.iter()) {
            let (name, title, ro, destructive, idempotent, open) = *row;
            assert_eq!(t["name"], name);
            assert_eq!(t["title"], title, "{name}");
            let a = t["annotations"].as_object().unwrap();
            assert_eq!(a.len(), 5, "{name}: all five annotations");
            assert_eq!(a["title"], title, "{name}");
            assert_eq!(a["readOnlyHint"], ro, "{name}");
            assert_eq!(a["destructiveHint"], destructive, "{name}");
            assert_eq!(a["idempotentHint"], idempotent, "{name}");
            assert_eq!(a["openWorldHint"], open, "{name}");
        }
    }

    #[test]
    fn every_tool_has_a_description_of_a_few_sentences() {
        for t in tools() {
            let d = t["description"].as_str().unwrap();
            assert!(d.len() >= 60, "{}: {d}", t["name"]);
            assert!(!d.contains("  "), "{}: doubled space", t["name"]);
        }
    }

    /// Object schemas (the tool's and nested ones) reject unknown properties, and every
    /// required entry is a declared property.
    fn check_object(where_: &str, s: &Value) {
        assert_eq!(s["type"], "object", "{where_}");
        assert_eq!(s["additionalProperties"], false, "{where_}");
        let props = s["properties"].as_object().expect("properties");
        for r in s["required"].as_array().expect("required") {
            let r = r.as_str().unwrap();
            assert!(
                props.contains_key(r),
                "{where_}: required {r} not a property"
            );
        }
        for (k, p) in props {
            // A type, or alternatives (`where`: an object or an array).
            assert!(
                p["type"].is_string() || p["anyOf"].is_array(),
                "{where_}.{k}: type"
            );
            let d = p["description"].as_str().unwrap_or("");
            assert!(!d.is_empty(), "{where_}.{k}: description");
            assert!(!d.contains("  "), "{where_}.{k}: doubled space");
            if p["type"] == "array" {
                let items = &p["items"];
                if items["type"] == "object" {
                    check_object(&format!("{where_}.{k}[]"), items);
                } else {
                    assert!(items["type"].is_string(), "{where_}.{k}: items");
                }
            }
        }
    }

    #[test]
    fn schemas_are_closed_objects_and_required_fields_exist() {
        for t in tools() {
            check_object(t["name"].as_str().unwrap(), &t["inputSchema"]);
        }
    }

    #[test]
    fn required_parameters_follow_the_spec() {
        let expected: [(&str, &[&str]); 19] = [
            ("search", &["query"]),
            ("learn", &["content"]),
            ("unlearn", &["kbid"]),
            ("retrieve", &[]),
            ("recall", &[]),
            ("content", &["ids"]),
            ("status", &[]),
            ("check", &[]),
            ("gc", &[]),
            ("rebuild", &[]),
            ("export", &[]),
            ("skill-learn", &["name", "description"]),
            ("skill-list", &[]),
            ("skill-get", &[]),
            ("skill-delete", &["kbid"]),
            (
                "agent-create",
                &["name", "description", "persona", "skills"],
            ),
            ("agent-list", &[]),
            ("agent-get", &["docid"]),
            ("agent-delete", &["docid"]),
        ];
        for (t, (name, req)) in tools().iter().zip(expected) {
            assert_eq!(t["name"], name);
            let got: Vec<&str> = t["inputSchema"]["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(got, req, "{name}");
        }
    }

    #[test]
    fn parameters_of_the_spec_and_of_kbdb_are_declared() {
        let params = |name: &str| -> Vec<String> {
            let t = tools().into_iter().find(|t| t["name"] == name).unwrap();
            let mut v: Vec<String> = t["inputSchema"]["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            v.sort();
            v
        };
        let sorted = |xs: &[&str]| {
            let mut v: Vec<String> = xs.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        };
        assert_eq!(
            params("search"),
            sorted(&[
                "query",
                "mode",
                "search_mode",
                "limit",
                "offset",
                "content",
                "tags",
                "type",
                "docid",
                "model",
                "where",
                "min_score"
            ])
        );
        assert_eq!(
            params("learn"),
            sorted(&[
                "content",
                "type",
                "title",
                "description",
                "docid",
                "tags",
                "replace",
                "source"
            ])
        );
        assert_eq!(
            params("recall"),
            sorted(&["kbid", "kbids", "depth", "max_chars"])
        );
        assert_eq!(params("export"), sorted(&["path", "with_indexes", "force"]));
        assert_eq!(params("retrieve"), sorted(&["kbid", "docid"]));
        assert_eq!(params("skill-get"), sorted(&["name", "kbid"]));
        assert_eq!(
            params("skill-learn"),
            sorted(&["name", "description", "arguments", "body"])
        );
        for none in [
            "status",
            "check",
            "gc",
            "rebuild",
            "skill-list",
            "agent-list",
        ] {
            assert!(params(none).is_empty(), "{none}");
        }
    }

    #[test]
    fn search_modes_and_numeric_bounds() {
        let t = tools().into_iter().find(|t| t["name"] == "search").unwrap();
        let p = &t["inputSchema"]["properties"];
        assert_eq!(
            p["mode"]["enum"],
            json!([
                "sections",
                "documents",
                "stats",
                "lexical",
                "vector",
                "hybrid"
            ])
        );
        assert_eq!(p["mode"]["default"], "sections");
        assert_eq!(
            (&p["limit"]["minimum"], &p["limit"]["maximum"]),
            (&json!(1), &json!(100))
        );
        assert_eq!(p["limit"]["default"], 20);
        assert_eq!(p["offset"]["minimum"], 0);
        let r = tools().into_iter().find(|t| t["name"] == "recall").unwrap();
        let p = &r["inputSchema"]["properties"];
        assert_eq!(p["depth"]["minimum"], 0);
        assert_eq!(p["max_chars"]["minimum"], 0);
        assert_eq!(p["max_chars"]["type"], "integer");
    }

    #[test]
    fn output_format_lists_name_real_tools_and_do_not_overlap() {
        let names: HashSet<String> = tools()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        for n in pretty_tools().iter().chain(compact_tools()) {
            assert!(names.contains(*n), "{n}");
        }
        for n in pretty_tools() {
            assert!(!compact_tools().contains(n), "{n} in both lists");
        }
        for n in ["learn", "unlearn", "content", "export"] {
            assert!(compact_tools().contains(&n));
        }
        assert!(pretty_tools().contains(&"search"));
        // The spec's per-tool text is silent about these.
        for n in ["retrieve", "recall", "status", "check", "gc", "rebuild"] {
            assert!(
                !pretty_tools().contains(&n) && !compact_tools().contains(&n),
                "{n}"
            );
        }
    }

    #[test]
    fn definitions_serialise_on_one_line() {
        let s = serde_json::to_string(&tool_definitions()).unwrap();
        assert!(!s.contains('\n'));
    }

    #[test]
    fn argument_types_are_checked_against_the_schema_in_json_words() {
        let check =
            |tool: &str, args: Value| check_argument_types(tool, args.as_object().unwrap()).err();
        assert_eq!(check("search", json!({"query": "x", "limit": 5})), None);
        assert_eq!(
            check("search", json!({"query": "x", "limit": "ten"})).as_deref(),
            Some(r#"limit: expected a non-negative integer, got the string "ten""#)
        );
        assert_eq!(
            check("search", json!({"query": "x", "where": 3})).as_deref(),
            Some("where: expected an object or an array, got the number 3")
        );
        assert_eq!(
            check("recall", json!({"kbids": ["a", null]})).as_deref(),
            Some("kbids[1]: expected a string, got null")
        );
        // null for an optional argument is its absence; unknown fields are the engine's.
        assert_eq!(
            check("search", json!({"query": "x", "tags": null, "bogus": 1})),
            None
        );
        // The query tool's own parser takes limit/offset/sort more loosely than the schema.
        assert_eq!(
            check("query", json!({"limit": "all", "sort": {"a": "asc"}})),
            None
        );
        assert!(check("query", json!({"model": 1})).is_some());
        let long = "x".repeat(100);
        assert_eq!(
            check("learn", json!({"content": "c", "title": 7, "docid": long})).as_deref(),
            Some("title: expected a string, got the number 7")
        );
    }

    #[test]
    fn rust_type_names_become_json_words() {
        assert_eq!(
            without_rust_types("invalid type: string \"ten\", expected u32"),
            "invalid type: string \"ten\", expected a non-negative integer of at most 4294967295"
        );
        assert_eq!(
            without_rust_types("invalid type: map, expected struct SkillArgument or so"),
            "invalid type: map, expected an object or so"
        );
        assert_eq!(
            without_rust_types("invalid type: string \"x\", expected a sequence"),
            "invalid type: string \"x\", expected an array"
        );
        assert_eq!(without_rust_types("expected u8x"), "expected u8x");
    }
}
