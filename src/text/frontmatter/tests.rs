use serde_json::json;
use serde_json::{Map, Value};

use super::parse::ordered_keys;
use super::rewrite::rewrite_lines;
use super::*;
use super::{FrontMatterError, MAX_BYTES, Syntax};

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| s.to_string()).collect()
}

fn roundtrip(syntax: Syntax, meta: &Map<String, Value>, order: &[String]) -> String {
    let text = render(syntax, meta, order).unwrap_or_else(|e| panic!("{syntax}: {e}"));
    let doc = format!("{text}# Body\n");
    let (fm, body) = split(&doc).unwrap_or_else(|e| panic!("{syntax}: {e}\n{text}"));
    let fm = fm.expect("front matter");
    assert_eq!(fm.syntax, syntax);
    assert_eq!(&fm.meta, meta, "{text}");
    assert_eq!(fm.key_order, ordered_keys(meta, order), "{text}");
    assert_eq!(body, "# Body\n");
    text
}

#[test]
fn yaml_front_matter_is_split_off() {
    let doc = "---\ntitle: Hello\ntags: [a, b]\ncount: 3\nratio: 0.5\ndraft: false\nnothing: ~\ndate: 2024-05-01\nnested:\n  z: 1\n  a: {b: c}\n---\n# Heading\n\ntext\n";
    let (fm, body) = split(doc).unwrap();
    let fm = fm.unwrap();
    assert_eq!(fm.syntax, Syntax::Yaml);
    assert_eq!(body, "# Heading\n\ntext\n");
    assert_eq!(
        fm.key_order,
        keys(&[
            "title", "tags", "count", "ratio", "draft", "nothing", "date", "nested"
        ])
    );
    assert_eq!(
        Value::Object(fm.meta),
        json!({"title": "Hello", "tags": ["a", "b"], "count": 3, "ratio": 0.5,
               "draft": false, "nothing": null, "date": "2024-05-01",
               "nested": {"z": 1, "a": {"b": "c"}}})
    );
}

#[test]
fn toml_front_matter_is_split_off() {
    let doc = "+++\r\ntitle = \"Hello\"\r\nwhen = 1979-05-27T07:32:00-08:00\r\nday = 1979-05-27\r\nlocal = 1979-05-27 07:32:00\r\nn = 0x10\r\nf = 1.5\r\n[zeta]\r\nx = 1\r\n[alpha.beta]\r\ny = [1, 2]\r\n+++\r\nbody\r\n";
    let (fm, body) = split(doc).unwrap();
    let fm = fm.unwrap();
    assert_eq!(fm.syntax, Syntax::Toml);
    assert_eq!(body, "body\r\n");
    assert_eq!(
        fm.key_order,
        keys(&["title", "when", "day", "local", "n", "f", "zeta", "alpha"])
    );
    assert_eq!(
        Value::Object(fm.meta),
        json!({"title": "Hello", "when": "1979-05-27T07:32:00-08:00", "day": "1979-05-27",
               "local": "1979-05-27T07:32:00", "n": 16, "f": 1.5,
               "zeta": {"x": 1}, "alpha": {"beta": {"y": [1, 2]}}})
    );
}

