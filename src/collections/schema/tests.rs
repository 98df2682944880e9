use serde_json::{Map, Value, json};

use super::docid_glob::Glob;
use super::validation::quote;
use super::*;

const STORIES: &str = r#"
[[model]]
name = "Story"
prefix = "stories/"
description = "A user story"

[model.fields.status]
type = "enum"
values = ["draft", "ready", "done"]
default = "draft"
required = true
description = "Workflow state"

[model.fields.points]
type = "number"

[model.fields.due]
type = "date"

[model.fields.labels]
type = "array"
items = "string"

[model.fields.flag]
type = "boolean"

[model.fields.owner]
type = "string"

[[model.sections]]
heading = "Acceptance Criteria"
alternatives = ["Criteria", "AC"]
required = true

[[model.sections]]
heading = "Notes"

[model.relationships.epic]
type = "belongsTo"
model = "epic"
field = "epic"

[[model]]
name = "Epic"
pattern = "epics/*"

[model.fields.owner]
type = "string"
required = true

[model.relationships.stories]
type = "hasMany"
model = "Story"
heading = "Stories"
"#;

fn set() -> ModelSet {
    ModelSet::from_toml(STORIES).unwrap()
}

fn meta(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn err(toml: &str) -> String {
    ModelSet::from_toml(toml).unwrap_err().to_string()
}

fn one(fields: &str) -> String {
    format!("[[model]]\nname = \"M\"\nprefix = \"m/\"\n{fields}")
}

// ---- loading -------------------------------------------------------------------------

#[test]
fn loads_models_in_order_with_fields_in_declaration_order() {
    let s = set();
    let names: Vec<&str> = s.all().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["Story", "Epic", "Base"]);
    let story = s.get("story").unwrap();
    let fields: Vec<&str> = story.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        fields,
        ["status", "points", "due", "labels", "flag", "owner"]
    );
    let status = story.field("status").unwrap();
    assert_eq!(status.field_type, FieldType::Enum);
    assert_eq!(status.default, Some(json!("draft")));
    assert!(status.required);
    assert_eq!(
        story.field("labels").unwrap().items,
        Some(FieldType::String)
    );
    assert_eq!(story.sections[0].alternatives, ["Criteria", "AC"]);
    // The target model's spelling is canonicalized.
    assert_eq!(story.relationship("epic").unwrap().model, "Epic");
    assert_eq!(s.get("EPIC").unwrap().name, "Epic");
    assert_eq!(s.get("base").unwrap().name, "Base");
    assert!(s.get("nope").is_none());
}

#[test]
fn empty_file_has_only_base() {
    let s = ModelSet::from_toml("").unwrap();
    assert!(s.is_empty());
    assert_eq!(s.all().count(), 1);
    assert_eq!(s.model_for("x", &Map::new()).name, "Base");
    assert_eq!(s, ModelSet::new());
}

#[test]
fn unknown_keys_are_rejected_with_their_line() {
    let e = err("[[model]]\nname = \"A\"\nprefx = \"a/\"\n");
    assert!(e.contains("prefx") && e.contains("line 3"), "{e}");
    let e = err(&one(
        "[model.fields.x]\ntype = \"string\"\nrequird = true\n",
    ));
    assert!(e.contains("requird"), "{e}");
    let e = err(&one("[[model.sections]]\nheading = \"A\"\nalt = []\n"));
    assert!(e.contains("alt"), "{e}");
    let e = err(&one(
        "[model.relationships.r]\ntype = \"hasMany\"\nmodel = \"M\"\nheading = \"H\"\nextra = 1\n",
    ));
    assert!(e.contains("extra"), "{e}");
    let e = err("models = []\n");
    assert!(e.contains("models"), "{e}");
    let e = err("[[model]]\nprefix = \"a/\"\n");
    assert!(e.contains("name"), "{e}");
    assert!(err("[[model]\n").starts_with("invalid models file"));
}

#[test]
fn model_name_rules() {
    let e = err("[[model]]\nname = \"A\"\n[[model]]\nname = \"a\"\n");
    assert!(e.starts_with("model a: name: duplicate model name"), "{e}");
    let e = err("[[model]]\nname = \"Base\"\n");
    assert!(
        e.contains("model Base: name:") && e.contains("built-in"),
        "{e}"
    );
    let e = err("[[model]]\nname = \"base\"\n");
    assert!(e.contains("cannot be redefined"), "{e}");
    let e = err("[[model]]\nname = \"A\"\n[[model]]\nname = \"my model\"\n");
    assert!(
        e.starts_with("model #2: name:") && e.contains("\"my model\""),
        "{e}"
    );
    let e = err("[[model]]\nname = \"\"\n");
    assert!(e.starts_with("model #1: name:"), "{e}");
}

