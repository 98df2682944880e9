//! Export, import, migrate, check and gc through the real binary (and, where the store must be
//! damaged on purpose, redb itself).

mod common;

use std::path::{Path, PathBuf};

use common::{PNG_B64, TestDb};
use serde_json::{Value, json};

/// A corpus with every kind of section: markdown documents linking each other, plain text,
/// JSON, code, an image, tags, a source key and synonyms.
fn rich_corpus() -> TestDb {
    let db = TestDb::new();
    let dir = db.tmp.path().join("src");
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.md");
    std::fs::write(
        &a,
        "# Deploys\n\nWe deploy on Tuesdays; see [rollback](b.md#rollback).\n\n## Freeze\n\nNo deploys in December, says [[ops/b]].\n",
    )
    .unwrap();
    let b = dir.join("b.md");
    std::fs::write(
        &b,
        "# Operations\n\nThe runbook for [deploys](a.md).\n\n## Rollback\n\nRevert the release tag, then redeploy.\n",
    )
    .unwrap();
    db.learn(&["--file", a.to_str().unwrap(), "--docid", "ops/a", "--split"]);
    db.learn(&["--file", b.to_str().unwrap(), "--docid", "ops/b", "--split"]);
    db.learn(&[
        "plain words here",
        "--type",
        "text/plain",
        "--title",
        "Plain",
        "--tag",
        "misc",
    ]);
    db.learn(&[
        r#"{"retries": 3}"#,
        "--type",
        "application/json",
        "--title",
        "Retry config",
    ]);
    db.learn(&[
        "fn parse_config() -> Config { todo!() }",
        "--type",
        "text/x-rust",
        "--title",
        "Parser",
        "--docid",
        "code/parser",
        "--tag",
        "rust",
    ]);
    db.learn(&[
        PNG_B64,
        "--type",
        "image/png",
        "--title",
        "Pixel",
        "--docid",
        "code/parser",
    ]);
    db.learn(&[
        "Deploy day is Tuesday",
        "--source",
        "policy/deploy-day",
        "--tag",
        "adr",
    ]);
    db.cmd()
        .args(["synonyms", "add", "deploy", "release"])
        .assert()
        .success();
    db
}

fn export(db: &TestDb, to: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["export", to.to_str().unwrap()];
    args.extend_from_slice(extra);
    db.json(&args)
}

fn run_json(db: &TestDb, args: &[&str]) -> (i32, Value) {
    let out = db
        .cmd()
        .args(args)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), v)
}