#[test]
fn fences_bom_crlf_and_no_front_matter() {
    for text in [
        "# Title\n---\na: 1\n---\n",
        "",
        "text",
        "\n---\na: 1\n---\n",
        "----\n",
    ] {
        assert_eq!(split(text).unwrap(), (None, text));
    }
    let (fm, body) = split("\u{feff}---\r\na: 1\r\n---\r\nbody").unwrap();
    assert_eq!(fm.unwrap().meta, obj(json!({"a": 1})));
    assert_eq!(body, "body");
    // The closing fence may be the last line, with or without a newline, and trailing
    // blanks on fences are tolerated.
    let (fm, body) = split("--- \na: 1\n---").unwrap();
    assert_eq!(fm.unwrap().key_order, keys(&["a"]));
    assert_eq!(body, "");
    // Empty front matter (or only comments) is an empty map.
    for text in [
        "---\n---\nx",
        "---\n# just a comment\n---\nx",
        "+++\n+++\nx",
        "---\n~\n---\nx",
    ] {
        let (fm, body) = split(text).unwrap();
        let fm = fm.unwrap();
        assert!(fm.meta.is_empty() && fm.key_order.is_empty(), "{text:?}");
        assert_eq!(body, "x");
    }
    // A `+++` line does not close YAML front matter, nor `---` TOML.
    let (fm, body) = split("---\na: |\n  x\n  +++\n---\nbody").unwrap();
    assert_eq!(fm.unwrap().meta, obj(json!({"a": "x\n+++\n"})));
    assert_eq!(body, "body");
    let (fm, body) = split("+++\na = \"\"\"\n---\n\"\"\"\n+++\nbody").unwrap();
    assert_eq!(fm.unwrap().meta, obj(json!({"a": "---\n"})));
    assert_eq!(body, "body");
}

#[test]
fn errors_name_the_problem() {
    let e = split("---\na: 1\nno end\n").unwrap_err();
    assert_eq!(e, FrontMatterError::Unclosed { fence: "---" });
    assert!(
        e.to_string()
            .starts_with("front matter: the opening `---` on line 1")
    );
    assert!(matches!(
        split("+++").unwrap_err(),
        FrontMatterError::Unclosed { fence: "+++" }
    ));

    let e = split("---\n- a\n- b\n---\n").unwrap_err().to_string();
    assert!(
        e.contains("front matter must be a mapping of keys to values"),
        "{e}"
    );
    assert!(e.contains("a list"), "{e}");
    let e = split("---\njust words\n---\n").unwrap_err().to_string();
    assert!(
        e.contains("front matter must be a mapping of keys to values"),
        "{e}"
    );

    let e = split("---\n1: one\n---\n").unwrap_err();
    assert!(matches!(e, FrontMatterError::NonStringKey { .. }), "{e}");
    let e = split("---\na:\n  [x]: one\n---\n").unwrap_err().to_string();
    assert!(e.contains("under `a`") && e.contains("not a string"), "{e}");

    for doc in [
        "---\nx: .nan\n---\n",
        "---\nx: [1, -.inf]\n---\n",
        "+++\nx = nan\n+++\n",
        "+++\nx = -inf\n+++\n",
    ] {
        let e = split(doc).unwrap_err();
        assert!(
            matches!(e, FrontMatterError::NonFiniteNumber { .. }),
            "{doc}: {e}"
        );
    }
    assert_eq!(
        split("---\nx: [1, .inf]\n---\n").unwrap_err().to_string(),
        "front matter: `x[1]` is not a finite number (NaN and infinity are not supported)"
    );

    let e = split("---\na: 1\nb: [\n---\n").unwrap_err().to_string();
    assert!(e.starts_with("front matter: invalid YAML: "), "{e}");
    let e = split("---\na: 1\na: 2\n---\n").unwrap_err().to_string();
    assert!(e.starts_with("front matter: invalid YAML: "), "{e}");
    let e = split("+++\na = 1\n\nb = = 2\n+++\n").unwrap_err();
    match &e {
        FrontMatterError::InvalidToml { line, .. } => assert_eq!(*line, 4, "{e}"),
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .starts_with("front matter: invalid TOML at line 4"),
        "{e}"
    );

    let big = format!("---\nx: \"{}\"\n---\n", "a".repeat(MAX_BYTES));
    let e = split(&big).unwrap_err();
    assert!(matches!(e, FrontMatterError::TooLarge { .. }));
    assert!(e.to_string().contains("64 KiB"));
}