#[test]
fn prefix_and_pattern_rules() {
    let e = err("[[model]]\nname = \"A\"\nprefix = \"a/\"\npattern = \"a/*\"\n");
    assert_eq!(e, "model A: pattern: set prefix or pattern, not both");
    let e = err("[[model]]\nname = \"A\"\nprefix = \"\"\n");
    assert!(e.starts_with("model A: prefix: must not be empty"), "{e}");
    let e = err("[[model]]\nname = \"A\"\nprefix = \"/a\"\n");
    assert!(e.starts_with("model A: prefix:"), "{e}");
    for bad in [
        "", "/a/*", "a//b", "a/", "a/[ab]", "a/b**", "a/**/**", "a/{x,y}",
    ] {
        let e = err(&format!(
            "[[model]]\nname = \"A\"\npattern = {}\n",
            quote(bad)
        ));
        assert!(e.starts_with("model A: pattern:"), "{bad}: {e}");
    }
    let e = err("[[model]]\nname = \"A\"\npattern = \"a/b**\"\n");
    assert!(e.contains("bad glob") && e.contains("whole segment"), "{e}");
}

#[test]
fn field_rules() {
    let cases = [
        (
            "[model.fields.x]\ntype = \"strng\"\n",
            "fields.x.type: unknown type \"strng\"",
        ),
        (
            "[model.fields.x]\ntype = \"enum\"\n",
            "fields.x.values: an enum needs its values",
        ),
        (
            "[model.fields.x]\ntype = \"enum\"\nvalues = []\n",
            "fields.x.values: an enum needs at least one value",
        ),
        (
            "[model.fields.x]\ntype = \"enum\"\nvalues = [\"a\", \"a\"]\n",
            "fields.x.values: \"a\" is listed twice",
        ),
        (
            "[model.fields.x]\ntype = \"string\"\nvalues = [\"a\"]\n",
            "fields.x.values: only enum fields",
        ),
        (
            "[model.fields.x]\ntype = \"string\"\nitems = \"string\"\n",
            "fields.x.items: only array fields take items",
        ),
        (
            "[model.fields.x]\ntype = \"array\"\nitems = \"array\"\n",
            "fields.x.items: arrays of arrays",
        ),
        (
            "[model.fields.x]\ntype = \"array\"\nitems = \"thing\"\n",
            "fields.x.items: unknown type \"thing\"",
        ),
        (
            "[model.fields.x]\ntype = \"array\"\nitems = \"enum\"\n",
            "fields.x.values: an enum needs its values",
        ),
        (
            "[model.fields._x]\ntype = \"string\"\n",
            "fields._x: metadata keys starting with _ are reserved",
        ),
        (
            "[model.fields.x]\ntype = \"number\"\ndefault = \"three\"\n",
            "fields.x.default: expected a number, got the string \"three\"",
        ),
        (
            "[model.fields.x]\ntype = \"enum\"\nvalues = [\"a\", \"b\"]\ndefault = \"c\"\n",
            "fields.x.default: expected one of \"a\", \"b\", got the string \"c\"",
        ),
        (
            "[model.fields.x]\ntype = \"date\"\ndefault = \"soon\"\n",
            "fields.x.default: expected a date",
        ),
        (
            "[model.fields.x]\ntype = \"boolean\"\ndefault = 1\n",
            "fields.x.default: expected a boolean",
        ),
        (
            "[model.fields.x]\ntype = \"array\"\nitems = \"number\"\ndefault = [1, \"b\"]\n",
            "fields.x.default[1]: expected a number, got the string \"b\"",
        ),
        (
            "[model.fields.x]\ntype = \"array\"\ndefault = \"a\"\n",
            "fields.x.default: expected an array",
        ),
        (
            "[model.fields.x]\ntype = \"string\"\ndefault = { a = 1 }\n",
            "fields.x.default: expected a string, got an object",
        ),
    ];
    for (toml, want) in cases {
        let e = err(&one(toml));
        assert!(e.starts_with(&format!("model M: {want}")), "{toml}\n→ {e}");
    }
}

#[test]
fn valid_defaults_load_and_toml_dates_become_strings() {
    let s = ModelSet::from_toml(&one(
        "[model.fields.d]\ntype = \"date\"\ndefault = 2024-03-01\n\
         [model.fields.t]\ntype = \"date\"\ndefault = 2024-03-01T10:00:00Z\n\
         [model.fields.n]\ntype = \"number\"\ndefault = 1.5\n\
         [model.fields.l]\ntype = \"array\"\nitems = \"enum\"\nvalues = [\"x\", \"y\"]\ndefault = [\"y\"]\n",
    ))
    .unwrap();
    let m = s.get("M").unwrap();
    assert_eq!(m.field("d").unwrap().default, Some(json!("2024-03-01")));
    assert_eq!(
        m.field("t").unwrap().default,
        Some(json!("2024-03-01T10:00:00Z"))
    );
    assert_eq!(m.field("n").unwrap().default, Some(json!(1.5)));
    assert_eq!(m.defaults().len(), 4);
}

