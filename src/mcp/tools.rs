//! The MCP tools: the operations of the table (`daemon::operations`) that have a tool, in the
//! table's order — the 19 tools of `spec/kbdb-mcp.md` in the spec's order, then the 12
//! collection tools — with the descriptions, annotations and input schemas the table gives
//! (the schemas are generated from the parameter types, `daemon::params`).
//!
//! Parameters beyond the spec are kbdb's (docs/mcp.md): search `tags`/`type`/`docid`, learn
//! `source`, recall `max_chars`, export `with_indexes`/`force`. Search `mode` takes both specs'
//! values: `sections|documents|stats` (kbdb-mcp.md, the result shape) and
//! `lexical|vector|hybrid` (kbdb-hybrid-search.md, the retrieval path); the two sets are
//! disjoint.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::daemon::operations::{self, Operation, Output, Tool};

/// Every tool definition, as the `tools` array of a `tools/list` result (built once).
pub fn tool_definitions() -> Value {
    definitions().clone()
}

fn definitions() -> &'static Value {
    static DEFS: OnceLock<Value> = OnceLock::new();
    DEFS.get_or_init(|| Value::Array(operations::tools().map(|(_, t)| definition(t)).collect()))
}

fn definition(t: &Tool) -> Value {
    json!({
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "inputSchema": (t.schema)(),
        "annotations": {
            "title": t.title,
            "readOnlyHint": t.hints.read_only,
            "destructiveHint": t.hints.destructive,
            "idempotentHint": t.hints.idempotent,
            "openWorldHint": t.hints.open_world,
        },
    })
}

/// The input schema of a tool (None: no such tool).
fn input_schema(tool: &str) -> Option<&'static Value> {
    definitions()
        .as_array()?
        .iter()
        .find(|t| t["name"] == tool)
        .map(|t| &t["inputSchema"])
}

/// A tool's JSON result as its text: compact for the tools whose spec text says so, 2-space
/// JSON for the others (see [`Output`]).
pub fn result_text(tool: &str, v: &Value) -> String {
    match operations::by_tool(tool).and_then(|o| o.tool.as_ref()) {
        Some(Tool {
            output: Output::Compact,
            ..
        }) => v.to_string(),
        _ => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

/// A tool's arguments as the parameters of the daemon method behind it, for the database in
/// `db_dir`: after the type check, the method and its parameters.
pub fn method_call(
    db_dir: &Path,
    name: &str,
    mut args: serde_json::Map<String, Value>,
) -> std::result::Result<(&'static str, Value), String> {
    check_argument_types(name, &args)?;
    let op: &Operation =
        operations::by_tool(name).ok_or_else(|| format!("Unknown tool: {name}"))?;
    if op.method == "export" {
        // Exports stay under the folder that holds the database (docs/file-layout.md);
        // relative paths are taken from there, not from the host's working directory.
        let root = db_dir
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| db_dir.to_path_buf());
        let path = args
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("kbdb-export");
        args.insert("path".into(), json!(root.join(path)));
        args.insert("confine_to".into(), json!(root));
    }
    Ok((op.method, Value::Object(args)))
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
    let lenient: &[&str] = operations::by_tool(tool)
        .and_then(|o| o.tool.as_ref())
        .map_or(&[], |t| t.lenient);
    let Some(schema) = input_schema(tool) else {
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
    fn output_formats_follow_the_spec_text() {
        let output = |name: &str| {
            operations::by_tool(name)
                .unwrap()
                .tool
                .as_ref()
                .unwrap()
                .output
        };
        // "Returns" texts: compact for these; `content` in "Error Handling".
        for n in [
            "learn",
            "unlearn",
            "content",
            "export",
            "skill-learn",
            "skill-delete",
            "agent-create",
            "agent-delete",
        ] {
            assert_eq!(output(n), Output::Compact, "{n}");
        }
        for n in [
            "search",
            "skill-list",
            "skill-get",
            "agent-list",
            "agent-get",
        ] {
            assert_eq!(output(n), Output::Pretty, "{n}");
        }
        // The spec's per-tool text is silent about these.
        for n in ["retrieve", "recall", "status", "check", "gc", "rebuild"] {
            assert_eq!(output(n), Output::Unstated, "{n}");
        }
        assert_eq!(result_text("learn", &json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(result_text("status", &json!({"a": 1})), "{\n  \"a\": 1\n}");
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

    /// The docs list what is served: every tool in docs/mcp.md, their count in README.md and
    /// docs/mcp.md, every method in docs/daemon.md.
    #[test]
    fn the_docs_list_every_tool_and_method_of_the_table() {
        let mcp = include_str!("../../docs/mcp.md");
        let readme = include_str!("../../README.md");
        let daemon = include_str!("../../docs/daemon.md");
        let count = format!("{} tools", operations::tools().count());
        assert!(readme.contains(&count), "README.md does not say {count}");
        assert!(mcp.contains(&count), "docs/mcp.md does not say {count}");
        for (_, t) in operations::tools() {
            assert!(
                mcp.contains(&format!("`{}`", t.name)),
                "docs/mcp.md: {}",
                t.name
            );
        }
        for op in operations::OPERATIONS {
            assert!(
                daemon.contains(&format!("`{}`", op.method)),
                "docs/daemon.md: {}",
                op.method
            );
        }
    }
}