#[test]
fn alias_bombs_are_refused_before_they_expand() {
    // Nine levels of ten aliases each: 10^9 strings if expanded, in 300 bytes.
    let mut y = String::from(
        "---\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for w in names.windows(2) {
        let refs = vec![format!("*{}", w[0]); 10].join(",");
        y.push_str(&format!("{}: &{} [{refs}]\n", w[1], w[1]));
    }
    y.push_str("---\nbody\n");
    // Refused after a walk of at most MAX_EXPANDED_NODES values (the expansion itself
    // would take minutes and gigabytes; yaml_serde's own limit stops it after tens of MB).
    let e = split(&y).unwrap_err();
    assert!(e.to_string().contains("aliases expand"), "{e}");
    // Ordinary aliases are fine.
    let ok = "---\nbase: &b {x: 1}\nother: *b\n---\nbody\n";
    let (fm, _) = split(ok).unwrap();
    assert_eq!(fm.unwrap().meta["other"]["x"], 1);
}

#[test]
fn nesting_is_limited() {
    // 32 levels in all (the top-level mapping is level 1) are fine, 33 are not.
    let nest = |n: usize| format!("---\nx: {}1{}\n---\n", "[".repeat(n), "]".repeat(n));
    assert!(split(&nest(31)).is_ok());
    let e = split(&nest(32)).unwrap_err();
    assert!(matches!(e, FrontMatterError::TooDeep { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with("front matter: nested more than 32 levels deep")
    );
    for n in [200, 5_000, 10_000] {
        assert!(matches!(
            split(&nest(n)).unwrap_err(),
            FrontMatterError::TooDeep { .. }
        ));
        let toml = format!("+++\nx = {}1{}\n+++\n", "[".repeat(n), "]".repeat(n));
        assert!(matches!(
            split(&toml).unwrap_err(),
            FrontMatterError::TooDeep { .. }
        ));
        let toml = format!("+++\nx = {}1{}\n+++\n", "{a = ".repeat(n), "}".repeat(n));
        assert!(matches!(
            split(&toml).unwrap_err(),
            FrontMatterError::TooDeep { .. }
        ));
        let toml = format!("+++\n[{}]\n+++\n", vec!["k"; n].join("."));
        assert!(matches!(
            split(&toml).unwrap_err(),
            FrontMatterError::TooDeep { .. }
        ));
    }
    let toml = format!("+++\nx = {}1{}\n+++\n", "[".repeat(31), "]".repeat(31));
    assert!(split(&toml).is_ok());
    let toml = format!("+++\nx = {}1{}\n+++\n", "[".repeat(32), "]".repeat(32));
    assert!(matches!(
        split(&toml).unwrap_err(),
        FrontMatterError::TooDeep { .. }
    ));

    // Rendering refuses too-deep values as well.
    let mut v = json!(1);
    for _ in 0..40 {
        v = json!({ "k": v });
    }
    let meta = obj(json!({ "deep": v }));
    for syntax in [Syntax::Yaml, Syntax::Toml] {
        let e = render(syntax, &meta, &[]).unwrap_err();
        assert!(matches!(e, FrontMatterError::TooDeep { .. }), "{e}");
    }
}

#[test]
fn garbage_never_panics() {
    let alphabet: Vec<char> =
        "-+:[]{}\"'#\n\n\n\r\t  &*!|>%@`,.=~?\\0123456789aeftnulxyz_é\u{0}\u{7f}\u{feff}"
            .chars()
            .collect();
    let prefixes = ["---\n", "+++\n", "\u{feff}---\r\n", "+++\r\n", ""];
    let mut rng = crate::test_rng::XorShift::new(0x9E37_79B9_7F4A_7C15);
    let mut next = move || rng.next_u64();
    let mut parsed = 0;
    for round in 0..4000 {
        let mut doc = prefixes[round % prefixes.len()].to_string();
        let len = (next() % 120) as usize;
        for _ in 0..len {
            let r = next();
            if r % 23 == 0 {
                doc.push_str(
                    ["\n---\n", "\n+++\n", "\n  - ", "\nk: ", "\n[t]\n"][(r >> 8) as usize % 5],
                );
            } else {
                doc.push(alphabet[(r >> 8) as usize % alphabet.len()]);
            }
        }
        if round % 3 == 0 {
            doc.push_str(["\n---\n", "\n+++\n"][round % 2]);
        }
        if let Ok((Some(fm), _)) = split(&doc) {
            parsed += 1;
            // Whatever reads must write back and read again the same.
            let text = render(fm.syntax, &fm.meta, &fm.key_order)
                .unwrap_or_else(|e| panic!("{doc:?}: {e}"));
            let (again, body) = split(&text).unwrap();
            assert_eq!(again.as_ref(), Some(&fm), "{doc:?}\n{text}");
            assert_eq!(body, "");
        }
    }
    assert!(parsed > 20, "{parsed}");
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn string(&mut self) -> String {
        const PIECES: &[&str] = &[
            "a",
            "Z",
            "0",
            "1.5",
            " ",
            "  ",
            ":",
            ": ",
            "- ",
            "#",
            "'",
            "\"",
            "\\",
            "\n",
            "\r\n",
            "\t",
            "---",
            "+++",
            "\n---\n",
            "\n+++\n",
            "[",
            "]",
            "{",
            "}",
            ",",
            "&",
            "*",
            "!",
            "|",
            ">",
            "%",
            "@",
            "`",
            "~",
            "?",
            "=",
            "true",
            "null",
            "é",
            "日本",
            "\u{0}",
            "\u{7f}",
            "\u{85}",
            "\u{2028}",
            "\u{feff}",
            "\u{1F600}",
        ];
        (0..self.below(6))
            .map(|_| PIECES[self.below(PIECES.len())])
            .collect()
    }
    fn value(&mut self, depth: usize, nulls: bool) -> Value {
        let kinds = if depth >= 4 { 6 } else { 8 };
        match self.below(kinds) {
            0 if nulls => Value::Null,
            0 | 1 => Value::Bool(self.next().is_multiple_of(2)),
            2 => Value::from(self.next() as i64 >> self.below(64)),
            3 => {
                let f = f64::from_bits(self.next());
                if f.is_finite() {
                    Value::from(f)
                } else {
                    Value::from(self.below(1000) as f64 / 8.0)
                }
            }
            4 | 5 => Value::String(self.string()),
            6 => Value::Array(
                (0..self.below(4))
                    .map(|_| self.value(depth + 1, nulls))
                    .collect(),
            ),
            _ => Value::Object(self.map(depth + 1, nulls)),
        }
    }
    fn map(&mut self, depth: usize, nulls: bool) -> Map<String, Value> {
        (0..self.below(5))
            .map(|_| (self.string(), self.value(depth, nulls)))
            .collect()
    }
}

#[test]
fn random_values_round_trip_and_mutations_never_panic() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for round in 0..1500 {
        let syntax = if round % 2 == 0 {
            Syntax::Yaml
        } else {
            Syntax::Toml
        };
        let meta = rng.map(1, syntax == Syntax::Yaml);
        let mut order: Vec<String> = meta.keys().cloned().collect();
        order.reverse();
        let text = roundtrip(syntax, &meta, &order);
        // Damage the text: whatever still reads must write back faithfully.
        let mut bytes = text.into_bytes();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len() + 1);
            match rng.below(3) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => {
                    let pool = b"-+:[]{}\"'#\n\r &*|>,=a1 ";
                    bytes.insert(at, pool[rng.below(pool.len())]);
                }
            }
        }
        let damaged = String::from_utf8_lossy(&bytes);
        if let Ok((Some(fm), _)) = split(&damaged) {
            let again = render(fm.syntax, &fm.meta, &fm.key_order)
                .unwrap_or_else(|e| panic!("{damaged:?}: {e}"));
            assert_eq!(split(&again).unwrap().0, Some(fm), "{damaged:?}");
        }
    }
}