#[test]
fn section_rules() {
    let e = err(&one("[[model.sections]]\nheading = \" \"\n"));
    assert_eq!(e, "model M: sections[0].heading: must not be empty");
    let e = err(&one(
        "[[model.sections]]\nheading = \"Notes\"\n[[model.sections]]\nheading = \"Other\"\nalternatives = [\"notes\"]\n",
    ));
    assert!(
        e.starts_with("model M: sections[1].heading: \"notes\" is already"),
        "{e}"
    );
    let e = err(&one(
        "[[model.sections]]\nheading = \"A\"\nalternatives = [\"\"]\n",
    ));
    assert!(
        e.starts_with("model M: sections[0].alternatives[0]: must not be empty"),
        "{e}"
    );
}

#[test]
fn relationship_rules() {
    let cases = [
        (
            "type = \"belongs_to\"\nmodel = \"M\"\nfield = \"f\"\n",
            "relationships.r.type: unknown relationship type \"belongs_to\"",
        ),
        (
            "type = \"belongsTo\"\nmodel = \"Nope\"\nfield = \"f\"\n",
            "relationships.r.model: no model named \"Nope\" (models: M, Base)",
        ),
        (
            "type = \"belongsTo\"\nmodel = \"M\"\n",
            "relationships.r.field: a belongsTo relationship needs",
        ),
        (
            "type = \"belongsTo\"\nmodel = \"M\"\nfield = \"f\"\nheading = \"H\"\n",
            "relationships.r.heading: a belongsTo",
        ),
        (
            "type = \"belongsTo\"\nmodel = \"M\"\nfield = \"_f\"\n",
            "relationships.r.field: metadata keys starting with _",
        ),
        (
            "type = \"hasMany\"\nmodel = \"M\"\n",
            "relationships.r.heading: a hasMany relationship needs",
        ),
        (
            "type = \"hasMany\"\nmodel = \"M\"\nheading = \"H\"\nfield = \"f\"\n",
            "relationships.r.field: a hasMany",
        ),
        (
            "type = \"hasMany\"\nmodel = \" \"\nheading = \"H\"\n",
            "relationships.r.model: must name the target model",
        ),
    ];
    for (body, want) in cases {
        let e = err(&one(&format!("[model.relationships.r]\n{body}")));
        assert!(e.starts_with(&format!("model M: {want}")), "{body}\n→ {e}");
    }
    let e = err(&one(
        "[model.fields.f]\ntype = \"number\"\n[model.relationships.r]\ntype = \"belongsTo\"\nmodel = \"M\"\nfield = \"f\"\n",
    ));
    assert!(
        e.contains("relationships.r.field: field \"f\" is declared as number"),
        "{e}"
    );
    // A later model and Base are valid targets.
    ModelSet::from_toml(
        "[[model]]\nname = \"A\"\n[model.relationships.b]\ntype = \"hasMany\"\nmodel = \"B\"\nheading = \"Bs\"\n\
         [model.relationships.any]\ntype = \"belongsTo\"\nmodel = \"base\"\nfield = \"parent\"\n\
         [[model]]\nname = \"B\"\n",
    )
    .unwrap();
}

#[test]
fn to_toml_round_trips() {
    let s = set();
    let text = s.to_toml();
    let back = ModelSet::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(back, s);
    assert!(text.starts_with("[[model]]\nname = \"Story\"\n"), "{text}");
    assert!(
        text.contains("[model.fields.status]\ntype = \"enum\""),
        "{text}"
    );
    // Odd keys, escapes, every optional attribute.
    let tricky = ModelSet::from_toml(
        "[[model]]\nname = \"X\"\ndescription = \"multi\\nline \\\"quoted\\\"\"\npattern = \"docs/**/adr-*\"\n\
         [model.fields.\"due date\"]\ntype = \"date\"\ndefault = 2024-01-02\ndescription = \"d\"\n\
         [model.fields.n]\ntype = \"number\"\ndefault = 3\nrequired = true\n\
         [model.fields.f]\ntype = \"number\"\ndefault = 3.0\n\
         [model.fields.tags]\ntype = \"array\"\nitems = \"enum\"\nvalues = [\"a\", \"b\"]\ndefault = []\n\
         [[model.sections]]\nheading = \"H\"\nalternatives = [\"h2\"]\nrequired = true\ndescription = \"s\"\n\
         [model.relationships.\"the parent\"]\ntype = \"belongsTo\"\nmodel = \"X\"\nfield = \"parent\"\ndescription = \"r\"\n\
         [[model]]\nname = \"Y\"\n",
    )
    .unwrap();
    let text = tricky.to_toml();
    assert_eq!(ModelSet::from_toml(&text).unwrap(), tricky, "{text}");
    assert_eq!(ModelSet::new().to_toml(), "");
}

// ---- model_for -----------------------------------------------------------------------

