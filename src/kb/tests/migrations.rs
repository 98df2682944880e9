//! Schema migrations at open: each test builds a database in an older layout by hand and
//! checks what the migration leaves (and the compaction after an upgrade).

use super::*;

/// Record `version` as the database's schema version (a test pretending the database
/// predates the migrations after it).
fn set_schema_version(txn: &redb::WriteTransaction, version: u32) {
    if version < 22 {
        first_docs_as_rows(txn);
    }
    txn.open_table(META)
        .unwrap()
        .insert(META_SCHEMA_VERSION, version.to_le_bytes().as_slice())
        .unwrap();
}

/// Every section's first document back in `section_docs`, where kbdb kept all memberships
/// before schema 22, so that a test can pretend the database predates migration 22.
fn first_docs_as_rows(txn: &redb::WriteTransaction) {
    let mut sections = txn.open_table(SECTIONS).unwrap();
    let mut section_docs = txn
        .open_multimap_table(store::tables::SECTION_DOCS)
        .unwrap();
    let rows: Vec<(String, types::records::SectionRecord)> = sections
        .iter()
        .unwrap()
        .filter_map(|r| {
            let (k, v) = r.unwrap();
            let kbid = k.value().to_string();
            // A record a test rewrote in an older layout already (after this ran) has none.
            let rec = types::records::decode("sections", &kbid, v.value()).ok()?;
            Some((kbid, rec))
        })
        .collect();
    for (kbid, mut rec) in rows {
        if let Some(doc) = rec.doc.take() {
            section_docs.insert(kbid.as_str(), doc.as_str()).unwrap();
            sections
                .insert(
                    kbid.as_str(),
                    types::records::encode_section(&kbid, &rec).as_slice(),
                )
                .unwrap();
        }
    }
}

/// Put the content back where schema 9 kept it (`content`, keyed by kbid; records without
/// `content_seq`), so that a test can pretend the database predates migration 10.
fn content_as_in_schema_9(txn: &redb::WriteTransaction) {
    first_docs_as_rows(txn);
    let mut sections = txn.open_table(SECTIONS).unwrap();
    let rows: Vec<(String, types::records::SectionRecord)> = sections
        .iter()
        .unwrap()
        .map(|row| {
            let (k, v) = row.unwrap();
            let rec = types::records::decode("sections", k.value(), v.value()).unwrap();
            (k.value().to_string(), rec)
        })
        .collect();
    {
        let content = txn.open_table(CONTENT).unwrap();
        let mut old = txn.open_table(CONTENT_BY_KBID).unwrap();
        for (kbid, rec) in &rows {
            let bytes = content.get(rec.content_seq).unwrap().unwrap();
            old.insert(kbid.as_str(), bytes.value()).unwrap();
        }
    }
    for (kbid, rec) in rows {
        let v2 = types::records::SectionRecordV2 {
            section_type: rec.section_type,
            title: rec.title,
            description: rec.description,
            tags: rec.tags,
            source_key: rec.source_key,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
            checksum: rec.checksum,
            size: rec.size,
            standalone: rec.standalone,
            terms_count: rec.terms_count,
            bands: rec.bands.map(|keys| keys.map(u64::from)),
        };
        sections
            .insert(kbid.as_str(), types::records::encode(&v2).as_slice())
            .unwrap();
    }
    drop(sections);
    txn.delete_table(CONTENT).unwrap();
}

