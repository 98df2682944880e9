//! Reads: search input, `check` against the lexical index, tag counts.

use super::*;

#[test]
fn search_accepts_nul_and_control_characters() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    kb.learn(LearnRequest::text("null terminated strings"))
        .unwrap();
    for q in [
        "\u{0}",
        "null\u{0}terminated",
        "\u{1b}[31m",
        "\u{feff}strings",
    ] {
        let r = kb.search(&SearchRequest::new(q)).unwrap();
        assert!(r.total <= 1, "{q:?}");
    }
    assert_eq!(
        kb.search(&SearchRequest::new("null\u{0}terminated"))
            .unwrap()
            .total,
        1
    );
}

#[test]
fn search_rejects_an_unknown_mode_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    let mut req = SearchRequest::new("x");
    // A mode is parsed where the request comes in; the engine takes only valid ones.
    let bogus: std::result::Result<SearchRequest, _> =
        serde_json::from_value(serde_json::json!({"query": "x", "mode": "bogus"}));
    let e = crate::search::mode::invalid_choice(&bogus.unwrap_err().to_string()).unwrap();
    assert_eq!(e.field(), Some("mode"));
    assert_eq!(
        e.to_string(),
        "mode: 'bogus' is not one of sections, documents, stats, lexical, vector, hybrid"
    );
    req.mode = Some(crate::search::SearchMode::Documents);
    req.limit = Some(0);
    assert_eq!(kb.search(&req).unwrap_err().field(), Some("limit"));
}

#[test]
fn check_compares_a_record_without_checksum_with_the_lexical_index() {
    // Records an older kbdb wrote (version 1) carry no checksum: a title changed in place is
    // found by comparing the record with the lexical index, its one other copy.
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let r = kb
        .learn(LearnRequest {
            title: Some("Zebraheading".into()),
            ..LearnRequest::text("plain words here")
        })
        .unwrap();
    drop(kb);
    {
        let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut sections = txn.open_table(SECTIONS).unwrap();
            let mut rec: types::records::SectionRecord = types::records::decode(
                "sections",
                &r.kbid,
                sections.get(r.kbid.as_str()).unwrap().unwrap().value(),
            )
            .unwrap();
            rec.title = Some("ZebraQeading".into());
            let mut v1 = vec![1u8];
            let old = types::records::SectionRecordV3::before_0017(&rec);
            v1.extend(postcard::to_stdvec(&old).unwrap());
            sections.insert(r.kbid.as_str(), v1.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    let check = kb.check().unwrap();
    assert!(!check.ok);
    assert!(
        check.errors.iter().any(|f| f.kind == "record_mismatch"
            && f.entity == r.kbid
            && f.detail.contains("ZebraQeading")),
        "{check:?}"
    );
}

#[test]
fn tag_counts_list_the_most_used_tags_first_within_the_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    for (text, tags) in [
        ("Deploys go out on Tuesday.", vec!["ops", "release"]),
        ("The pager rotates weekly.", vec!["ops"]),
        ("Postgres was chosen for JSONB.", vec!["db"]),
    ] {
        kb.learn(LearnRequest {
            tags: tags.into_iter().map(String::from).collect(),
            ..LearnRequest::text(text)
        })
        .unwrap();
    }
    let all: Vec<(String, u64)> = kb
        .tag_counts(10)
        .unwrap()
        .into_iter()
        .map(|t| (t.tag, t.sections))
        .collect();
    assert_eq!(
        all,
        [("ops".into(), 2), ("db".into(), 1), ("release".into(), 1)]
    );
    assert_eq!(kb.tag_counts(1).unwrap().len(), 1);
}

#[test]
fn content_is_stored_compressed_and_read_back_exactly_and_damage_to_it_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let text = ["The journal is appended and fsynced before redb commits."; 40].join(" ");
    let long = kb.learn(LearnRequest::text(text.clone())).unwrap().kbid;
    let short = kb.learn(LearnRequest::text("a short fact")).unwrap().kbid;
    let read = |kb: &Kb, kbid: &str| kb.read_sections(&[kbid]).map(|s| s[0].content.clone());
    assert_eq!(read(&kb, &long).unwrap(), text);
    assert_eq!(read(&kb, &short).unwrap(), "a short fact");
    assert!(kb.check().unwrap().ok);
    drop(kb);

    let db = redb::Database::create(tmp.path().join(store::DB_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let sections = txn.open_table(SECTIONS).unwrap();
        let rec = |kbid: &str| -> types::records::SectionRecord {
            types::records::decode(
                "sections",
                kbid,
                sections.get(kbid).unwrap().unwrap().value(),
            )
            .unwrap()
        };
        let (long_rec, short_rec) = (rec(&long), rec(&short));
        let mut content = txn.open_table(CONTENT).unwrap();
        let mut row = content
            .get(long_rec.content_seq)
            .unwrap()
            .unwrap()
            .value()
            .to_vec();
        assert!(
            row.len() * 4 < text.len(),
            "stored in {} bytes for {}",
            row.len(),
            text.len()
        );
        let stored_short = content.get(short_rec.content_seq).unwrap().unwrap();
        assert_eq!(
            stored_short.value(),
            b"a short fact",
            "short content is stored as is"
        );
        drop(stored_short);
        // One byte of the compressed frame's data changed.
        let last = row.len() - 2;
        row[last] ^= 0x5a;
        content
            .insert(long_rec.content_seq, row.as_slice())
            .unwrap();
    }
    txn.commit().unwrap();
    drop(db);

    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(read(&kb, &short).unwrap(), "a short fact");
    let err = read(&kb, &long).unwrap_err();
    assert_eq!(err.code(), "damaged", "{err}");
    let check = kb.check().unwrap();
    assert!(!check.ok);
    assert!(
        check.errors.iter().any(|f| f.entity == long),
        "{:?}",
        check.errors
    );
}