#[test]
fn model_for_precedence() {
    let s = ModelSet::from_toml(
        "[[model]]\nname = \"Doc\"\nprefix = \"docs/\"\n\
         [[model]]\nname = \"Adr\"\npattern = \"docs/adr/*\"\n\
         [[model]]\nname = \"Deep\"\npattern = \"docs/**/deep\"\n\
         [[model]]\nname = \"Manual\"\n\
         [[model]]\nname = \"Same\"\nprefix = \"docs/adr/\"\n",
    )
    .unwrap();
    let none = Map::new();
    let name = |d: &str, m: &Map<String, Value>| s.model_for(d, m).name.clone();
    assert_eq!(name("docs/intro", &none), "Doc");
    // The longest literal part wins; on a tie the earlier model.
    assert_eq!(name("docs/adr/one", &none), "Adr");
    assert_eq!(name("docs/adr/one/two", &none), "Same");
    assert_eq!(name("docs/a/b/deep", &none), "Deep");
    assert_eq!(name("docs/deep", &none), "Deep");
    assert_eq!(name("notes/x", &none), "Base");
    // `_model` wins, case-insensitively; an unknown name falls back to the docid.
    assert_eq!(
        name("notes/x", &meta(json!({"_model": "manual"}))),
        "Manual"
    );
    assert_eq!(name("docs/adr/1", &meta(json!({"_model": "DOC"}))), "Doc");
    assert_eq!(name("docs/adr/1", &meta(json!({"_model": "base"}))), "Base");
    assert_eq!(name("docs/x", &meta(json!({"_model": "Nope"}))), "Doc");
    assert_eq!(name("docs/x", &meta(json!({"_model": 3}))), "Doc");
}

#[test]
fn globs() {
    let g = |p: &str| Glob::compile(p).unwrap();
    assert!(g("stories/*").matches("stories/a"));
    assert!(!g("stories/*").matches("stories/a/b"));
    assert!(!g("stories/*").matches("stories"));
    assert!(g("stories/**").matches("stories/a/b"));
    assert!(!g("stories/**").matches("stories"));
    assert!(g("**/readme").matches("readme"));
    assert!(g("**/readme").matches("a/b/readme"));
    assert!(g("a/**/b").matches("a/b"));
    assert!(g("a/**/b").matches("a/x/y/b"));
    assert!(!g("a/**/b").matches("a/x/c"));
    assert!(g("adr-*").matches("adr-001"));
    assert!(g("adr-??1").matches("adr-001"));
    assert!(!g("adr-?").matches("adr-01"));
    assert!(g("*").matches("x"));
    assert!(!g("*").matches("x/y"));
    assert_eq!(g("docs/adr/*").literal_chars, 9);
}

#[test]
fn docid_prefixes() {
    let s = set();
    assert_eq!(s.get("Story").unwrap().docid_prefix(), "stories/");
    assert_eq!(s.get("Epic").unwrap().docid_prefix(), "epics/");
    assert_eq!(s.base().docid_prefix(), "");
    let p = ModelSet::from_toml(
        "[[model]]\nname = \"A\"\npattern = \"docs/**/adr-*\"\n[[model]]\nname = \"B\"\npattern = \"exact/name\"\n",
    )
    .unwrap();
    assert_eq!(p.get("A").unwrap().docid_prefix(), "docs/");
    assert_eq!(p.get("B").unwrap().docid_prefix(), "");
}

// ---- validation ----------------------------------------------------------------------

fn secs<'a>(list: &'a [(u8, &'a str, &'a str)]) -> Vec<DocSection<'a>> {
    list.iter()
        .map(|&(level, heading, text)| DocSection {
            level,
            heading,
            text,
        })
        .collect()
}

const AC: &[(u8, &str, &str)] = &[
    (1, "Login", "# Login"),
    (2, "Acceptance Criteria", "## Acceptance Criteria\n- works"),
];

fn check(docid: &str, m: Value, sections: &[(u8, &str, &str)], existing: &[&str]) -> Validation {
    let s = set();
    let m = meta(m);
    let sections = secs(sections);
    let doc = DocInput {
        docid,
        title: Some("T"),
        meta: &m,
        sections: &sections,
    };
    validate(&s, &doc, &|d| existing.contains(&d))
}

fn errors(v: &Validation) -> Vec<String> {
    v.errors.iter().map(ToString::to_string).collect()
}

#[test]
fn a_good_document_is_valid() {
    let v = check(
        "stories/login",
        json!({"status": "ready", "points": 3, "due": "2024-05-01", "labels": ["a"], "flag": false, "owner": "ann", "_x": 1}),
        AC,
        &[],
    );
    assert!(v.valid, "{v:?}");
    assert!(v.errors.is_empty() && v.warnings.is_empty(), "{v:?}");
    assert_eq!(v.model, "Story");
    assert_eq!(v.docid, "stories/login");
}

#[test]
fn required_field_missing_or_null() {
    let v = check("stories/a", json!({}), AC, &[]);
    assert_eq!(errors(&v), ["meta.status: required"]);
    assert!(!v.valid);
    let v = check("stories/a", json!({"status": null}), AC, &[]);
    assert_eq!(errors(&v), ["meta.status: required"]);
    // Optional fields may be null or absent.
    let v = check(
        "stories/a",
        json!({"status": "done", "points": null}),
        AC,
        &[],
    );
    assert!(v.valid, "{v:?}");
}