#[test]
fn line_separators_fall_back_to_quoted_yaml() {
    // U+2028 breaks YAML's block scalars; the writer falls back to escaped flow values.
    let meta = obj(json!({"k": "---={\n\u{2028}", "b": ["x", {"y": "\u{85}"}], "n": 1.5}));
    let text = roundtrip(Syntax::Yaml, &meta, &keys(&["n", "k"]));
    assert_eq!(
        text,
        "---\n\"n\": 1.5\n\"k\": \"---={\\n\\u2028\"\n\"b\": [\"x\", {\"y\": \"\\u0085\"}]\n---\n"
    );
    roundtrip(Syntax::Toml, &meta, &[]);
}

#[test]
fn render_round_trips_and_keeps_key_order() {
    let meta = obj(json!({
        "title": "A title: with colon",
        "tags": ["x", "y z", "#hash"],
        "count": 42,
        "neg": -7,
        "ratio": 0.25,
        "big": 1e300,
        "whole": 3.0,
        "draft": true,
        "empty": "",
        "list_empty": [],
        "table_empty": {},
        "author": {"name": "Ann", "links": [{"url": "https://x"}, {"url": "https://y"}]},
        "servers": [{"name": "a"}, {"name": "b"}],
        "tricky": ["true", "null", "~", "1", "0x10", "1e5", ".nan", "-.inf", "2024-01-01",
                   "2024-01-01T00:00:00Z", " lead", "trail ", "a: b", "- x", "#c", "---",
                   "+++", "yes", "off", "'q'", "\"dq\"", "\\", "tab\there", "\u{7f}\u{1}",
                   "multi\nline\n---\n+++\nend\n", "é ü 日本"],
        "key with spaces": 1,
        "---": "dashes",
        "+++": "pluses",
        "multi\nkey": "v",
        "": "empty key",
        "zeta": "last",
    }));
    let orders = [
        keys(&["zeta", "author", "title", "servers", "count"]),
        keys(&["servers", "author"]),
        Vec::new(),
        keys(&["missing", "title", "title"]),
    ];
    for syntax in [Syntax::Yaml, Syntax::Toml] {
        for order in &orders {
            roundtrip(syntax, &meta, order);
        }
    }
    // Without nulls for TOML; YAML keeps them.
    let with_null = obj(json!({"a": null, "b": [1, null]}));
    roundtrip(Syntax::Yaml, &with_null, &[]);
    let e = render(Syntax::Toml, &with_null, &[]).unwrap_err();
    assert_eq!(e, FrontMatterError::NullInToml { path: "a".into() });
    assert!(e.to_string().contains("`a` is null"), "{e}");
    let e = render(Syntax::Toml, &obj(json!({"b": [1, null]})), &[]).unwrap_err();
    assert!(e.to_string().contains("`b[1]`"), "{e}");
    let e = render(Syntax::Toml, &obj(json!({"n": u64::MAX})), &[]).unwrap_err();
    assert!(
        matches!(e, FrontMatterError::IntegerOutOfRange { .. }),
        "{e}"
    );
    roundtrip(Syntax::Yaml, &obj(json!({"n": u64::MAX})), &[]);

    // An empty map renders as bare fences.
    assert_eq!(
        render(Syntax::Yaml, &Map::new(), &[]).unwrap(),
        "---\n---\n"
    );
    assert_eq!(
        render(Syntax::Toml, &Map::new(), &[]).unwrap(),
        "+++\n+++\n"
    );
}

