//! The collection tools (contentbase-mcp-server.md, with the guidance of
//! contentbase-mcp-descriptions.md): documents are addressed by `pathId` (kbdb's docid).

use serde_json::{Value, json};

use super::tools::{Hints, object, tool};

/// The collection tools, in the order of the descriptions document.
pub fn definitions() -> Vec<Value> {
    let path_id = json!({
        "type": "string",
        "description": "The document's id (kbdb docid), e.g. `stories/login`."
    });
    vec![
        tool(
            "read_me",
            "Collection Guide",
            "Returns the content collection guide. Call this BEFORE working with any documents. \
             Contains model definitions, available tools, query syntax, and recommended \
             workflow. Call this at the start of every session to understand the collection \
             structure.",
            object(json!({}), &[]),
            Hints(true, false, true, false),
        ),
        tool(
            "inspect",
            "Inspect Collection",
            "Overview of the collection — registered models, document count, available actions. \
             Call `read_me` first if this is your first interaction.",
            object(json!({}), &[]),
            Hints(true, false, true, false),
        ),
        tool(
            "get_model_info",
            "Model Info",
            "Get detailed information about a single model — fields, sections, relationships, \
             example document. Use when you need to understand a model before creating or \
             editing its documents.",
            object(
                json!({"model": {"type": "string", "description": "Model name, e.g. `Story`."}}),
                &["model"],
            ),
            Hints(true, false, true, false),
        ),
        tool(
            "list_documents",
            "List Documents",
            "List all document path IDs in the collection, optionally filtered by model name or \
             prefix. The prefix before the slash indicates the model.",
            object(
                json!({
                    "model": {"type": "string", "description": "Only documents of this model."},
                    "prefix": {"type": "string", "description": "Only path IDs starting with this, e.g. `stories/`."}
                }),
                &[],
            ),
            Hints(true, false, true, false),
        ),
        tool(
            "query",
            "Query Documents",
            "Query typed model instances with MongoDB-style filtering. See `read_me` output for \
             full syntax reference. Where clause: keys are dot-notation paths, values are \
             literals (implies $eq), arrays (implies $in), or operator objects like \
             { \"$gt\": 5 }. Operators: $eq, $neq, $in, $notIn, $gt, $lt, $gte, $lte, \
             $contains, $startsWith, $endsWith, $regex, $exists. Supports sort, limit, offset, \
             select, and method (fetchAll/first/last/count). Results are lean — `{id, title, \
             model, meta}` — unless `select` asks for sections or related documents.",
            object(
                json!({
                    "model": {"type": "string", "description": "Model name (e.g. 'Epic', 'Story')."},
                    "where": {
                        "description": "Filter conditions (AND): an object `{\"meta.status\": \"ready\", \"points\": {\"$gte\": 3}}` or an array of `{path, operator, value}`. Paths: `id`, `title`, `model`, `meta.a.b`; a bare name means `meta.<name>`.",
                        "anyOf": [
                            {"type": "object"},
                            {"type": "array", "items": {
                                "type": "object",
                                "properties": {
                                    "path": {"type": "string"},
                                    "operator": {"type": "string"},
                                    "value": {}
                                },
                                "required": ["path"]
                            }}
                        ]
                    },
                    "sort": {
                        "description": "`meta.points` or `-meta.points` (descending), or an array of them.",
                        "anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "string"}}
                        ]
                    },
                    "limit": {"type": "integer", "minimum": 0, "description": "Most results (default 100 for fetchAll)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "Results to skip."},
                    "method": {
                        "type": "string",
                        "enum": ["fetchAll", "first", "last", "count"],
                        "default": "fetchAll",
                        "description": "fetchAll (a page of results; 100 unless `limit` says), first, last, or count."
                    },
                    "select": {
                        "type": "object",
                        "properties": {
                            "sections": {"type": "array", "items": {"type": "string"}, "description": "Headings whose text to include."},
                            "related": {"type": "array", "items": {"type": "string"}, "description": "Relationships whose documents to include."}
                        },
                        "description": "Which optional fields to include in results."
                    }
                }),
                &[],
            ),
            Hints(true, false, true, false),
        ),
        tool(
            "search_content",
            "Search Content",
            "Full-text regex search across all document content. Returns matching document IDs \
             with context. Searches document body text, not metadata — for metadata filtering, \
             use `query` instead.",
            object(
                json!({
                    "pattern": {"type": "string", "description": "Text or regex pattern to search for."},
                    "model": {"type": "string", "description": "Optional: limit to a specific model type."}
                }),
                &["pattern"],
            ),
            Hints(true, false, true, false),
        ),
        tool(
            "text_search",
            "Text Search",
            "Search file contents with pattern matching, ripgrep-style (documents stand for \
             files). Returns distinct file matches by default, or line-level detail with \
             expanded=true.",
            object(
                json!({
                    "pattern": {"type": "string", "description": "Text or regex pattern to search for."},
                    "expanded": {"type": "boolean", "default": false, "description": "Return line-level matches instead of just path IDs."},
                    "include": {"type": "string", "description": "Glob over path IDs (e.g. 'stories/*')."},
                    "exclude": {"type": "string", "description": "Glob over path IDs to leave out."},
                    "ignoreCase": {"type": "boolean", "default": false, "description": "Case insensitive search."},
                    "maxResults": {"type": "integer", "minimum": 1, "description": "Limit number of results (at most 1000)."}
                }),
                &["pattern"],
            ),
            Hints(true, false, true, false),
        ),
        tool(
            "validate",
            "Validate",
            "Validate a document against its model schema. Returns validation result with any \
             errors. **ALWAYS call after create/update operations** to confirm the document \
             conforms to its model.",
            object(
                json!({
                    "target": {"type": "string", "description": "A pathId ('stories/login'), a model name ('Story'), or 'all' (default)."},
                    "pathId": {"type": "string", "description": "Same as target, for one document."}
                }),
                &[],
            ),
            Hints(true, false, true, false),
        ),
        tool(
            "create_document",
            "Create Document",
            "**ALWAYS use this instead of writing markdown files directly.** Creates a new \
             document with proper scaffolding from a model definition — generates correct \
             frontmatter defaults and section headings. Call `validate` after creation (the \
             result already carries a first validation).",
            object(
                json!({
                    "model": {"type": "string", "description": "Model name."},
                    "title": {"type": "string", "description": "Document title."},
                    "meta": {"type": "object", "description": "Frontmatter values (merged over defaults)."},
                    "content": {"type": "string", "description": "Optional: full markdown body (overrides scaffolding)."},
                    "pathId": {"type": "string", "description": "Optional: the path ID (default: the model's folder and the title's slug)."}
                }),
                &["model", "title"],
            ),
            Hints(false, false, false, false),
        ),
        tool(
            "update_document",
            "Update Document",
            "Update a document's frontmatter and/or replace its entire content body. Use for \
             frontmatter changes (a null value removes a key). For section-level edits, prefer \
             `update_section` instead. Call `validate` after.",
            object(
                json!({
                    "pathId": path_id.clone(),
                    "meta": {"type": "object", "description": "Fields to merge into frontmatter."},
                    "content": {"type": "string", "description": "Replace the entire markdown body."},
                    "title": {"type": "string", "description": "A new title."}
                }),
                &["pathId"],
            ),
            Hints(false, true, false, false),
        ),
        tool(
            "update_section",
            "Update Section",
            "Preferred way to edit document content. Surgically edit a specific section — \
             replace, append, or remove (or insert a new block before or after it). Target a \
             section by its heading name (case-insensitive); when a heading appears more than \
             once, `occurrence` picks one. Call `validate` after.",
            object(
                json!({
                    "pathId": path_id.clone(),
                    "heading": {"type": "string", "description": "Section heading text."},
                    "action": {"type": "string", "enum": ["replace", "append", "remove", "insert_before", "insert_after"], "description": "replace the section's body, append to it, remove the section, or insert a new block before or after it."},
                    "content": {"type": "string", "description": "Markdown content (required for all but remove)."},
                    "occurrence": {"type": "integer", "minimum": 1, "description": "Which of several sections with this heading (1-based)."}
                }),
                &["pathId", "heading", "action"],
            ),
            Hints(false, true, false, false),
        ),
        tool(
            "delete_document",
            "Delete Document",
            "Delete a document from the collection permanently. Cannot be undone except through \
             version control (or an export). Its sections leave search with it, except those \
             another document holds or that were learned on their own.",
            object(json!({"pathId": path_id}), &["pathId"]),
            Hints(false, true, true, false),
        ),
    ]
}

/// The daemon method behind a collection tool.
pub fn method_of(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "read_me" => "primer",
        "inspect" => "inspect",
        "get_model_info" => "model_info",
        "list_documents" => "list_collection",
        "query" => "query",
        "search_content" => "search_content",
        "text_search" => "text_search",
        "validate" => "validate",
        "create_document" => "create_document",
        "update_document" => "update_document",
        "update_section" => "update_section",
        "delete_document" => "delete_document",
        _ => return None,
    })
}