#[test]
fn wrong_types() {
    let v = check(
        "stories/a",
        json!({"status": "draft", "points": "three", "flag": "yes", "owner": 5, "labels": "a"}),
        AC,
        &[],
    );
    assert_eq!(
        errors(&v),
        [
            "meta.points: expected a number, got the string \"three\"",
            "meta.labels: expected an array, got the string \"a\"",
            "meta.flag: expected a boolean (true or false), got the string \"yes\"",
            "meta.owner: expected a string, got the number 5",
        ]
    );
}

#[test]
fn enum_values() {
    let v = check("stories/a", json!({"status": "wip"}), AC, &[]);
    assert_eq!(
        errors(&v),
        ["meta.status: expected one of \"draft\", \"ready\", \"done\", got the string \"wip\""]
    );
    let s = ModelSet::from_toml(&one(
        "[model.fields.p]\ntype = \"enum\"\nvalues = [\"1\", \"2\", \"true\"]\n",
    ))
    .unwrap();
    let ok = |v: Value| {
        let m = meta(json!({ "p": v }));
        let doc = DocInput {
            docid: "m/x",
            title: None,
            meta: &m,
            sections: &[],
        };
        validate(&s, &doc, &|_| true).valid
    };
    assert!(ok(json!(1)) && ok(json!("2")) && ok(json!(true)));
    assert!(!ok(json!(3)) && !ok(json!(["1"])));
}

#[test]
fn dates() {
    for good in [
        "2024-02-29",
        "2024-02-29T10:00:00Z",
        "2024-02-29T10:00:00+02:00",
        "2024-02-29 10:00:00",
        "2024-02-29T10:00:00.5",
        "2024-02-29T10:00",
    ] {
        assert!(is_date(good), "{good}");
    }
    for bad in [
        "2023-02-29",
        "2024-2-9",
        "24-02-01",
        "tomorrow",
        "2024-02-29X",
        "2024-02-29T25:00:00Z",
        "",
    ] {
        assert!(!is_date(bad), "{bad}");
    }
    let v = check(
        "stories/a",
        json!({"status": "draft", "due": "next week"}),
        AC,
        &[],
    );
    assert_eq!(
        errors(&v),
        ["meta.due: expected a date (YYYY-MM-DD or RFC 3339), got the string \"next week\""]
    );
    let v = check(
        "stories/a",
        json!({"status": "draft", "due": 20240101}),
        AC,
        &[],
    );
    assert!(
        errors(&v)[0].starts_with("meta.due: expected a date"),
        "{v:?}"
    );
}

#[test]
fn array_elements() {
    let v = check(
        "stories/a",
        json!({"status": "draft", "labels": ["a", 2, null]}),
        AC,
        &[],
    );
    assert_eq!(
        errors(&v),
        [
            "meta.labels[1]: expected a string, got the number 2",
            "meta.labels[2]: expected a string, got null",
        ]
    );
    let s = ModelSet::from_toml(&one(
        "[model.fields.any]\ntype = \"array\"\n[model.fields.e]\ntype = \"array\"\nitems = \"enum\"\nvalues = [\"x\"]\n",
    ))
    .unwrap();
    let m = meta(json!({"any": [1, "a", true], "e": ["x", "y"]}));
    let doc = DocInput {
        docid: "m/1",
        title: None,
        meta: &m,
        sections: &[],
    };
    let v = validate(&s, &doc, &|_| true);
    assert_eq!(
        errors(&v),
        ["meta.e[1]: expected one of \"x\", got the string \"y\""]
    );
}

#[test]
fn unknown_fields_warn_but_stay_valid() {
    let v = check(
        "stories/a",
        json!({"status": "draft", "colour": "red", "_private": 1, "epic": null}),
        AC,
        &[],
    );
    assert!(v.valid);
    assert_eq!(v.warnings.len(), 1, "{v:?}");
    assert_eq!(v.warnings[0].path, "meta.colour");
    assert!(
        v.warnings[0]
            .message
            .starts_with("unknown field (Story declares status, points"),
        "{v:?}"
    );
    assert!(v.warnings[0].message.contains("epic"), "{v:?}");
    // Base accepts any metadata.
    let v = check("notes/a", json!({"colour": "red", "status": 3}), &[], &[]);
    assert_eq!(v.model, "Base");
    assert!(v.valid && v.warnings.is_empty(), "{v:?}");
}

#[test]
fn required_sections() {
    let v = check(
        "stories/a",
        json!({"status": "draft"}),
        &[(1, "Login", "# Login")],
        &[],
    );
    assert_eq!(
        errors(&v),
        ["sections.Acceptance Criteria: required section missing"]
    );
    // An alternative, any level, any case and spacing.
    for h in ["criteria", "AC", "acceptance   CRITERIA"] {
        let text = format!("#### {h}");
        let v = check(
            "stories/a",
            json!({"status": "draft"}),
            &[(4, h, &text)],
            &[],
        );
        assert!(v.valid, "{h}: {v:?}");
    }
    // The preamble is not a heading.
    let v = check(
        "stories/a",
        json!({"status": "draft"}),
        &[(0, "AC", "AC")],
        &[],
    );
    assert!(!v.valid);
}