#[test]
fn rendered_text_is_readable() {
    let meta = obj(json!({"title": "T", "tags": ["a"], "meta": {"x": 1}, "b": 2}));
    let order = keys(&["title", "meta", "tags", "b"]);
    assert_eq!(
        render(Syntax::Yaml, &meta, &order).unwrap(),
        "---\ntitle: T\nmeta:\n  x: 1\ntags:\n- a\nb: 2\n---\n"
    );
    // A table followed by plain keys is written inline so it cannot swallow them.
    assert_eq!(
        render(Syntax::Toml, &meta, &order).unwrap(),
        "+++\ntitle = \"T\"\nmeta = { x = 1 }\ntags = [\"a\"]\nb = 2\n+++\n"
    );
    // Trailing tables are written as sections.
    let order = keys(&["title", "b", "tags", "meta"]);
    assert_eq!(
        render(Syntax::Toml, &meta, &order).unwrap(),
        "+++\ntitle = \"T\"\nb = 2\ntags = [\"a\"]\n\n[meta]\nx = 1\n+++\n"
    );
}

#[test]
fn split_of_a_rendered_document_from_split() {
    // split → render → split is stable for both syntaxes, and a document without front
    // matter has none.
    let docs = [
        "---\nb: 1\na: [x, {y: z}]\nc: 2024-01-01\n---\nbody\n",
        "+++\nb = 1\na = [\"x\", { y = \"z\" }]\nc = 2024-01-01\n[t]\nq = true\n+++\nbody\n",
    ];
    for doc in docs {
        let (fm, body) = split(doc).unwrap();
        let fm = fm.unwrap();
        assert_eq!(body, "body\n");
        let text = roundtrip(fm.syntax, &fm.meta, &fm.key_order);
        let (again, _) = split(&text).unwrap();
        assert_eq!(again.unwrap(), fm);
    }
    let plain = "# Just markdown\n\n---\n\nafter a rule\n";
    assert_eq!(split(plain).unwrap(), (None, plain));
}