#[test]
fn migration_10_keys_content_by_sequence() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let texts = [
        "first fact of three",
        "second fact of three",
        "third fact of three",
    ];
    let kbids: Vec<String> = texts
        .iter()
        .map(|t| kb.learn(LearnRequest::text(*t)).unwrap().kbid)
        .collect();
    let lost = kb
        .learn(LearnRequest::text("its content goes missing"))
        .unwrap()
        .kbid;
    drop(kb);
    {
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        content_as_in_schema_9(&txn);
        txn.open_table(CONTENT_BY_KBID)
            .unwrap()
            .remove(lost.as_str())
            .unwrap();
        // Created in the reverse of kbid order, so that the numbering tells the two apart.
        let mut sections = txn.open_table(SECTIONS).unwrap();
        let mut by_kbid = kbids.clone();
        by_kbid.sort();
        for (day, kbid) in by_kbid.iter().rev().enumerate() {
            let mut rec: types::records::SectionRecordV2 = types::records::decode(
                "sections",
                kbid,
                sections.get(kbid.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            rec.created_at = format!("2026-01-0{}T00:00:00.000Z", day + 1);
            sections
                .insert(kbid.as_str(), types::records::encode(&rec).as_slice())
                .unwrap();
        }
        drop(sections);
        set_schema_version(&txn, 9);
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    let mut numbered = Vec::new();
    {
        let txn = kb.db().unwrap().begin_read().unwrap();
        assert!(
            txn.open_table(CONTENT_BY_KBID).is_err(),
            "the old table is gone"
        );
        let t = ReadTables::open(&txn).unwrap();
        for (kbid, text) in kbids.iter().zip(texts) {
            let rec = t.section(kbid).unwrap().unwrap();
            assert_eq!(t.content_of(&rec).unwrap().unwrap(), text.as_bytes());
            numbered.push((rec.created_at, kbid.clone(), rec.content_seq));
        }
        assert_eq!(t.section(&lost).unwrap().unwrap().content_seq, 0);
        assert_eq!(t.content(&lost).unwrap(), None);
    }
    // Numbered from 1 in creation order (ties by kbid); the missing content took no number.
    numbered.sort();
    assert_eq!(
        numbered.iter().map(|(_, _, s)| *s).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(
        numbered[0].1 > numbered[2].1,
        "the first created has the largest kbid"
    );
    // The creation times were changed behind the lexical index's back above: index them anew,
    // so that `check` compares the index with these records.
    kb.rebuild().unwrap();
    let report = kb.check().unwrap();
    assert!(!report.ok, "the section without content is reported");
    kb.unlearn(&lost).unwrap();
    assert!(kb.check().unwrap().ok);
    // New content goes after the highest sequence, and reads back by kbid.
    let r = kb.learn(LearnRequest::text("a fourth fact")).unwrap();
    let txn = kb.db().unwrap().begin_read().unwrap();
    let t = ReadTables::open(&txn).unwrap();
    assert_eq!(t.section(&r.kbid).unwrap().unwrap().content_seq, 4);
    assert_eq!(t.content(&r.kbid).unwrap().unwrap(), b"a fourth fact");
    assert_eq!(kb.read_sections(&[&kbids[1]]).unwrap()[0].content, texts[1]);
}

/// `n` distinct texts of ~1 KB each.
fn filler_texts(n: usize) -> Vec<String> {
    let filler = "a sentence of filler words for the content table. ".repeat(20);
    (0..n).map(|i| format!("{filler} number {i}")).collect()
}

/// A database in `dir` holding `texts` in the layout of schema 9 (before migration 0010);
/// their kbids.
fn schema_9_database(dir: &Path, texts: &[String]) -> Vec<String> {
    let kb = Kb::open_or_create(dir).unwrap().0;
    let kbids = kb
        .learn_many(
            texts
                .iter()
                .map(|t| LearnRequest::text(t.clone()))
                .collect(),
        )
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().kbid)
        .collect();
    drop(kb);
    let db = redb::Database::create(dir.join(store::DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    first_docs_as_rows(&txn);
    content_as_in_schema_9(&txn);
    set_schema_version(&txn, 9);
    txn.commit().unwrap();
    kbids
}

#[test]
fn upgrading_a_database_compacts_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    schema_9_database(tmp.path(), &filler_texts(1500));
    let file = tmp.path().join(store::DB_FILE);
    let before = std::fs::metadata(&file).unwrap().len();
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    let after = std::fs::metadata(&file).unwrap().len();
    // The migration rewrote every record and every content; without compaction the file
    // keeps the pages both copies took.
    assert!(
        after < before * 3 / 4,
        "{before} bytes before, {after} after"
    );
    assert!(kb.check().unwrap().ok);
}

#[test]
fn a_compaction_that_fails_after_an_upgrade_leaves_the_upgraded_database_working() {
    use store::faults::{Errno, FaultPlan, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let texts = filler_texts(400);
    let kbids = schema_9_database(tmp.path(), &texts);
    let file = tmp.path().join(store::DB_FILE);
    let before = std::fs::metadata(&file).unwrap().len();
    // A failed fsync of a migration fails the open; the first fsync whose failure the open
    // survives is the compaction's, which runs last and whose failure is only logged.
    let mut n = 1;
    let (kb, dir, plan) = loop {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(&file, dir.path().join(store::DB_FILE)).unwrap();
        let plan = FaultPlan::nth(Target::Store, Op::Sync, n, Errno::Eio);
        match Kb::open_with_io(dir.path(), plan.clone()) {
            Ok((kb, _)) => break (kb, dir, plan),
            Err(e) => assert!(n < 20, "every open failed, the last with {e}"),
        }
        n += 1;
    };
    assert!(n > 1, "the migrations made no fsync");
    assert_eq!(plan.fired().len(), 1, "{:?}", plan.fired());
    let file = dir.path().join(store::DB_FILE);
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        before,
        "the failed compaction left the file as it was"
    );
    // The migrations stand; the store reopens after the failure and serves everything.
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    let read = kb.read_sections(&[&kbids[0], &kbids[399]]).unwrap();
    assert_eq!(read[0].content, texts[0]);
    assert_eq!(read[1].content, texts[399]);
    let r = kb
        .learn(LearnRequest::text("learned after the failed compaction"))
        .unwrap();
    assert!(kb.check().unwrap().ok);
    drop(kb);
    let kb = Kb::open(dir.path()).unwrap();
    assert_eq!(kb.read_sections(&[&r.kbid]).unwrap().len(), 1);
    assert_eq!(kb.status().unwrap().sections, 401);
}

/// Open a database of an older schema: it is upgraded to the current one, and `gone` is no
/// longer one of its tables.
fn open_upgraded_without(dir: &Path, gone: redb::MultimapTableDefinition<&str, &str>) -> Kb {
    let kb = Kb::open(dir).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    assert!(
        kb.db()
            .unwrap()
            .begin_read()
            .unwrap()
            .open_multimap_table(gone)
            .is_err(),
        "{gone} is gone"
    );
    kb
}

#[test]
fn migration_11_drops_the_source_key_table_and_keys_come_from_the_records() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let fact = |content: &str, replace: bool| LearnRequest {
        content: content.into(),
        title: Some("Deploy".into()),
        replace,
        ..Default::default()
    };
    let first = kb.learn(fact("deploy with make all", false)).unwrap().kbid;
    let skill = kb
        .skill_learn(crate::skills::SkillInput {
            name: "greet".into(),
            description: "Say hello".into(),
            arguments: None,
            body: "Hello".into(),
        })
        .unwrap()
        .kbid;
    drop(kb);
    {
        // Schema 10 kept the pairs in a table of their own as well.
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        txn.open_multimap_table(SOURCE_KEYS)
            .unwrap()
            .insert("#Deploy", first.as_str())
            .unwrap();
        set_schema_version(&txn, 10);
        txn.commit().unwrap();
    }
    let kb = open_upgraded_without(tmp.path(), SOURCE_KEYS);
    // The index is built from the records: the key is still known after the reopen.
    let second = kb.learn(fact("deploy with just all", false)).unwrap();
    assert_eq!(second.warnings, ["source_key_exists"]);
    let check = kb.check().unwrap();
    assert!(check.ok, "{check:?}");
    assert_eq!(
        check
            .warnings
            .iter()
            .map(|f| (f.kind.as_str(), f.entity.as_str()))
            .collect::<Vec<_>>(),
        [("divergent_content", "#Deploy")]
    );
    let third = kb.learn(fact("deploy with cargo xtask", true)).unwrap();
    let mut gone = vec![first.clone(), second.kbid.clone()];
    gone.sort();
    let mut superseded = third.superseded.kbids().to_vec();
    superseded.sort();
    assert_eq!(superseded, gone, "every replaced kbid is given");
    for kbid in &gone {
        assert!(matches!(
            kb.read_sections(&[kbid.as_str()]),
            Err(KbError::NotFound(_))
        ));
    }
    assert!(kb.check().unwrap().ok);
    assert_eq!(
        kb.skills()
            .unwrap()
            .iter()
            .map(|s| &s.kbid)
            .collect::<Vec<_>>(),
        [&skill],
        "skills are listed by their source-key prefix"
    );
}

#[test]
fn migration_19_drops_the_document_side_membership_table_and_manifests_answer_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let many = crate::store::txn::HOLDS_SCAN_DOCS as usize + 2;
    let shared = kb.learn(in_document("## Contents", "d0")).unwrap().kbid;
    kb.learn_many(
        (1..many)
            .map(|i| in_document("## Contents", &format!("d{i}")))
            .collect(),
    )
    .unwrap();
    let own = kb.learn(in_document("Only in d0.", "d0")).unwrap().kbid;
    drop(kb);
    {
        // Schema 18 kept each document's sections in `doc_sections` as well.
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        {
            let mut doc_sections = txn.open_multimap_table(DOC_SECTIONS).unwrap();
            for i in 0..many {
                doc_sections
                    .insert(format!("d{i}").as_str(), shared.as_str())
                    .unwrap();
            }
            doc_sections.insert("d0", own.as_str()).unwrap();
        }
        set_schema_version(&txn, 18);
        txn.commit().unwrap();
    }
    let kb = open_upgraded_without(tmp.path(), DOC_SECTIONS);
    // Whether a document holds a section is read from its manifest now.
    assert!(!kb.learn(in_document("## Contents", "d1")).unwrap().attached);
    assert!(!kb.learn(in_document("Only in d0.", "d0")).unwrap().attached);
    assert!(
        kb.learn(in_document("## Contents", "new"))
            .unwrap()
            .attached
    );
    assert!(
        kb.learn(in_document("Only in d0.", "new"))
            .unwrap()
            .attached
    );
    let check = kb.check().unwrap();
    assert!(check.ok, "{check:?}");
    // Deleting a document still detaches what only it held.
    assert!(kb.remove_document("new").unwrap());
    assert!(kb.check().unwrap().ok);
}

#[test]
fn migrations_3_and_5_rebuild_near_duplicate_bands() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let text = "one two three four five six seven";
    let original = kb.learn(LearnRequest::text(text)).unwrap().kbid;
    drop(kb);
    {
        // Pretend the database predates migration 3 and holds stale band keys (and no
        // signatures table yet).
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        content_as_in_schema_9(&txn);
        txn.delete_table(MINHASH_SIGS).unwrap();
        {
            set_schema_version(&txn, 2);
            let mut bands = txn.open_multimap_table(MINHASH_BANDS).unwrap();
            bands.insert(42u64, "stale").unwrap();
        }
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    assert_eq!(
        rows(&kb)[2],
        1,
        "band keys in the record of the text section"
    );
    {
        let txn = kb.db().unwrap().begin_read().unwrap();
        assert!(
            txn.open_multimap_table(MINHASH_BANDS).is_err(),
            "migration 5 drops the band rows"
        );
    }
    // Learning a near copy finds the original through the rebuilt bands.
    let r = kb
        .learn(LearnRequest::text(format!("{text} eight")))
        .unwrap();
    assert!(r.near_duplicates.is_empty(), "4/6 shingles shared < 0.85");
    let r = kb.learn(LearnRequest::text(format!("{text} ."))).unwrap();
    assert_eq!(
        r.near_duplicates[0].kbid, original,
        "same words, other bytes: found via the bands"
    );
    assert_eq!(r.near_duplicates[0].similarity, 1.0);
}

#[test]
fn migration_9_moves_band_keys_into_the_section_records() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let base = "the quick brown fox jumps over the lazy dog near the river bank today";
    let text = kb.learn(LearnRequest::text(base)).unwrap().kbid;
    let image = kb
        .learn(LearnRequest {
            section_type: Some("image/png".into()),
            title: Some("pixel".into()),
            ..LearnRequest::text(base64::engine::general_purpose::STANDARD.encode(
                b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89",
            ))
        })
        .unwrap()
        .kbid;
    let sections: Vec<(String, types::records::SectionRecord)> = {
        let txn = kb.db().unwrap().begin_read().unwrap();
        let t = txn.open_table(SECTIONS).unwrap();
        [&text, &image]
            .iter()
            .map(|k| {
                let v = t.get(k.as_str()).unwrap().unwrap();
                let rec = types::records::decode("sections", k, v.value()).unwrap();
                (k.to_string(), rec)
            })
            .collect()
    };
    let keys = sections[0].1.bands.expect("a text section has band keys");
    assert_eq!(sections[1].1.bands, None, "an image has none");
    drop(kb);
    {
        // Pretend the database predates migration 9: records without band keys, the keys
        // in `minhash_sigs`.
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        content_as_in_schema_9(&txn);
        {
            set_schema_version(&txn, 8);
            let mut t = txn.open_table(SECTIONS).unwrap();
            for (kbid, rec) in &sections {
                let old = types::records::SectionRecordV1 {
                    section_type: rec.section_type.clone(),
                    title: rec.title.clone(),
                    description: rec.description.clone(),
                    tags: rec.tags.clone(),
                    source_key: rec.source_key.clone(),
                    created_at: rec.created_at.clone(),
                    updated_at: rec.updated_at.clone(),
                    checksum: rec.checksum.clone(),
                    size: rec.size,
                    standalone: rec.standalone,
                    terms_count: rec.terms_count,
                };
                t.insert(kbid.as_str(), types::records::encode(&old).as_slice())
                    .unwrap();
            }
            let mut sigs = txn.open_table(MINHASH_SIGS).unwrap();
            sigs.insert(
                text.as_str(),
                index::near_dup::encode_keys(&keys).as_slice(),
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    {
        let txn = kb.db().unwrap().begin_read().unwrap();
        assert!(txn.open_table(MINHASH_SIGS).is_err(), "the table is gone");
        let t = txn.open_table(SECTIONS).unwrap();
        for (kbid, rec) in &sections {
            let v = t.get(kbid.as_str()).unwrap().unwrap();
            let mut now: types::records::SectionRecord =
                types::records::decode("sections", kbid, v.value()).unwrap();
            assert_ne!(now.content_seq, 0, "content renumbered by migration 10");
            now.content_seq = rec.content_seq;
            assert_eq!(&now, rec, "every field kept, band keys moved in");
        }
    }
    assert!(kb.check().unwrap().ok);
    let r = kb.learn(LearnRequest::text(format!("{base}!"))).unwrap();
    assert_eq!(
        r.near_duplicates[0].kbid, text,
        "found through the moved keys"
    );
    kb.unlearn(&text).unwrap();
    let r = kb.learn(LearnRequest::text(format!("{base}?"))).unwrap();
    assert!(r.near_duplicates.iter().all(|n| n.kbid != text));
}

#[test]
fn migration_4_builds_the_reference_graph_of_existing_sections() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let target = kb
        .learn(LearnRequest::text("# Target\n\nthe target"))
        .unwrap();
    let source = kb
        .learn(LearnRequest {
            docid: Some("notes/one".into()),
            ..LearnRequest::text(format!(
                "# Source\n\nsee kbdb://section/{} and [two](two.md)",
                target.kbid
            ))
        })
        .unwrap();
    drop(kb);
    {
        // Pretend the database predates migration 4: no reference tables.
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        content_as_in_schema_9(&txn);
        {
            set_schema_version(&txn, 3);
        }
        txn.delete_table(store::tables::REFS_OUT).unwrap();
        txn.delete_multimap_table(store::tables::REFS_IN).unwrap();
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    let req = RecallRequest::new(Some(source.kbid.clone()), None, Some(2), None).unwrap();
    let Recalled::One(item) = kb.recall(&req).unwrap() else {
        panic!("one kbid gives one object")
    };
    let targets: Vec<_> = item
        .references
        .unwrap()
        .into_iter()
        .map(|r| (r.target.unwrap(), r.resolved.unwrap()))
        .collect();
    assert_eq!(
        targets,
        vec![
            (format!("kbdb://section/{}", target.kbid), true),
            ("kbdb://document/notes/two".to_string(), false),
        ],
        "relative links resolve against the section's document"
    );
    let req = RecallRequest::new(Some(target.kbid), None, Some(1), None).unwrap();
    let Recalled::One(item) = kb.recall(&req).unwrap() else {
        panic!()
    };
    assert_eq!(item.back_references.unwrap()[0].kbid, Some(source.kbid));
}

/// Rename a document in the raw tables, as a version that stored docids as typed would have
/// left it.
fn rename_raw(txn: &redb::WriteTransaction, from: &str, to: &str) {
    let mut docs = txn.open_table(DOCUMENTS).unwrap();
    let bytes = docs.remove(from).unwrap().unwrap().value().to_vec();
    docs.insert(to, bytes.as_slice()).unwrap();
    let doc: types::records::DocumentRecord =
        types::records::decode("documents", from, &bytes).unwrap();
    let mut section_docs = txn.open_multimap_table(SECTION_DOCS).unwrap();
    for k in &doc.kbids {
        section_docs.remove(k.as_str(), from).unwrap();
        section_docs.insert(k.as_str(), to).unwrap();
    }
}

#[test]
fn migration_14_stores_every_docid_in_nfc_and_keeps_both_documents_of_a_collision() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let doc = |docid: &str, text: &str| in_document(text, docid);
    let nfc = "a/caf\u{e9}";
    let nfd = "a/cafe\u{301}";
    let espresso = kb.learn(doc(nfc, "# Espresso\n\nespresso beans")).unwrap();
    kb.learn(doc("b/caf\u{e9}", "# Latte\n\nlatte milk"))
        .unwrap();
    let mocha = kb
        .learn(doc("b/other", "# Mocha\n\nmocha chocolate"))
        .unwrap();
    let linker = kb
        .learn(doc(
            "notes/one",
            "# Links\n\nsee [[a/caf\u{e9}#Espresso]] daily",
        ))
        .unwrap();
    drop(kb);
    {
        // Pretend the database predates migration 14, which stored docids as typed.
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        rename_raw(&txn, nfc, nfd);
        rename_raw(&txn, "b/other", "b/cafe\u{301}");
        {
            let mut refs_out = txn.open_table(REFS_OUT).unwrap();
            let mut marker: crate::text::markers::Marker = types::records::decode(
                "refs_out",
                "",
                refs_out
                    .get((linker.kbid.as_str(), 0))
                    .unwrap()
                    .unwrap()
                    .value(),
            )
            .unwrap();
            let mut refs_in = txn.open_multimap_table(REFS_IN).unwrap();
            refs_in
                .remove(marker.target.key().as_str(), linker.kbid.as_str())
                .unwrap();
            let crate::text::markers::Target::Document { docid, .. } = &mut marker.target else {
                panic!("a document reference")
            };
            *docid = nfd.into();
            refs_out
                .insert(
                    (linker.kbid.as_str(), 0),
                    types::records::encode(&marker).as_slice(),
                )
                .unwrap();
            refs_in
                .insert(marker.target.key().as_str(), linker.kbid.as_str())
                .unwrap();
        }
        set_schema_version(&txn, 13);
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    // Either spelling finds the renamed document.
    for typed in [nfc, nfd] {
        let view = kb.retrieve_document(typed).unwrap();
        assert_eq!(view.docid, nfc);
        assert_eq!(view.kbids, vec![espresso.kbid.clone()]);
        let hits = kb
            .search(&SearchRequest {
                query: "espresso".into(),
                docid: Some(typed.into()),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(hits.total, 1, "the docid filter in {typed:?} form");
    }
    // The collision: the NFC name was taken, so the other document got the next free name.
    assert_eq!(
        kb.retrieve_document("b/caf\u{e9}-2").unwrap().kbids,
        vec![mocha.kbid.clone()]
    );
    let mocha_hits = kb
        .search(&SearchRequest {
            query: "mocha".into(),
            docid: Some("b/caf\u{e9}-2".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(mocha_hits.total, 1, "the lexical index re-read the docids");
    // The reference names the NFC docid, so the heading it links to is referenced again.
    let req = RecallRequest::new(Some(espresso.kbid.clone()), None, Some(1), None).unwrap();
    let Recalled::One(item) = kb.recall(&req).unwrap() else {
        panic!("one kbid gives one object")
    };
    assert_eq!(
        item.back_references.unwrap()[0].kbid,
        Some(linker.kbid.clone())
    );
    let db = kb.db().unwrap();
    let txn = db.begin_read().unwrap();
    let docs = txn.open_table(DOCUMENTS).unwrap();
    for row in docs.iter().unwrap() {
        let (k, _) = row.unwrap();
        let d = k.value();
        assert_eq!(&*crate::types::validate::nfc(d), d, "stored docid {d:?}");
    }
    let check = kb.check().unwrap();
    assert!(check.ok, "{check:?}");
}

/// Every row of a table, key and stored bytes (keys of `changes` as decimal text).
fn raw_rows(kb: &Kb, table: &str) -> Vec<(String, Vec<u8>)> {
    let txn = kb.db().unwrap().begin_read().unwrap();
    let bytes = |v: redb::AccessGuard<&[u8]>| v.value().to_vec();
    if table == "changes" {
        let t = txn.open_table(CHANGES).unwrap();
        t.iter()
            .unwrap()
            .map(|r| r.unwrap())
            .map(|(k, v)| (k.value().to_string(), bytes(v)))
            .collect()
    } else {
        let def = if table == "sections" {
            SECTIONS
        } else {
            DOCUMENTS
        };
        let t = txn.open_table(def).unwrap();
        t.iter()
            .unwrap()
            .map(|r| r.unwrap())
            .map(|(k, v)| (k.value().to_string(), bytes(v)))
            .collect()
    }
}

#[test]
fn migration_17_rewrites_records_compactly_and_they_read_as_before() {
    use types::records::{
        ChangeRecord, ChangeRecordV1, DocumentRecord, DocumentRecordV1, RECORD_VERSION,
        SectionRecord, SectionRecordV3, decode, encode_before_0017,
    };
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let text = "the deploy runbook says to drain the queue before the restart";
    let mut with_docid = LearnRequest::text(text);
    with_docid.docid = Some("ops/runbook.md".into());
    with_docid.title = Some("Deploy".into());
    let original = kb.learn(with_docid).unwrap().kbid;
    let mut sourced = LearnRequest::text("a fact from elsewhere, with its own source key");
    sourced.source = Some("wiki:page/17".into());
    kb.learn(sourced).unwrap();
    kb.learn(LearnRequest::text("a plain note")).unwrap();
    let before: Vec<Vec<(String, Vec<u8>)>> = ["sections", "documents", "changes"]
        .iter()
        .map(|t| raw_rows(&kb, t))
        .collect();
    drop(kb);
    // Write every record back as kbdb wrote it before migration 17, one of them with a
    // timestamp of another shape (kept as its text).
    let old_sections: Vec<(String, SectionRecordV3)> = before[0]
        .iter()
        .map(|(k, v)| {
            let rec: SectionRecord = decode("sections", k, v).unwrap();
            let mut old = SectionRecordV3::before_0017(&rec);
            // 64-bit keys, as kbdb computed them then, that fold to today's 32-bit ones.
            let high: u64 = 0x9e37_79b9;
            old.bands = rec
                .bands
                .map(|keys| keys.map(|k| high << 32 | (u64::from(k) ^ high)));
            if rec.source_key.as_deref() == Some("wiki:page/17") {
                old.updated_at = "2026-12-04T18:54:29+00:00".into();
            }
            (k.clone(), old)
        })
        .collect();
    {
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        {
            let mut sections = txn.open_table(SECTIONS).unwrap();
            for (k, old) in &old_sections {
                sections
                    .insert(k.as_str(), encode_before_0017(old).as_slice())
                    .unwrap();
            }
            let mut documents = txn.open_table(DOCUMENTS).unwrap();
            for (k, v) in &before[1] {
                let d: DocumentRecord = decode("documents", k, v).unwrap();
                let old = DocumentRecordV1 {
                    title: d.title,
                    doc_type: d.doc_type,
                    metadata: d.metadata,
                    kbids: d.kbids,
                    created_at: d.created_at,
                    updated_at: d.updated_at,
                };
                documents
                    .insert(k.as_str(), encode_before_0017(&old).as_slice())
                    .unwrap();
            }
            let mut changes = txn.open_table(CHANGES).unwrap();
            for (k, v) in &before[2] {
                let c: ChangeRecord = decode("changes", k, v).unwrap();
                let old = ChangeRecordV1 {
                    kind: c.kind,
                    id: c.id,
                    at: c.at,
                };
                changes
                    .insert(
                        k.parse::<u64>().unwrap(),
                        encode_before_0017(&old).as_slice(),
                    )
                    .unwrap();
            }
        }
        set_schema_version(&txn, 16);
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    let after: Vec<Vec<(String, Vec<u8>)>> = ["sections", "documents", "changes"]
        .iter()
        .map(|t| raw_rows(&kb, t))
        .collect();
    {
        // The tables were rebuilt through copies, which are gone.
        let txn = kb.db().unwrap().begin_read().unwrap();
        let names: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|t| redb::TableHandle::name(&t).to_string())
            .collect();
        assert!(names.iter().all(|n| !n.ends_with("_0017")), "{names:?}");
        assert!(names.iter().any(|n| n == "sections"), "{names:?}");
    }
    for (table, rows) in ["sections", "documents", "changes"].iter().zip(&after) {
        assert!(!rows.is_empty(), "{table}");
        assert!(
            rows.iter().all(|(_, v)| v[0] == RECORD_VERSION),
            "every {table} record rewritten"
        );
    }
    // The same records, field for field, each section record at least 100 bytes smaller.
    for ((k, old), (k2, v)) in old_sections.iter().zip(&after[0]) {
        assert_eq!(k, k2);
        let now: SectionRecord = decode("sections", k, v).unwrap();
        let expected: SectionRecord = old.clone().into();
        assert_eq!(now, expected);
        assert!(
            v.len() + 100 < encode_before_0017(old).len(),
            "{} bytes, {} before",
            v.len(),
            encode_before_0017(old).len()
        );
    }
    assert_eq!(
        after[1].iter().map(|(k, _)| k).collect::<Vec<_>>(),
        before[1].iter().map(|(k, _)| k).collect::<Vec<_>>()
    );
    for ((k, v), (_, was)) in after[1].iter().zip(&before[1]) {
        let now: DocumentRecord = decode("documents", k, v).unwrap();
        let then: DocumentRecord = decode("documents", k, was).unwrap();
        assert_eq!(now, then);
    }
    for ((k, v), (_, was)) in after[2].iter().zip(&before[2]) {
        let now: ChangeRecord = decode("changes", k, v).unwrap();
        let then: ChangeRecord = decode("changes", k, was).unwrap();
        assert_eq!(now, then);
    }
    assert!(kb.check().unwrap().ok);
    // The band keys written as 64-bit keys still find the section's near copies.
    let r = kb.learn(LearnRequest::text(format!("{text} !"))).unwrap();
    assert_eq!(
        r.near_duplicates.first().map(|n| n.kbid.as_str()),
        Some(original.as_str())
    );
}

#[test]
fn migration_20_stores_each_checksum_after_its_kbid_and_records_read_as_before() {
    use types::records::{SectionRecord, decode, encode};
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    for i in 0..50 {
        kb.learn(LearnRequest {
            docid: Some(format!("notes/{}", i % 7)),
            ..LearnRequest::text(format!("note number {i} about the deploy runbook"))
        })
        .unwrap();
    }
    let today = raw_rows(&kb, "sections");
    let read = |rows: &[(String, Vec<u8>)]| -> Vec<SectionRecord> {
        rows.iter()
            .map(|(k, v)| decode("sections", k, v).unwrap())
            .collect()
    };
    // Schema 19 kept every membership in `section_docs` (`first_docs_as_rows`, below), and a
    // record that migration 20 rewrites has no first document.
    let records: Vec<SectionRecord> = read(&today)
        .into_iter()
        .map(|r| SectionRecord { doc: None, ..r })
        .collect();
    let today: Vec<(String, Vec<u8>)> = today
        .iter()
        .zip(&records)
        .map(|((k, _), r)| (k.clone(), types::records::encode_section(k, r)))
        .collect();
    drop(kb);
    {
        // Schema 19 stored every checksum whole.
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        first_docs_as_rows(&txn);
        {
            let mut sections = txn.open_table(SECTIONS).unwrap();
            for ((k, _), rec) in today.iter().zip(&records) {
                sections.insert(k.as_str(), encode(rec).as_slice()).unwrap();
            }
        }
        set_schema_version(&txn, 19);
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    let upgraded = raw_rows(&kb, "sections");
    assert_eq!(read(&upgraded), records, "every record reads as before");
    for ((k, new), rec) in upgraded.iter().zip(&records) {
        assert_eq!(new.len() + 16, encode(rec).len(), "{k}: 16 bytes less");
    }
    assert_eq!(upgraded, today, "as a record written today");
    let check = kb.check().unwrap();
    assert!(check.ok, "{check:?}");
    assert_eq!(
        kb.search(&crate::SearchRequest::new("runbook"))
            .unwrap()
            .total,
        50
    );
}