#[test]
fn model_override_errors() {
    let v = check("notes/a", json!({"_model": "Stroy"}), &[], &[]);
    assert_eq!(
        errors(&v),
        ["meta._model: no model named \"Stroy\" (models: Story, Epic, Base)"]
    );
    assert_eq!(v.model, "Base");
    let v = check("notes/a", json!({"_model": ["Story"]}), &[], &[]);
    assert_eq!(
        errors(&v),
        ["meta._model: expected a model name (a string), got an array"]
    );
    let v = check("notes/a", json!({"_model": "story"}), &[], &[]);
    assert_eq!(v.model, "Story");
    assert_eq!(
        errors(&v),
        [
            "meta.status: required",
            "sections.Acceptance Criteria: required section missing"
        ]
    );
}

#[test]
fn belongs_to() {
    let base = json!({"status": "draft"});
    let with = |epic: Value| {
        let mut m = base.clone();
        m["epic"] = epic;
        m
    };
    // A docid, a slug under the target's folder, a link.
    for v in [
        json!("epics/auth"),
        json!("auth"),
        json!("[[epics/auth]]"),
        json!("kbdb://document/epics/auth"),
        json!("[Auth](epics/auth)"),
    ] {
        let r = check("stories/a", with(v.clone()), AC, &["epics/auth"]);
        assert!(r.valid, "{v}: {r:?}");
    }
    let r = check("stories/a", with(json!("auth")), AC, &[]);
    assert_eq!(
        errors(&r),
        ["meta.epic: no document epics/auth (belongsTo Epic)"]
    );
    let r = check("stories/a", with(json!("other/auth")), AC, &[]);
    assert_eq!(
        errors(&r),
        ["meta.epic: no document other/auth (belongsTo Epic)"]
    );
    // A slug that exists only at the root resolves there.
    let r = check("stories/a", with(json!("auth")), AC, &["auth"]);
    assert!(r.valid, "{r:?}");
    // Arrays of docids; empty values are not links.
    let r = check(
        "stories/a",
        with(json!(["epics/x", "y", ""])),
        AC,
        &["epics/x"],
    );
    assert_eq!(
        errors(&r),
        ["meta.epic: no document epics/y (belongsTo Epic)"]
    );
    // Not a docid.
    let r = check("stories/a", with(json!(7)), AC, &[]);
    assert_eq!(
        errors(&r),
        [
            "meta.epic: expected a docid (a string, or an array of them), got the number 7 (belongsTo Epic)"
        ]
    );
}

fn epic(sections: &[(u8, &str, &str)], existing: &[&str]) -> Validation {
    check("epics/auth", json!({"owner": "ann"}), sections, existing)
}

#[test]
fn has_many_list_items() {
    let text = "## Stories\n\
        - [[stories/login]]\n\
        - [Logout](stories/logout) — soon\n\
        * kbdb://document/stories/reset\n\
        1. [Signup](../stories/signup.md)\n\
        2) [[signin|Sign in]] then [[stories/ignored]]\n\
        - [ ] [[stories/todo]]\n\
        - no link here, [web](https://example.com)\n\
        - `[[stories/code]]`\n\
        ```\n- [[stories/fenced]]\n```\n\
        Not an item [[stories/prose]]\n\
        - [[stories/login]] again";
    let sections = [(1, "Auth", "# Auth"), (2, "Stories", text)];
    let existing = [
        "stories/login",
        "stories/logout",
        "stories/reset",
        "stories/signup",
        "stories/signin",
        "stories/todo",
    ];
    let v = epic(&sections, &existing);
    assert!(v.valid, "{v:?}");
    let v = epic(&sections, &existing[1..]);
    assert_eq!(
        errors(&v),
        ["sections.Stories: item stories/login does not exist"]
    );
    let s = set();
    let m = meta(json!({"owner": "ann"}));
    let ds = secs(&sections);
    let doc = DocInput {
        docid: "epics/auth",
        title: None,
        meta: &m,
        sections: &ds,
    };
    let rel = relationships_of(&s, &doc, &|d| existing.contains(&d));
    assert_eq!(rel.len(), 1);
    assert_eq!(rel[0].name, "stories");
    assert_eq!(rel[0].kind, RelKind::HasMany);
    assert_eq!(rel[0].model, "Story");
    let ids: Vec<&str> = rel[0].items.iter().map(|i| i.docid.as_str()).collect();
    assert_eq!(ids, existing);
}

#[test]
fn has_many_sub_headings() {
    let sections = [
        (1, "Auth", "# Auth"),
        (2, "stories", "## stories\nIntro."),
        (3, "Login Flow", "### Login Flow\n- [[stories/not-an-item]]"),
        (4, "Detail", "#### Detail"),
        (3, "[[stories/reset]]", "### [[stories/reset]]"),
        (2, "Notes", "## Notes\n- [[stories/after]]"),
    ];
    let v = epic(&sections, &["stories/login-flow", "stories/reset"]);
    assert!(v.valid, "{v:?}");
    let v = epic(&sections, &["stories/reset"]);
    assert_eq!(
        errors(&v),
        ["sections.Stories: item stories/login-flow does not exist"]
    );
    // No Stories heading: nothing to check.
    let v = epic(&[(1, "Auth", "# Auth")], &[]);
    assert!(v.valid, "{v:?}");
}