fn edited(block: &str, change: Value) -> String {
    let (fm, _) = split(block).unwrap();
    let fm = fm.unwrap();
    let mut meta = fm.meta.clone();
    for (k, v) in obj(change) {
        if v.is_null() {
            meta.remove(&k);
        } else {
            meta.insert(k, v);
        }
    }
    let out = rewrite(block, &fm, &meta).unwrap();
    if !out.is_empty() {
        assert_eq!(split(&out).unwrap().0.unwrap().meta, meta, "{out}");
    }
    out
}

const HAND: &str = "---\n# Trip notes, kept by hand\ntitle: \"Yosemite, in May\"   # shown on the site\nstatus: draft # draft | ready\ntags: [hiking, 'camping']\n\n# dates are ISO\ndate: 2024-05-01\nplaces:\n  - name: Half Dome\n    permit: yes\n\n  - name: Glacier Point\nnotes: |\n  Bring water.\n\n  Lots.\nrating: 4\n---\n";

#[test]
fn rewrite_changes_only_the_lines_of_the_keys_that_changed() {
    // One key changed: its line only.
    assert_eq!(
        edited(HAND, json!({"status": "ready"})),
        HAND.replace("status: draft # draft | ready\n", "status: ready\n")
    );
    // Quoting and flow style are kept for the key changed.
    assert_eq!(
        edited(HAND, json!({"title": "Yosemite, in June"})),
        HAND.replace(
            "title: \"Yosemite, in May\"   # shown on the site\n",
            "title: \"Yosemite, in June\"\n"
        )
    );
    assert_eq!(
        edited(HAND, json!({"tags": ["hiking", "swimming"]})),
        HAND.replace(
            "tags: [hiking, 'camping']\n",
            "tags: [\"hiking\", \"swimming\"]\n"
        )
    );
    // A key over several lines (blank lines inside) is replaced whole.
    assert_eq!(
        edited(HAND, json!({"places": ["Half Dome"], "notes": "Water."})),
        HAND.replace(
            "places:\n  - name: Half Dome\n    permit: yes\n\n  - name: Glacier Point\nnotes: |\n  Bring water.\n\n  Lots.\n",
            "places:\n- Half Dome\nnotes: Water.\n"
        )
    );
    // Removed keys remove their lines; new keys come last, quoted where YAML 1.1 would
    // read another type.
    assert_eq!(
        edited(
            HAND,
            json!({"date": null, "rating": null, "owner": "ann", "due": "2024-06-01"})
        ),
        HAND.replace("date: 2024-05-01\n", "")
            .replace("rating: 4\n", "due: '2024-06-01'\nowner: ann\n")
    );
    // CRLF blocks stay CRLF.
    let crlf = HAND.replace('\n', "\r\n");
    assert_eq!(
        edited(&crlf, json!({"status": "ready"})),
        crlf.replace("status: draft # draft | ready\r\n", "status: ready\r\n")
    );
    // TOML: the same, comments and all.
    let toml = "+++\n# site\ntitle = 'T'  # kept\ndraft = true\nlist = [\n  1,\n  2,\n]\n+++\n";
    assert_eq!(
        edited(toml, json!({"draft": false})),
        toml.replace("draft = true\n", "draft = false\n")
    );
    assert_eq!(
        edited(toml, json!({"list": null, "new": {"a": 1}})),
        toml.replace("list = [\n  1,\n  2,\n]\n", "new = { a = 1 }\n")
    );
    // Every key removed: the comments stay; with none, the block goes.
    assert_eq!(
        edited(toml, json!({"title": null, "draft": null, "list": null})),
        "+++\n# site\n+++\n"
    );
    assert_eq!(edited("---\na: 1\n---\n", json!({"a": null})), "");
}