/// Everything a user can see of a database, for comparing two of them.
fn observable(db: &TestDb) -> Value {
    let docs = db.json(&["docs"]);
    let mut documents = Vec::new();
    for d in docs.as_array().unwrap() {
        let mut v = db.json(&["retrieve", "--docid", d["docid"].as_str().unwrap()]);
        v.as_object_mut().unwrap().remove("updated_at");
        documents.push(v);
    }
    let mut searches = Vec::new();
    for q in [
        "deploy",
        "rollback",
        "parse_config",
        "retries",
        "plain",
        "pixel",
    ] {
        let r = db.json(&["search", q]);
        let hits: Vec<Value> = r["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| json!([i["kbid"], i["score"], i["snippet"]]))
            .collect();
        searches.push(json!({"q": q, "hits": hits}));
    }
    let first = documents[0]["kbids"][1].as_str().unwrap().to_string();
    let recall = db.json(&["recall", &first, "--depth", "3"]);
    let status = db.status();
    json!({
        "documents": documents,
        "searches": searches,
        "recall": recall,
        "synonyms": db.json(&["synonyms", "list"]),
        "counts": [status["sections"], status["documents"]],
    })
}

#[test]
fn export_then_import_round_trips_everything_a_user_sees() {
    let db = rich_corpus();
    let out = db.tmp.path().join("backup");
    let r = export(&db, &out, &["--with-indexes"]);
    assert_eq!(r["sections_exported"], 9);
    assert_eq!(r["documents_exported"], 3);
    assert_eq!(r["path"], out.canonicalize().unwrap().to_str().unwrap());
    for f in [
        "catalog.toml",
        "synonyms.toml",
        "documents/ops/a.toml",
        "documents/code/parser.toml",
        "indexes/meta.toml",
        "indexes/terms.idx",
        "indexes/positions.idx",
        "indexes/corpus.dat",
        "indexes/references.idx",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let png: Vec<PathBuf> = glob_files(&out.join("sections"), "png");
    assert_eq!(png.len(), 1, "the image is stored as its bytes");
    assert!(std::fs::read(&png[0]).unwrap().starts_with(b"\x89PNG"));

    let copy = TestDb::uninit();
    let imported = copy.json(&["import", out.to_str().unwrap()]);
    assert_eq!(imported["sections_imported"], 9);
    assert_eq!(imported["documents_imported"], 3);
    assert_eq!(imported["problems"], json!([]));
    assert_eq!(observable(&copy), observable(&db));
    let (code, check) = run_json(&copy, &["check"]);
    assert_eq!(code, 0, "{check}");

    // Importing the same export again changes nothing.
    let again = copy.json(&["import", out.to_str().unwrap()]);
    assert_eq!(again["sections_imported"], 0);
    assert_eq!(again["sections_existing"], 9);
    assert_eq!(again["documents_replaced"], 0);
    assert_eq!(observable(&copy), observable(&db));
}

fn glob_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for fan in std::fs::read_dir(dir).unwrap().flatten() {
        for f in std::fs::read_dir(fan.path()).unwrap().flatten() {
            if f.path().extension().is_some_and(|e| e == ext) {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

fn section_files(root: &Path, kbid: &str) -> (PathBuf, PathBuf) {
    let dir = root.join("sections").join(&kbid[..2]);
    let meta = dir.join(format!("{kbid}.toml"));
    let text = std::fs::read_to_string(&meta).unwrap();
    let file = text
        .lines()
        .find_map(|l| l.strip_prefix("file = \""))
        .unwrap()
        .trim_end_matches('"')
        .to_string();
    (meta, dir.join(file))
}

#[test]
fn import_reports_and_skips_each_bad_entry_and_keeps_the_rest() {
    let db = rich_corpus();
    let out = db.tmp.path().join("bad");
    export(&db, &out, &[]);
    let plain = db.json(&["search", "plain"])["items"][0]["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let code_doc = db.json(&["retrieve", "--docid", "code/parser"]);
    let parser = code_doc["kbids"][0].as_str().unwrap().to_string();
    let json_kbid = db.json(&["search", "retries"])["items"][0]["kbid"]
        .as_str()
        .unwrap()
        .to_string();

    // 1. A corrupted content file.
    let (_, content) = section_files(&out, &plain);
    std::fs::write(&content, "plain words HERE").unwrap();
    // 2. A wrong kbid: a section's files renamed to another (valid) kbid.
    let (meta, content) = section_files(&out, &json_kbid);
    let fake = kbdb::kbid_of(b"something else");
    let fake_dir = out.join("sections").join(&fake[..2]);
    std::fs::create_dir_all(&fake_dir).unwrap();
    let text = std::fs::read_to_string(&meta)
        .unwrap()
        .replace(&json_kbid, &fake);
    std::fs::write(fake_dir.join(format!("{fake}.toml")), text).unwrap();
    std::fs::rename(&content, fake_dir.join(format!("{fake}.json"))).unwrap();
    std::fs::remove_file(&meta).unwrap();
    // 3. A manifest pointing at a missing section.
    let (meta, content) = section_files(&out, &parser);
    std::fs::remove_file(meta).unwrap();
    std::fs::remove_file(content).unwrap();
    // 4. A path-traversal docid.
    std::fs::write(
        out.join("documents/evil.toml"),
        format!(
            "docid = \"../../etc/passwd\"\ntype = \"document\"\ncreated_at = \"2026-01-01T00:00:00Z\"\nupdated_at = \"2026-01-01T00:00:00Z\"\nkbids = [\"{plain}\"]\n"
        ),
    )
    .unwrap();
    // 5. A truncated vectors.idx.
    std::fs::create_dir_all(out.join("indexes")).unwrap();
    let mut vectors = b"KBVX\x01\x02\x00\x01\x00\x00\x00".to_vec();
    vectors.extend(kbdb_key(&plain));
    vectors.extend(1.0f32.to_le_bytes());
    std::fs::write(out.join("indexes/vectors.idx"), &vectors).unwrap();
    std::fs::write(
        out.join("indexes/vectors-meta.toml"),
        "[vectors]\nmodel_name = \"m\"\ndimensions = 2\nversion = 1\nlast_built = \"2026-01-01T00:00:00Z\"\nsection_count = 1\n",
    )
    .unwrap();

    // --strict stops at the first problem and writes nothing.
    let strict = TestDb::new();
    let (code, v) = run_json(&strict, &["import", out.to_str().unwrap(), "--strict"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["code"], "bad_import");
    assert_eq!(strict.status()["sections"], 0);

    let copy = TestDb::uninit();
    let r = copy.json(&["import", out.to_str().unwrap()]);
    let problems: Vec<(String, String)> = r["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["path"].as_str().unwrap().to_string(),
                p["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let has = |path: &str, reason: &str| {
        problems
            .iter()
            .any(|(p, r)| p.ends_with(path) && r.contains(reason))
    };
    assert!(
        has(&format!("{plain}.toml"), "checksum mismatch"),
        "{problems:?}"
    );
    assert!(has(&format!("{fake}.toml"), "wrong kbid"), "{problems:?}");
    assert!(
        has(
            "documents/code/parser.toml",
            &format!("lists section {parser}")
        ),
        "{problems:?}"
    );
    assert!(has("documents/evil.toml", "docid"), "{problems:?}");
    assert!(
        has("indexes/vectors.idx", "vectors skipped"),
        "{problems:?}"
    );
    // The removed section is missing from the catalog's count too.
    assert!(
        has("catalog.toml", "lists 9 section(s) but the layout holds 8"),
        "{problems:?}"
    );
    // And the added manifest (evil.toml) too.
    assert!(
        has("catalog.toml", "lists 3 document(s) but the layout holds 4"),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 7, "{problems:?}");
    // Everything else is there: 9 sections minus the three bad ones.
    assert_eq!(r["sections_imported"], 6);
    assert_eq!(copy.status()["sections"], 6);
    assert_eq!(
        copy.json(&["retrieve", "--docid", "code/parser"])["kbids"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(!db.tmp.path().join("etc").exists());
}

/// The vectors.idx key of a kbid: its first 16 characters.
fn kbdb_key(kbid: &str) -> Vec<u8> {
    kbid.as_bytes()[..16].to_vec()
}

#[test]
fn a_valid_vectors_file_is_read_and_counted() {
    let db = rich_corpus();
    let out = db.tmp.path().join("vec");
    export(&db, &out, &[]);
    let plain = db.json(&["search", "plain"])["items"][0]["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let mut vectors = b"KBVX\x01\x02\x00\x01\x00\x00\x00".to_vec();
    vectors.extend(kbdb_key(&plain));
    vectors.extend(1.0f32.to_le_bytes());
    vectors.extend((-0.5f32).to_le_bytes());
    std::fs::create_dir_all(out.join("indexes")).unwrap();
    std::fs::write(out.join("indexes/vectors.idx"), &vectors).unwrap();
    std::fs::write(
        out.join("indexes/vectors-meta.toml"),
        "[vectors]\nmodel_name = \"m\"\ndimensions = 2\nversion = 1\nlast_built = \"2026-01-01T00:00:00Z\"\nsection_count = 1\n",
    )
    .unwrap();
    let copy = TestDb::uninit();
    let r = copy.json(&["import", out.to_str().unwrap()]);
    assert_eq!(r["vectors_found"], 1);
    assert_eq!(r["problems"], json!([]));
}

#[test]
fn export_refuses_unsafe_targets() {
    let db = rich_corpus();
    let full = db.tmp.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "mine").unwrap();
    let (code, v) = run_json(&db, &["export", full.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(v["error"]["message"].as_str().unwrap().contains("--force"));
    assert_eq!(
        std::fs::read_to_string(full.join("keep.txt")).unwrap(),
        "mine"
    );

    let elsewhere = db.tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let link = db.tmp.path().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    let (code, v) = run_json(&db, &["export", link.to_str().unwrap(), "--force"]);
    assert_eq!(code, 3);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("symbolic link")
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    let file = db.tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let (code, v) = run_json(&db, &["export", file.to_str().unwrap(), "--force"]);
    assert_eq!(code, 3);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not a folder")
    );

    let (code, _) = run_json(&db, &["export", db.dir.to_str().unwrap(), "--force"]);
    assert_eq!(code, 3, "the database folder itself is never a target");
    assert!(db.dir.join("kbdb.redb").exists());

    // --force never deletes a folder that is not an export: keep.txt stays.
    let (code, v) = run_json(&db, &["export", full.to_str().unwrap(), "--force"]);
    assert_eq!(code, 3, "{v}");
    assert!(full.join("keep.txt").exists());
    std::fs::remove_file(full.join("keep.txt")).unwrap();
    // --force replaces a previous export whole; no temporary folders are left behind.
    db.json(&["export", full.to_str().unwrap()]);
    let r = db.json(&["export", full.to_str().unwrap(), "--force"]);
    assert_eq!(r["sections_exported"], 9);
    let leftovers: Vec<_> = std::fs::read_dir(db.tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // What exports killed midway left goes with the next export into the same folder: their
    // unfinished exports, whatever the target, and the targets they moved aside once that
    // target exists again. A folder of a process still running (another export at work) stays,
    // and so does a target moved aside whose replacement never arrived (its only copy).
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let dead = gone.id();
    let live = std::process::id();
    let folder = |name: &str| {
        let p = db.tmp.path().join(name);
        std::fs::create_dir_all(p.join("sections")).unwrap();
        std::fs::write(p.join("sections").join("part.md"), "half written").unwrap();
        p
    };
    let stale_export = folder(&format!(".full.export-{dead}-17"));
    let stale_aside = folder(&format!(".full.replaced-{dead}-18"));
    let at_work = folder(&format!(".full.export-{live}-19"));
    let other_target = folder(&format!(".other.export-{dead}-20"));
    folder("present");
    let present_aside = folder(&format!(".present.replaced-{dead}-21"));
    let only_copy = folder(&format!(".absent.replaced-{dead}-22"));
    let r = db.json(&["export", full.to_str().unwrap(), "--force"]);
    assert_eq!(r["sections_exported"], 9);
    assert!(!stale_export.exists() && !stale_aside.exists());
    assert!(!other_target.exists() && !present_aside.exists());
    assert!(at_work.exists(), "another export at work was removed");
    assert!(only_copy.exists(), "the only copy of a target was removed");
}

#[test]
fn a_plain_layout_is_migrated_in_place_or_into_a_new_database() {
    let db = rich_corpus();
    let before = observable(&db);
    let old = db.tmp.path().join("old");
    export(&db, &old, &[]);

    // Opening the plain layout as a database says what to do.
    let out = common::kbdb_cmd()
        .args(["--db", old.to_str().unwrap(), "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kbdb migrate"));

    // Into a new database: the old folder is untouched.
    let new = TestDb::uninit();
    let r = new.json(&["migrate", old.to_str().unwrap()]);
    assert_eq!(r["sections_imported"], 9);
    assert!(old.join("catalog.toml").exists());
    assert_eq!(observable(&new), before);

    // In place: the folder becomes the database, the plain files move aside.
    let out = common::kbdb_cmd()
        .args(["migrate", old.to_str().unwrap(), "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(old.join("kbdb.redb").exists());
    assert!(!old.join("catalog.toml").exists());
    let backup: Vec<_> = std::fs::read_dir(&old)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("plain-layout-"))
        .collect();
    assert_eq!(backup.len(), 1);
    assert!(backup[0].path().join("catalog.toml").exists());
    let in_place = TestDb {
        dir: old.clone(),
        tmp: tempfile::tempdir().unwrap(),
    };
    assert_eq!(observable(&in_place), before);
}

#[test]
fn a_detached_section_leaves_at_once_and_a_standalone_one_stays() {
    let db = TestDb::new();
    let fact = db.learn(&["a standalone fact"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let file = db.tmp.path().join("d.md");
    std::fs::write(&file, "# D\n\none\n\n## Two\n\ntwo\n").unwrap();
    let first = db.learn(&["--file", file.to_str().unwrap(), "--docid", "d", "--split"]);
    let two = first["sections"][1]["kbid"].as_str().unwrap().to_string();
    // The fact also joins the document, then leaves it with the re-learn: still the user's.
    db.learn(&["a standalone fact", "--docid", "d"]);
    std::fs::write(&file, "# D\n\none\n\n## Two\n\ntwo, edited\n").unwrap();
    let second = db.learn(&["--file", file.to_str().unwrap(), "--docid", "d", "--split"]);
    assert!(
        second["detached"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k == &two)
    );

    // The detached section left with the write that detached it: nothing for gc to do.
    let (code, _) = run_json(&db, &["retrieve", "--kbid", &two]);
    assert_eq!(code, 4);
    db.json(&["retrieve", "--kbid", &fact]);
    let (code, check) = run_json(&db, &["check"]);
    assert_eq!(code, 0, "{check}");
    assert_eq!(db.json(&["gc"])["removed_sections"], 0);
}

mod damaged {
    //! `check` finds each kind of damage, made on purpose in the store.
    use super::*;
    use kbdb::store::tables::*;
    use kbdb::types::records::{DocumentRecord, SectionRecord, decode, encode};
    use redb::ReadableTable;

    fn with_store(db: &TestDb, f: impl FnOnce(&redb::WriteTransaction)) {
        db.stop_daemon();
        let store = redb::Database::create(db.dir.join("kbdb.redb")).unwrap();
        let txn = store.begin_write().unwrap();
        f(&txn);
        txn.commit().unwrap();
    }

    fn kinds(v: &Value, list: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = v[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap().to_string(),
                    e["entity"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn check_names_every_kind_of_damage() {
        let db = TestDb::new();
        let file = db.tmp.path().join("a.md");
        std::fs::write(
            &file,
            "# A\n\nsee [b](b.md#two) and [[missing/doc]]\n\n## Two\n\nback to [a](b.md#two)\n",
        )
        .unwrap();
        let doc = db.learn(&["--file", file.to_str().unwrap(), "--docid", "b", "--split"]);
        let a = doc["sections"][0]["kbid"].as_str().unwrap().to_string();
        let two = doc["sections"][1]["kbid"].as_str().unwrap().to_string();
        let text = db.learn(&["some text"])["kbid"]
            .as_str()
            .unwrap()
            .to_string();
        let typed = db.learn(&["not json at all"])["kbid"]
            .as_str()
            .unwrap()
            .to_string();
        let v1 = db.learn(&["version one", "--source", "k"])["kbid"]
            .as_str()
            .unwrap()
            .to_string();
        db.learn(&["version two", "--source", "k"]);
        let member = db.learn(&["a member", "--docid", "m"])["kbid"]
            .as_str()
            .unwrap()
            .to_string();
        let (code, healthy) = run_json(&db, &["check"]);
        assert_eq!(code, 7);
        assert_eq!(
            kinds(&healthy, "errors"),
            vec![("broken_reference".to_string(), a.clone())],
            "only the dangling wiki-link so far"
        );
        assert_eq!(
            kinds(&healthy, "warnings"),
            vec![
                ("circular_reference".to_string(), two.clone()),
                ("divergent_content".to_string(), "k".to_string()),
            ],
            "'Two' links to itself by its own heading; two versions under one key are a \
             conflict to resolve, not damage"
        );

        let unindexed = kbdb::kbid_of(b"slipped in");
        with_store(&db, |txn| {
            // checksum_mismatch: content changed behind the checksum's back.
            let mut sections = txn.open_table(SECTIONS).unwrap();
            let text_rec: SectionRecord = decode(
                "sections",
                &text,
                sections.get(text.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            let mut content = txn.open_table(CONTENT).unwrap();
            content
                .insert(text_rec.content_seq, b"other text".as_slice())
                .unwrap();
            // checksum_mismatch: a second record names that content row (its own is left
            // unnamed: an orphan row).
            let mut v1_rec: SectionRecord = decode(
                "sections",
                &v1,
                sections.get(v1.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            v1_rec.content_seq = text_rec.content_seq;
            sections
                .insert(v1.as_str(), encode(&v1_rec).as_slice())
                .unwrap();
            // type_mismatch: a text section relabelled as JSON.
            let mut rec: SectionRecord = decode(
                "sections",
                &typed,
                sections.get(typed.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            rec.section_type = "application/json".into();
            sections
                .insert(typed.as_str(), encode(&rec).as_slice())
                .unwrap();
            // index_mismatch: a section written without a change-log entry.
            rec.section_type = "text/plain".into();
            rec.checksum = kbdb::types::kbid::hex(&kbdb::types::kbid::sha256(b"slipped in"));
            rec.size = 10;
            rec.standalone = true;
            rec.content_seq = content.last().unwrap().unwrap().0.value() + 1;
            sections
                .insert(unindexed.as_str(), encode(&rec).as_slice())
                .unwrap();
            content
                .insert(rec.content_seq, b"slipped in".as_slice())
                .unwrap();
            // orphan_content (a warning): two more content rows no record names.
            for seq in [rec.content_seq + 1, rec.content_seq + 7] {
                content.insert(seq, b"nobody's".as_slice()).unwrap();
            }
            // orphan_document: a manifest whose only section does not exist.
            let mut ghost = DocumentRecord::empty("2026-01-01T00:00:00Z");
            let nothing = kbdb::kbid_of(b"nothing");
            ghost.kbids = vec![nothing.clone()];
            txn.open_table(DOCUMENTS)
                .unwrap()
                .insert("ghost", encode(&ghost).as_slice())
                .unwrap();
            let mut memberships = txn.open_multimap_table(SECTION_DOCS).unwrap();
            memberships.insert(nothing.as_str(), "ghost").unwrap();
            // manifest_mismatch: a membership lost (a section's first document is kept in
            // its record, and is taken out of it here).
            let mut member_rec: SectionRecord = decode(
                "sections",
                &member,
                sections.get(member.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            assert_eq!(member_rec.doc.as_deref(), Some("m"));
            member_rec.doc = None;
            sections
                .insert(member.as_str(), encode(&member_rec).as_slice())
                .unwrap();
            // manifest_mismatch: a membership row the manifest does not list.
            memberships.insert(v1.as_str(), "stray").unwrap();
            let mut stray = DocumentRecord::empty("2026-01-01T00:00:00Z");
            stray.kbids = vec![member.clone()];
            txn.open_table(DOCUMENTS)
                .unwrap()
                .insert("stray", encode(&stray).as_slice())
                .unwrap();
            memberships.insert(member.as_str(), "stray").unwrap();
        });
        let (code, v) = run_json(&db, &["check"]);
        assert_eq!(code, 7);
        let found = kinds(&v, "errors");
        let nothing = kbdb::kbid_of(b"nothing");
        for expected in [
            ("checksum_mismatch", text.as_str()),
            ("type_mismatch", typed.as_str()),
            ("index_mismatch", unindexed.as_str()),
            ("orphan_document", "ghost"),
            ("broken_reference", "ghost"),
            ("broken_reference", a.as_str()),
            ("manifest_mismatch", "m"),
            ("manifest_mismatch", "stray"),
        ] {
            assert!(
                found.contains(&(expected.0.to_string(), expected.1.to_string())),
                "{expected:?} not in {found:?}"
            );
        }
        let ghost_detail = v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == "broken_reference" && e["entity"] == "ghost")
            .unwrap()["detail"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(ghost_detail.contains(&nothing));
        let (first, second) = if text < v1 {
            (&text, &v1)
        } else {
            (&v1, &text)
        };
        let shared = v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == "checksum_mismatch" && e["entity"] == second.as_str())
            .unwrap_or_else(|| panic!("no error for {second} in {v}"));
        assert!(
            shared["detail"]
                .as_str()
                .unwrap()
                .ends_with(&format!("is also named by {first}")),
            "{shared}"
        );
        assert_eq!(v["sections_checked"], 8);
        let orphans = v["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["type"] == "orphan_content")
            .unwrap_or_else(|| panic!("no orphan_content warning in {v}"));
        assert!(
            orphans["detail"]
                .as_str()
                .unwrap()
                .starts_with("3 content row(s)"),
            "{orphans}"
        );

        // rebuild brings the index back in line with the store.
        let r = db.json(&["rebuild"]);
        assert_eq!(r["sections_reindexed"], 8);
        let (_, v) = run_json(&db, &["check"]);
        assert!(
            !kinds(&v, "errors")
                .iter()
                .any(|(k, _)| k == "index_mismatch")
        );
    }
}

#[test]
fn export_during_concurrent_writes_is_a_consistent_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = kbdb::Kb::open_or_create(tmp.path().join("kb")).unwrap();
    let kb = std::sync::Arc::new(kb);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (kb, stop) = (kb.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let md: String = (0..5)
                    .map(|s| format!("# Part {s} of {n}\n\nbody {s} of document {n}\n\n"))
                    .collect();
                kb.learn_document(&format!("docs/{n}"), &md, None).unwrap();
                n += 1;
            }
            n
        })
    };
    let mut exports = Vec::new();
    for i in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        let path = tmp.path().join(format!("snap{i}"));
        let r = kb
            .export(&kbdb::ExportOptions {
                path: path.clone(),
                ..Default::default()
            })
            .unwrap();
        exports.push((path, r));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = writer.join().unwrap();
    assert!(written > 3, "the writer kept writing during the exports");
    for (path, r) in exports {
        let catalog = std::fs::read_to_string(path.join("catalog.toml")).unwrap();
        let sections = glob_files(&path.join("sections"), "toml").len() as u64;
        assert_eq!(r.sections_exported, sections);
        assert!(catalog.contains(&format!("sections = {sections}")));
        let docs: Vec<_> = std::fs::read_dir(path.join("documents/docs"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(docs.len() as u64, r.documents_exported);
        assert_eq!(
            sections,
            5 * r.documents_exported,
            "documents are whole or absent"
        );
        for d in docs {
            let text = std::fs::read_to_string(d.path()).unwrap();
            let manifest: toml::Value = toml::from_str(&text).unwrap();
            for k in manifest["kbids"].as_array().unwrap() {
                let k = k.as_str().unwrap();
                assert!(
                    path.join("sections")
                        .join(&k[..2])
                        .join(format!("{k}.md"))
                        .exists()
                );
            }
        }
    }
}

#[test]
fn export_can_be_confined_to_a_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = kbdb::Kb::open_or_create(tmp.path().join("kb")).unwrap();
    kb.learn(kbdb::LearnRequest::text("x")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let err = kb
        .export(&kbdb::ExportOptions {
            path: outside.path().join("e"),
            confine_to: Some(tmp.path().to_path_buf()),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(err.field(), Some("path"));
    assert!(err.to_string().contains("confined"));
    assert!(!outside.path().join("e").exists());
    kb.export(&kbdb::ExportOptions {
        path: tmp.path().join("inside"),
        confine_to: Some(tmp.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
}

#[test]
fn import_of_a_folder_that_is_not_a_layout_is_refused_and_writes_nothing() {
    let db = TestDb::new();
    let empty = db.tmp.path().join("not-a-layout");
    std::fs::create_dir_all(&empty).unwrap();
    let (code, v) = run_json(&db, &["import", empty.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert_eq!(v["error"]["code"], "bad_import");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("catalog.toml")
    );
    std::fs::write(
        empty.join("catalog.toml"),
        "[catalog]\nformat_version = 9\nkbdb_version = \"9\"\nschema_version = 9\nexported_at = \"x\"\nsections = 0\ndocuments = 0\n",
    )
    .unwrap();
    let (code, v) = run_json(&db, &["import", empty.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("format_version 9")
    );
    assert_eq!(db.status()["sections"], 0);
}

/// The files below `dir`, relative, with their bytes: to compare a folder before and after.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn error_message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn export_force_replaces_only_an_empty_folder_or_an_earlier_export() {
    let db = rich_corpus();
    // A folder of the user's: --force refuses it, names it and what is in it, deletes nothing.
    let v = db.tmp.path().join("v");
    std::fs::create_dir_all(v.join("important")).unwrap();
    std::fs::write(v.join("important/thesis.txt"), "precious").unwrap();
    let (code, r) = run_json(&db, &["export", v.to_str().unwrap(), "--force"]);
    assert_eq!(code, 3, "{r}");
    let m = error_message(&r);
    assert!(
        m.contains(v.to_str().unwrap()) && m.contains("important/"),
        "{m}"
    );
    assert!(m.contains("--force"), "{m}");
    assert_eq!(
        std::fs::read_to_string(v.join("important/thesis.txt")).unwrap(),
        "precious"
    );

    // An empty folder is replaced, with or without --force.
    let empty = db.tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert_eq!(
        db.json(&["export", empty.to_str().unwrap(), "--force"])["sections_exported"],
        9
    );

    // An earlier export: refused without --force (which the message names), replaced with it.
    let earlier = db.tmp.path().join("earlier");
    export(&db, &earlier, &[]);
    let (code, r) = run_json(&db, &["export", earlier.to_str().unwrap()]);
    assert_eq!(code, 3, "{r}");
    assert!(error_message(&r).contains("earlier kbdb export"), "{r}");
    db.learn(&["one more section after the first export"]);
    let r = db.json(&["export", earlier.to_str().unwrap(), "--force"]);
    assert_eq!(r["sections_exported"], 10);
    assert!(
        std::fs::read_to_string(earlier.join("catalog.toml"))
            .unwrap()
            .contains("sections = 10")
    );

    // Recognised by its catalog, strictly: a catalog beside foreign files is not an export,
    // wherever the foreign file is; nor is a catalog that is not one.
    for foreign in ["notes.txt", "sections/notes.txt", "documents/ops/notes.md"] {
        let mixed = db.tmp.path().join("mixed");
        let _ = std::fs::remove_dir_all(&mixed);
        export(&db, &mixed, &[]);
        std::fs::write(mixed.join(foreign), "mine").unwrap();
        let before = tree(&mixed);
        let (code, r) = run_json(&db, &["export", mixed.to_str().unwrap(), "--force"]);
        assert_eq!(code, 3, "{foreign}: {r}");
        assert!(error_message(&r).contains("not a kbdb export"), "{r}");
        assert_eq!(tree(&mixed), before, "{foreign}");
    }
    let fake = db.tmp.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::write(fake.join("catalog.toml"), "title = \"my catalog\"\n").unwrap();
    let (code, _) = run_json(&db, &["export", fake.to_str().unwrap(), "--force"]);
    assert_eq!(code, 3);
    assert!(fake.join("catalog.toml").exists());
}

#[test]
fn a_forced_export_that_fails_half_way_leaves_the_previous_export_whole() {
    let db = rich_corpus();
    let out = db.tmp.path().join("backup");
    export(&db, &out, &[]);
    let before = tree(&out);
    // Damage the store so that the export fails after some sections were written: the last
    // section's content row goes missing.
    db.stop_daemon();
    {
        use kbdb::store::tables::{CONTENT, SECTIONS};
        use redb::{ReadableDatabase, ReadableTable};
        let store = redb::Database::open(db.dir.join("kbdb.redb")).unwrap();
        let txn = store.begin_write().unwrap();
        {
            let sections = txn.open_table(SECTIONS).unwrap();
            let last = sections.last().unwrap().unwrap().0.value().to_string();
            let rec: kbdb::types::records::SectionRecord = kbdb::types::records::decode(
                "sections",
                &last,
                sections.get(last.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            drop(sections);
            let mut content = txn.open_table(CONTENT).unwrap();
            content.remove(rec.content_seq).unwrap();
        }
        txn.commit().unwrap();
        let _ = store.begin_read();
    }
    let (code, r) = run_json(&db, &["export", out.to_str().unwrap(), "--force"]);
    assert_ne!(code, 0, "{r}");
    assert_eq!(tree(&out), before, "the previous export changed");
    let leftovers: Vec<_> = std::fs::read_dir(db.tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".backup"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn mcp_export_with_force_never_deletes_a_project_folder() {
    let db = TestDb::new();
    db.learn(&["a section to export"]);
    let project = db.dir.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::write(project.join("src/main.rs"), "fn main() {}").unwrap();
    let mut m = common::mcp::McpChild::start(&db);
    let (err, text) = m.tool("export", json!({"path": "src", "force": true}));
    assert!(err, "{text}");
    assert!(text.contains("src") && text.contains("main.rs"), "{text}");
    assert!(
        text.contains("force: true") && !text.contains("--force"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("src/main.rs")).unwrap(),
        "fn main() {}"
    );
    // Its own earlier export it replaces; without force it says how.
    m.tool_ok("export", json!({"path": "snapshot"}));
    let (err, text) = m.tool("export", json!({"path": "snapshot"}));
    assert!(
        err && text.contains("force: true") && !text.contains("--force"),
        "{text}"
    );
    assert_eq!(
        m.tool_ok("export", json!({"path": "snapshot", "force": true}))["sections_exported"],
        1
    );
    m.close();
}

#[test]
fn a_failed_import_leaves_no_trace() {
    let db = rich_corpus();
    let out = db.tmp.path().join("layout");
    export(&db, &out, &[]);
    let plain = db.json(&["search", "plain"])["items"][0]["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, content) = section_files(&out, &plain);
    std::fs::write(&content, "plain words HERE").unwrap();

    // No database yet: none is created, not even its folder.
    let fresh = TestDb::uninit();
    let (code, v) = run_json(&fresh, &["import", out.to_str().unwrap(), "--strict"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["error"]["code"], "bad_import");
    assert!(
        !fresh.dir.exists(),
        "a failed import created the database folder"
    );

    // A folder with only a configuration: it keeps only that.
    std::fs::create_dir_all(&fresh.dir).unwrap();
    std::fs::write(fresh.dir.join("worker.toml"), "").unwrap();
    let (code, _) = run_json(&fresh, &["import", out.to_str().unwrap(), "--strict"]);
    assert_eq!(code, 3);
    let names: Vec<String> = std::fs::read_dir(&fresh.dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["worker.toml"]);

    // Not a layout at all: nothing either.
    let other = TestDb::uninit();
    let (code, _) = run_json(&other, &["import", fresh.dir.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(!other.dir.exists());

    // An existing database is unchanged.
    let existing = TestDb::new();
    existing.learn(&["already here"]);
    let state = existing.state();
    let (code, _) = run_json(&existing, &["import", out.to_str().unwrap(), "--strict"]);
    assert_eq!(code, 3);
    assert_eq!(existing.state(), state);

    // The same layout without --strict imports what is good into a new database.
    let lenient = TestDb::uninit();
    assert_eq!(
        lenient.json(&["import", out.to_str().unwrap()])["sections_imported"],
        8
    );
}

#[test]
fn an_incomplete_export_is_refused_with_strict_and_reported_without() {
    let db = rich_corpus();
    let out = db.tmp.path().join("cut");
    export(&db, &out, &[]);
    // Two sections learned on their own vanish, both files: nothing else refers to them.
    for q in ["plain", "retries"] {
        let kbid = db.json(&["search", q])["items"][0]["kbid"]
            .as_str()
            .unwrap()
            .to_string();
        let (meta, content) = section_files(&out, &kbid);
        std::fs::remove_file(meta).unwrap();
        std::fs::remove_file(content).unwrap();
    }
    let strict = TestDb::uninit();
    let (code, v) = run_json(&strict, &["import", out.to_str().unwrap(), "--strict"]);
    assert_eq!(code, 3, "{v}");
    let m = error_message(&v);
    assert!(
        m.contains("lists 9 section(s) but the layout holds 7"),
        "{m}"
    );
    assert!(!strict.dir.exists());

    let lenient = TestDb::uninit();
    let r = lenient.json(&["import", out.to_str().unwrap()]);
    assert_eq!(r["sections_imported"], 7);
    assert_eq!(r["problems"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["problems"][0]["path"], "catalog.toml");
    assert!(
        r["problems"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("lists 9 section(s) but the layout holds 7"),
        "{r}"
    );
    // In text, a warning with the numbers.
    let out_text = lenient
        .cmd()
        .args(["import", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out_text.status.success());
    let text = String::from_utf8_lossy(&out_text.stdout);
    assert!(
        text.contains("warning: catalog.toml: lists 9 section(s)"),
        "{text}"
    );

    // Half copied: a whole documents folder missing.
    let half = db.tmp.path().join("half");
    export(&db, &half, &[]);
    std::fs::remove_dir_all(half.join("documents/ops")).unwrap();
    let (code, v) = run_json(
        &TestDb::uninit(),
        &["import", half.to_str().unwrap(), "--strict"],
    );
    assert_eq!(code, 3, "{v}");
    assert!(
        error_message(&v).contains("lists 3 document(s) but the layout holds 1"),
        "{v}"
    );
}

#[test]
fn import_reads_no_layout_file_past_its_bound() {
    let db = rich_corpus();
    let out = db.tmp.path().join("huge");
    export(&db, &out, &[]);
    let kbid = |q: &str| {
        db.json(&["search", q])["items"][0]["kbid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // A 50 GB sparse content file: refused by its size, never read.
    let (_, content) = section_files(&out, &kbid("plain"));
    std::fs::File::options()
        .write(true)
        .open(&content)
        .unwrap()
        .set_len(50 << 30)
        .unwrap();
    // A FIFO as content: refused, and the import does not wait for a writer.
    let (_, fifo) = section_files(&out, &kbid("retries"));
    std::fs::remove_file(&fifo).unwrap();
    common::mkfifo(&fifo);
    // A manifest past its bound (64 MiB).
    let manifest = out.join("documents/ops/a.toml");
    std::fs::File::options()
        .append(true)
        .open(&manifest)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    // A vectors.idx whose header announces more vectors than there are sections, its size
    // consistent with the header.
    std::fs::create_dir_all(out.join("indexes")).unwrap();
    let idx = out.join("indexes/vectors.idx");
    std::fs::write(&idx, b"KBVX\x01\x02\x00\x40\x42\x0f\x00").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&idx)
        .unwrap()
        .set_len(11 + 1_000_000 * (16 + 8))
        .unwrap();
    std::fs::write(
        out.join("indexes/vectors-meta.toml"),
        "[vectors]\nmodel_name = \"m\"\ndimensions = 2\nversion = 1\nlast_built = \"2026-01-01T00:00:00Z\"\nsection_count = 1000000\n",
    )
    .unwrap();

    let copy = TestDb::uninit();
    let start = std::time::Instant::now();
    let out_cmd = copy
        .cmd()
        .args(["import", out.to_str().unwrap(), "--format", "json"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(out_cmd.status.success(), "{out_cmd:?}");
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
    let r: Value = serde_json::from_slice(&out_cmd.stdout).unwrap();
    let reason = |path: &str| -> String {
        r["problems"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["path"].as_str().unwrap().ends_with(path))
            .map(|p| p["reason"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no problem for {path}: {r}"))
    };
    let content_meta = content.with_extension("toml");
    let plain_meta = content_meta.strip_prefix(&out).unwrap().to_str().unwrap();
    assert!(
        reason(plain_meta).contains("is 53687091200 bytes; the limit for this file is"),
        "{r}"
    );
    let fifo_meta = fifo.with_extension("toml");
    assert!(
        reason(fifo_meta.strip_prefix(&out).unwrap().to_str().unwrap())
            .contains("not a regular file"),
        "{r}"
    );
    assert!(
        reason("documents/ops/a.toml")
            .contains("is 68157440 bytes; the limit for this file is 67108864"),
        "{r}"
    );
    assert!(
        reason("indexes/vectors.idx").contains("announces 1000000 vectors but the layout has 9"),
        "{r}"
    );
    assert_eq!(r["sections_imported"], 7, "{r}");

    // The catalog itself: refused past 1 MiB.
    std::fs::File::options()
        .append(true)
        .open(out.join("catalog.toml"))
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    let (code, v) = run_json(&TestDb::uninit(), &["import", out.to_str().unwrap()]);
    assert_eq!(code, 3);
    assert!(
        error_message(&v).contains("the limit for this file is 1048576"),
        "{v}"
    );
}

#[test]
fn check_after_ordinary_edits_exits_0_and_lists_each_finding_once() {
    let db = TestDb::new();
    let file = db.tmp.path().join("b.md");
    // The first version links to a heading of its own that the second one drops.
    std::fs::write(&file, "# B\n\nsee [below](#old)\n\n## Old\n\ntext\n").unwrap();
    let first = db.learn(&["--file", file.to_str().unwrap(), "--docid", "b", "--split"]);
    let old: Vec<String> = first["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kbid"].as_str().unwrap().to_string())
        .collect();
    // A second document holds the first version, so the edit keeps it stored.
    db.learn(&[
        "--file",
        file.to_str().unwrap(),
        "--docid",
        "old-b",
        "--split",
    ]);
    std::fs::write(&file, "# B\n\nnew words\n\n## New\n\ntext\n").unwrap();
    db.learn(&["--file", file.to_str().unwrap(), "--docid", "b", "--split"]);

    // Then no document holds the first version (a store written by an older kbdb, which left
    // what edits detached, or changed by other means): the document's history. Still no damage.
    db.stop_daemon();
    {
        use kbdb::store::tables::{DOCUMENTS, SECTION_DOCS};
        use redb::ReadableDatabase;
        let store = redb::Database::create(db.dir.join("kbdb.redb")).unwrap();
        let txn = store.begin_write().unwrap();
        {
            let mut sd = txn.open_multimap_table(SECTION_DOCS).unwrap();
            for k in &old {
                sd.remove(k.as_str(), "old-b").unwrap();
            }
            txn.open_table(DOCUMENTS).unwrap().remove("old-b").unwrap();
        }
        txn.commit().unwrap();
        let _ = store.begin_read();
    }
    let (code, v) = run_json(&db, &["check"]);
    assert_eq!(code, 0, "history is no damage: {v}");
    assert_eq!(v["ok"], true);
    assert_eq!(v["errors"], json!([]));
    let warnings = v["warnings"].as_array().unwrap();
    for k in &old {
        assert!(
            warnings
                .iter()
                .any(|w| w["type"] == "orphan_section" && w["entity"] == k.as_str()),
            "{v}"
        );
    }
    assert!(
        !warnings.iter().any(|w| w["type"] == "divergent_content"),
        "{v}"
    );

    // A section that names the same missing document twice is one finding.
    let twice = db.learn(&["see [[nope/x]] and again [[nope/x]]"]);
    let (code, v) = run_json(&db, &["check"]);
    assert_eq!(code, 7, "{v}");
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["errors"][0]["type"], "broken_reference");
    assert_eq!(v["errors"][0]["entity"], twice["kbid"]);
}

mod upgrade {
    //! Databases written before detached sections were collected at once.
    use super::*;
    use kbdb::store::tables::*;
    use redb::{ReadableDatabase, ReadableTable};

    #[test]
    fn an_upgrade_collects_the_sections_an_older_kbdb_left_detached() {
        let db = TestDb::new();
        let fact = db.learn(&["a standalone fact about quokkas"])["kbid"]
            .as_str()
            .unwrap()
            .to_string();
        let doc = db.learn(&["# Notes\n\nwombats burrow deeply", "--docid", "notes"]);
        let kbid = doc["kbid"].as_str().unwrap().to_string();
        db.learn(&["# Other\n\nkeeps the document alive", "--docid", "notes"]);
        db.stop_daemon();
        // What an older kbdb left behind: the section lost its document but stayed stored,
        // at schema version 12.
        {
            let store = redb::Database::create(db.dir.join("kbdb.redb")).unwrap();
            let txn = store.begin_write().unwrap();
            {
                // Its membership (kept in its record since schema 22), taken out of the
                // record, as an older kbdb's had none.
                let mut sections = txn.open_table(SECTIONS).unwrap();
                let bytes = sections
                    .get(kbid.as_str())
                    .unwrap()
                    .unwrap()
                    .value()
                    .to_vec();
                let mut rec: kbdb::types::records::SectionRecord =
                    kbdb::types::records::decode("sections", &kbid, &bytes).unwrap();
                assert_eq!(rec.doc.as_deref(), Some("notes"));
                rec.doc = None;
                sections
                    .insert(kbid.as_str(), kbdb::types::records::encode(&rec).as_slice())
                    .unwrap();
                let mut docs = txn.open_table(DOCUMENTS).unwrap();
                let bytes = docs.get("notes").unwrap().unwrap().value().to_vec();
                let mut rec: kbdb::types::records::DocumentRecord =
                    kbdb::types::records::decode("documents", "notes", &bytes).unwrap();
                rec.kbids.retain(|k| k != &kbid);
                docs.insert("notes", kbdb::types::records::encode(&rec).as_slice())
                    .unwrap();
                let mut meta = txn.open_table(META).unwrap();
                meta.insert(META_SCHEMA_VERSION, 12u32.to_le_bytes().as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
            let r = store.begin_read().unwrap();
            assert!(
                r.open_table(SECTIONS)
                    .unwrap()
                    .get(kbid.as_str())
                    .unwrap()
                    .is_some()
            );
        }
        let (code, _) = run_json(&db, &["retrieve", "--kbid", &kbid]);
        assert_eq!(code, 4, "the upgrade collects the detached section");
        let found = db.json(&["search", "wombats"]);
        assert_eq!(found["items"].as_array().unwrap().len(), 0, "{found}");
        db.json(&["retrieve", "--kbid", &fact]);
        let (code, check) = run_json(&db, &["check"]);
        assert_eq!(code, 0, "{check}");
    }
}

/// Wait until the database's embedder has nothing pending.
fn wait_embedded(db: &TestDb) -> Value {
    let start = std::time::Instant::now();
    loop {
        let s = db.status();
        if s["vectors"]["pending_changes"] == 0 {
            return s;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "embeddings still pending: {s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn shipped_vectors_are_reused_whether_the_import_creates_the_database_or_not() {
    use std::sync::atomic::Ordering;
    let server = common::embed_server::EmbedServer::start();
    let db = TestDb::new();
    std::fs::write(
        db.dir.join("worker.toml"),
        server.worker_toml("concepts-v1"),
    )
    .unwrap();
    db.learn(&["We chose Postgres because of JSONB."]);
    db.learn(&["The kitten sleeps on the sofa."]);
    db.learn(&[
        "# Notes\n\nReleases go out on Tuesdays.",
        "--docid",
        "notes",
    ]);
    wait_embedded(&db);
    let out = db.tmp.path().join("with-vectors");
    export(&db, &out, &["--with-indexes"]);

    // Into a folder prepared with the same provider, the database not created yet.
    let created = TestDb::uninit();
    std::fs::create_dir_all(&created.dir).unwrap();
    std::fs::write(
        created.dir.join("worker.toml"),
        server.worker_toml("concepts-v1"),
    )
    .unwrap();
    // Into an initialised one.
    let inited = TestDb::new();
    std::fs::write(
        inited.dir.join("worker.toml"),
        server.worker_toml("concepts-v1"),
    )
    .unwrap();
    for target in [&created, &inited] {
        let before = server.requests.load(Ordering::SeqCst);
        let r = target.json(&["import", out.to_str().unwrap()]);
        assert_eq!(r["vectors_found"], 3, "{r}");
        assert_eq!(r["vectors_reused"], 3, "{r}");
        let s = wait_embedded(target);
        assert_eq!(s["vectors"]["count"], 3, "{s}");
        assert_eq!(
            server.requests.load(Ordering::SeqCst),
            before,
            "sections were embedded again"
        );
    }
}

#[test]
fn check_reads_back_the_lexical_index_stored_fields_and_rebuild_repairs_them() {
    let db = TestDb::new();
    let mut kbids = Vec::new();
    for i in 0..5 {
        let r = db.learn(&[&format!("section number {i} about zebras")]);
        kbids.push(r["kbid"].as_str().unwrap().to_string());
    }
    db.stop_daemon();
    // Damage the index's document stores (the stored kbid a search shows a hit by).
    for e in std::fs::read_dir(db.dir.join("index/lexical"))
        .unwrap()
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "store") {
            let mut b = std::fs::read(e.path()).unwrap();
            for x in b.iter_mut().take(40).skip(4) {
                *x = 0xAB;
            }
            std::fs::write(e.path(), b).unwrap();
        }
    }
    let (code, _) = run_json(&db, &["search", "zebras"]);
    assert_ne!(code, 0, "the damage shows in searches");
    let (code, v) = run_json(&db, &["check"]);
    assert_eq!(code, 7, "{v}");
    for k in &kbids {
        assert!(
            v["errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == "index_mismatch"
                    && e["entity"] == k.as_str()
                    && e["detail"].as_str().unwrap().contains("stored fields")),
            "{k} not reported: {v}"
        );
    }
    db.json(&["rebuild"]);
    let (code, v) = run_json(&db, &["check"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        db.json(&["search", "zebras"])["items"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

/// Copy the files of folder `from` into `to` (one level of folders: the database folder).
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_folder(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[test]
fn check_reports_damaged_redb_pages_instead_of_panicking() {
    let db = TestDb::new();
    let lines: String = (0..40)
        .map(|i| format!("{{\"content\": \"section {i} about the topic numbered {i}\"}}\n"))
        .collect();
    db.cmd()
        .args(["learn", "--jsonl"])
        .write_stdin(lines)
        .assert()
        .success();
    db.learn(&[
        "# Doc\n\nsome text\n\n## Part\n\nmore text",
        "--docid",
        "doc",
        "--split",
    ]);
    db.stop_daemon();
    let (code, v) = run_json(&db, &["--embedded", "check"]);
    assert_eq!(code, 0, "{v}");
    let pristine = std::fs::read(db.dir.join("kbdb.redb")).unwrap();
    // Damage the header of B-tree leaf pages (type byte 1), one page per copy: their entry
    // offsets point outside the page, where redb panics. (Branch pages are left alone: a debug
    // build of redb walks them at open, which is the store's concern, not check's.)
    let leaves: Vec<usize> = (1..pristine.len() / 4096)
        .filter(|p| pristine[p * 4096] == 1)
        .take(16)
        .collect();
    assert!(leaves.len() >= 4, "{leaves:?}");
    let mut reported_by_check = 0;
    for page in &leaves {
        let copy = db.tmp.path().join(format!("damaged-{page}"));
        copy_folder(&db.dir, &copy);
        let mut bytes = pristine.clone();
        for b in &mut bytes[page * 4096 + 16..page * 4096 + 48] {
            *b = 0xA5;
        }
        std::fs::write(copy.join("kbdb.redb"), bytes).unwrap();
        let out = common::kbdb_cmd()
            .env("KBDB_RUNTIME_DIR", db.runtime_dir())
            .args([
                "--embedded",
                "--db",
                copy.to_str().unwrap(),
                "check",
                "--format",
                "json",
            ])
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let code = out.status.code();
        // Never a panic (101): the open refuses the file with an error, or check reports
        // the damage (or finds nothing, when the page belongs to what check does not read:
        // the change log, freed pages).
        assert!(
            code.is_some_and(|c| c != 101),
            "page {page}: {code:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("page {page}: {e}: {}", String::from_utf8_lossy(&out.stdout))
        });
        if code == Some(7)
            && v["errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["type"] == "damaged")
        {
            reported_by_check += 1;
        }
    }
    assert!(reported_by_check > 0, "no damage reached check: {leaves:?}");
}

/// Every place `needle` is in `bytes`.
fn positions(bytes: &[u8], needle: &[u8]) -> Vec<usize> {
    bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn check_reports_a_section_record_changed_in_place() {
    // One byte of a record's title or type changed in kbdb.redb: its content still hashes to
    // its kbid, but exports, searches and recall would show the damage. The record's checksum
    // (record version 2) finds it; records an older kbdb wrote have none, and for those the
    // lexical index, written from the record, is the other copy `check` compares with (unit
    // test `maintenance::check` …`record_mismatch`).
    let db = TestDb::new();
    let titled = db.learn(&["plain words here", "--title", "Zebraheading"]);
    let typed = db.learn(&[
        "other plain words",
        "--type",
        "text/x-zebratype",
        "--tag",
        "zebratag",
    ]);
    db.learn(&["a third section"]);
    db.assert_checks_clean("before the damage");
    db.stop_daemon();
    let path = db.dir.join("kbdb.redb");
    let mut bytes = std::fs::read(&path).unwrap();
    for (needle, at) in [(&b"Zebraheading"[..], 5), (&b"text/x-zebratype"[..], 9)] {
        let found = positions(&bytes, needle);
        assert!(!found.is_empty(), "{:?} not in the file", needle);
        for p in found {
            bytes[p + at] = b'Q';
        }
    }
    std::fs::write(&path, bytes).unwrap();
    let (code, v) = run_json(&db, &["check"]);
    assert_eq!(code, 7, "{v}");
    let finding = |kbid: &Value| {
        v["errors"].as_array().unwrap().iter().any(|e| {
            e["type"] == "checksum_mismatch"
                && e["entity"] == *kbid
                && e["detail"]
                    .as_str()
                    .unwrap()
                    .contains("record checksum mismatch")
        })
    };
    assert!(finding(&titled["kbid"]), "{v}");
    assert!(finding(&typed["kbid"]), "{v}");
    // One finding each: the tag of the unreadable record is no second one.
    assert_eq!(v["errors"].as_array().unwrap().len(), 2, "{v}");
}