#[test]
fn relationships_of_belongs_to_resolves_slugs() {
    let s = set();
    let m = meta(json!({"status": "draft", "epic": "auth"}));
    let doc = DocInput {
        docid: "stories/a",
        title: None,
        meta: &m,
        sections: &[],
    };
    let rel = relationships_of(&s, &doc, &|d| d == "epics/auth");
    assert_eq!(
        rel,
        [Related {
            name: "epic".into(),
            kind: RelKind::BelongsTo,
            model: "Epic".into(),
            field: Some("epic".into()),
            heading: None,
            items: vec![RelatedItem {
                docid: "epics/auth".into(),
                exists: true
            }],
        }]
    );
    let j = serde_json::to_value(&rel[0]).unwrap();
    assert_eq!(j["type"], "belongsTo");
    assert!(j.get("heading").is_none());
}

#[test]
fn validation_serializes_with_the_documented_names() {
    let v = check("stories/a", json!({"colour": 1}), AC, &[]);
    let j = serde_json::to_value(&v).unwrap();
    assert_eq!(j["docid"], "stories/a");
    assert_eq!(j["model"], "Story");
    assert_eq!(j["valid"], false);
    assert_eq!(
        j["errors"][0],
        json!({"path": "meta.status", "message": "required"})
    );
    assert_eq!(j["warnings"][0]["path"], "meta.colour");
}

#[test]
fn doc_sections_come_from_split_markdown() {
    let md = crate::text::markdown::split_sections("# T\n\n## AC\n- x\n");
    let ds: Vec<DocSection<'_>> = md.iter().map(DocSection::from).collect();
    assert_eq!(ds[1].level, 2);
    assert_eq!(ds[1].heading, "AC");
    assert!(ds[1].text.contains("- x"));
}

// ---- scaffold & introspection -------------------------------------------------------

#[test]
fn scaffold_merges_defaults_and_lists_headings() {
    let s = set();
    let (m, body) = scaffold(
        s.get("Story").unwrap(),
        "Login",
        &meta(json!({"points": 2})),
    );
    assert_eq!(Value::Object(m), json!({"status": "draft", "points": 2}));
    assert_eq!(body, "# Login\n\n## Acceptance Criteria\n\n## Notes\n\n");
    let (m, _) = scaffold(
        s.get("Story").unwrap(),
        "x",
        &meta(json!({"status": "done"})),
    );
    assert_eq!(m["status"], "done");
    let (m, body) = scaffold(s.get("Epic").unwrap(), "Auth", &Map::new());
    assert!(m.is_empty());
    assert_eq!(body, "# Auth\n\n## Stories\n\n");
    let (_, body) = scaffold(s.base(), " ", &Map::new());
    assert_eq!(body, "");
    // A hasMany heading that is also a declared section appears once.
    let d = ModelSet::from_toml(&one(
        "[[model.sections]]\nheading = \"Items\"\n[model.relationships.r]\ntype = \"hasMany\"\nmodel = \"M\"\nheading = \"items\"\n",
    ))
    .unwrap();
    let (_, body) = scaffold(d.get("M").unwrap(), "T", &Map::new());
    assert_eq!(body, "# T\n\n## Items\n\n");
}

#[test]
fn schema_json_shape() {
    let s = set();
    let j = schema_json(&s, &|name| match name {
        "Story" => 4,
        "Epic" => 1,
        _ => 2,
    });
    assert_eq!(j["totalDocuments"], 7);
    let models = j["models"].as_array().unwrap();
    assert_eq!(models.len(), 3);
    let story = &models[0];
    assert_eq!(story["name"], "Story");
    assert_eq!(story["prefix"], "stories/");
    assert!(story.get("pattern").is_none());
    assert_eq!(story["description"], "A user story");
    assert_eq!(story["documentCount"], 4);
    assert_eq!(
        story["meta"][0],
        json!({"name": "status", "type": "enum", "values": ["draft", "ready", "done"], "required": true, "default": "draft", "description": "Workflow state"})
    );
    assert_eq!(
        story["meta"][1],
        json!({"name": "points", "type": "number", "required": false})
    );
    assert_eq!(story["meta"][3]["items"], "string");
    assert_eq!(
        story["sections"][0],
        json!({"heading": "Acceptance Criteria", "alternatives": ["Criteria", "AC"], "required": true})
    );
    assert_eq!(
        story["relationships"],
        json!({"epic": {"type": "belongsTo", "target": "Epic", "field": "epic"}})
    );
    assert_eq!(story["defaults"], json!({"status": "draft"}));
    assert_eq!(models[1]["pattern"], "epics/*");
    assert_eq!(
        models[1]["relationships"]["stories"],
        json!({"type": "hasMany", "target": "Story", "heading": "Stories"})
    );
    assert_eq!(models[2]["name"], "Base");
    assert_eq!(models[2]["meta"], json!([]));
}