#[test]
fn rewrite_falls_back_to_writing_the_block_anew() {
    // Anchors and merge keys cannot be edited line by line: the block is written anew.
    let block = "---\nbase: &b {x: 1}\nother: *b\nkeep: 1\n---\n";
    assert_eq!(
        edited(block, json!({"keep": 2})),
        "---\nbase:\n  x: 1\nother:\n  x: 1\nkeep: 2\n---\n"
    );
    // A change to a TOML table is written anew; the keys before the tables are edited in
    // place, new keys go before the first table, the tables stay as written.
    let toml = "+++\na = 1  # one\n# the table\n[t]\nb = 2  # two\n+++\n";
    assert_eq!(
        edited(toml, json!({"t": {"b": 3}})),
        "+++\na = 1\n\n[t]\nb = 3\n+++\n"
    );
    assert_eq!(
        edited(toml, json!({"a": 3, "new": "x"})),
        "+++\na = 3\nnew = \"x\"\n# the table\n[t]\nb = 2  # two\n+++\n"
    );
}

#[test]
fn strings_that_read_as_other_types_are_quoted() {
    // What YAML 1.1 readers (PyYAML, js-yaml) read as booleans, nulls, numbers or dates.
    let tricky = [
        "yes",
        "No",
        "ON",
        "off",
        "y",
        "n",
        "true",
        "null",
        "Null",
        "~",
        "",
        "2024-06-01",
        "2024-06-01 10:00:00",
        "12:30",
        "0123",
        "1.10",
        "1e3",
        "0x1F",
        "1_000",
        "-5",
        "+5",
        ".5",
        ".inf",
        "-.inf",
        ".NaN",
        "<<",
        "=",
    ];
    for s in tricky {
        let text = render(Syntax::Yaml, &obj(json!({"k": s})), &[]).unwrap();
        let value = text
            .trim_start_matches("---\nk: ")
            .trim_end_matches("\n---\n");
        assert!(value.starts_with(['\'', '"']), "{s:?} written as {value}");
    }
    // Keys too (`n: 1` is `false: 1` to YAML 1.1), and not plain words.
    assert_eq!(
        render(
            Syntax::Yaml,
            &obj(json!({"n": "plain words", "ok": "it's"})),
            &[]
        )
        .unwrap(),
        "---\n'n': plain words\nok: it's\n---\n"
    );
}