#[test]
fn summary_lists_every_model_field_section_and_relationship() {
    let s = set();
    let md = summary_markdown(&s);
    for m in s.all() {
        assert!(md.contains(&format!("## {}\n", m.name)), "{md}");
        for f in &m.fields {
            assert!(
                md.contains(&format!("| `{}` |", f.name)),
                "{}: {md}",
                f.name
            );
        }
        for sec in &m.sections {
            assert!(md.contains(&format!("**{}**", sec.heading)), "{md}");
        }
        for r in &m.relationships {
            assert!(md.contains(&format!("`{}`: {}", r.name, r.kind)), "{md}");
        }
    }
    assert!(
        md.contains(
            "| `status` | enum (draft, ready, done) | yes | `\"draft\"` | Workflow state |"
        ),
        "{md}"
    );
    assert!(md.contains("| `labels` | array of string | no |"), "{md}");
    assert!(
        md.contains("Documents: docids starting with `stories/`."),
        "{md}"
    );
    assert!(md.contains("Documents: docids matching `epics/*`."), "{md}");
    assert!(md.contains("also accepted: Criteria, AC"), "{md}");
    assert!(md.ends_with("(any metadata is accepted).\n"), "{md}");
    assert!(!md.contains("Documents: any document"), "{md}");
    let piped = ModelSet::from_toml(&one(
        "[model.fields.x]\ntype = \"string\"\ndescription = \"a | b\"\n",
    ))
    .unwrap();
    assert!(summary_markdown(&piped).contains("| a \\| b |"));
}

#[test]
fn create_prompt_text() {
    let s = set();
    let p = create_prompt(s.get("Story").unwrap(), "Login");
    assert!(
        p.starts_with("You are creating a new Story document titled \"Login\".\n"),
        "{p}"
    );
    assert!(p.contains("stories/login"), "{p}");
    assert!(p.contains("## Required Frontmatter\n\n- `status`: enum (draft, ready, done), default `\"draft\"` — Workflow state\n"), "{p}");
    assert!(
        p.contains("## Optional Frontmatter\n\n- `points`: number\n"),
        "{p}"
    );
    assert!(
        p.contains(
            "## Sections to Include\n\n- ## Acceptance Criteria (required)\n- ## Notes (optional)\n"
        ),
        "{p}"
    );
    assert!(p.contains("`epic` metadata field"), "{p}");
    assert!(
        p.ends_with(
            "Please draft the document content, then create it with the create_document tool.\n"
        ),
        "{p}"
    );
    let p = create_prompt(s.get("Epic").unwrap(), "Auth");
    assert!(p.contains("- ## Stories (optional)"), "{p}");
    assert!(p.contains("`- [[docid]]`"), "{p}");
    let p = create_prompt(s.base(), "Anything");
    assert!(p.contains("## Required Frontmatter\n\nNone.\n"), "{p}");
    let only = ModelSet::from_toml("[[model]]\nname = \"Memo\"\n").unwrap();
    let p = create_prompt(only.get("memo").unwrap(), "M");
    assert!(p.contains("`_model: Memo`"), "{p}");
}

#[test]
fn query_guide_text() {
    let g = query_guide(&set());
    for (op, _, _) in QUERY_OPERATORS {
        assert!(g.contains(&format!("`{op}`")), "{op}");
    }
    assert!(
        g.contains("### Story (docids starting with `stories/`)"),
        "{g}"
    );
    assert!(
        g.contains("- `status`: enum (draft, ready, done), required, default `\"draft\"`"),
        "{g}"
    );
    assert!(
        g.contains("- `epic`: docid of the Epic it belongs to (belongsTo `epic`)"),
        "{g}"
    );
    assert!(
        g.contains(r#"{"where": {"status": "draft", "points": {"$gte": 3, "$lt": 8}, "due": {"$exists": true}}}"#),
        "{g}"
    );
    assert!(
        g.contains(r#"{"where": [{"path": "status", "operator": "eq", "value": "draft"}, {"path": "points", "operator": "$gte", "value": 3}, {"path": "due", "operator": "notExists"}]}"#),
        "{g}"
    );
    assert!(
        g.contains(r#"`{"title": {"$regex": "^(Log\|Sign)"}}`"#),
        "{g}"
    );
    let bare = query_guide(&ModelSet::new());
    assert!(
        bare.contains(r#"{"where": {"status": "done", "priority": {"$gte": 3"#),
        "{bare}"
    );
}

#[test]
fn to_toml_leaves_out_a_default_toml_cannot_hold() {
    let mut set = ModelSet::from_toml(
        "[[model]]\nname = \"X\"\n[model.fields.n]\ntype = \"number\"\ndefault = 1\n",
    )
    .unwrap();
    // Only code can put a null here (TOML has none); it is left out, not written as "".
    set.models[0].fields[0].default = Some(Value::Null);
    let text = set.to_toml();
    assert!(!text.contains("default"), "{text}");
    let back = ModelSet::from_toml(&text).unwrap();
    assert_eq!(back.models()[0].fields[0].default, None);
}