#[test]
fn random_rewrites_read_back_and_keep_unchanged_lines() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // How many rewrites went line by line (YAML, TOML).
    let mut lined = [0usize; 2];
    for round in 0..1500 {
        let syntax = if round % 2 == 0 {
            Syntax::Yaml
        } else {
            Syntax::Toml
        };
        let old_meta = rng.map(1, syntax == Syntax::Yaml);
        let text = render(syntax, &old_meta, &[]).unwrap();
        // Comments between the keys, as people write them.
        let text = if syntax == Syntax::Yaml && rng.below(2) == 0 {
            text.replacen("---\n", "---\n# by hand\n\n", 1)
        } else {
            text
        };
        let (Some(old), "") = split(&text).unwrap() else {
            panic!("{text}")
        };
        let mut meta = old.meta.clone();
        let keys: Vec<String> = meta.keys().cloned().collect();
        let mut changed = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let new = rng.map(2, syntax == Syntax::Yaml);
            match (rng.below(3), keys.is_empty()) {
                (0, false) => {
                    let k = &keys[rng.below(keys.len())];
                    meta.remove(k);
                    changed.push(k.clone());
                }
                (1, false) => {
                    let k = &keys[rng.below(keys.len())];
                    if let Some(v) = new.values().next() {
                        meta.insert(k.clone(), v.clone());
                        changed.push(k.clone());
                    }
                }
                _ => {
                    for (k, v) in new {
                        if !meta.contains_key(&k) {
                            meta.insert(k, v);
                        }
                    }
                }
            }
        }
        let out = rewrite(&text, &old, &meta).unwrap_or_else(|e| panic!("{text}: {e}"));
        lined[usize::from(syntax == Syntax::Toml)] +=
            usize::from(rewrite_lines(&text, &old, &meta).is_some());
        if meta.is_empty() && out.is_empty() {
            continue;
        }
        let (Some(fm), "") = split(&out).unwrap_or_else(|e| panic!("{out}: {e}")) else {
            panic!("{out}")
        };
        assert_eq!(fm.meta, meta, "{text}\n->\n{out}");
        // The keys kept stay in their order (new ones come after them, or in TOML before
        // the tables).
        let kept: Vec<&String> = old
            .key_order
            .iter()
            .filter(|k| meta.contains_key(*k))
            .collect();
        assert_eq!(
            fm.key_order
                .iter()
                .filter(|k| old.meta.contains_key(*k))
                .collect::<Vec<_>>(),
            kept,
            "{out}"
        );
    }
    // Most go line by line (the others are written anew, and read back all the same).
    assert!(lined[0] > 400 && lined[1] > 400, "{lined:?} of 750 each");
}

#[test]
fn a_large_block_is_edited_line_by_line() {
    // Near the 64 KiB limit: 4,500 keys, one changed.
    let mut block = String::from("---\n");
    for i in 0..4500 {
        block.push_str(&format!("k{i}: v  # c\n"));
    }
    block.push_str("---\n");
    assert!(block.len() < MAX_BYTES);
    // (About 0.4 s in a debug build: two small parses per key and one of the whole.)
    let out = edited(&block, json!({"k2999": "w"}));
    assert_eq!(out, block.replace("k2999: v  # c\n", "k2999: w\n"));
}

#[test]
fn multi_line_keys_are_quoted_on_one_line() {
    let meta = obj(json!({"a\nb": "x\ny"}));
    assert_eq!(
        render(Syntax::Yaml, &meta, &[]).unwrap(),
        "---\n\"a\\nb\": |-\n  x\n  y\n---\n"
    );
    assert_eq!(
        edited("---\nk: 1  # c\n---\n", json!({"a\nb": "z"})),
        "---\nk: 1  # c\n\"a\\nb\": z\n---\n"
    );
}
