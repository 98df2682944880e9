//! Unit tests of the engine that need its private parts (transactions, indexes).

use base64::Engine;
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::*;
use crate::store::tables::*;
use crate::store::txn::{ReadTables, WriteTables};
use crate::types::*;
use crate::{SearchRequest, WriteOp, WriteOutcome, now};

fn rows(kb: &Kb) -> [u64; 6] {
    let txn = kb.db().unwrap().begin_read().unwrap();
    let mm = |d| txn.open_multimap_table(d).unwrap().len().unwrap();
    [
        mm(TAGS),
        // Entries of the in-memory source-key index (migration 0011).
        kb.loaded_index_turn()
            .unwrap()
            .get()
            .map_or(0, |i| i.source_keys.len() as u64),
        // Sections whose record holds band keys (migration 0009).
        txn.open_table(SECTIONS)
            .unwrap()
            .iter()
            .unwrap()
            .filter(|row| {
                let (k, v) = row.as_ref().unwrap();
                let rec: types::records::SectionRecord =
                    types::records::decode("sections", k.value(), v.value()).unwrap();
                rec.bands.is_some()
            })
            .count() as u64,
        mm(DOC_SECTIONS),
        mm(SECTION_DOCS),
        txn.open_table(SECTIONS).unwrap().len().unwrap(),
    ]
}

/// Record `version` as the database's schema version (a test pretending the database
/// predates the migrations after it).
fn set_schema_version(txn: &redb::WriteTransaction, version: u32) {
    txn.open_table(META)
        .unwrap()
        .insert(META_SCHEMA_VERSION, version.to_le_bytes().as_slice())
        .unwrap();
}

/// Put the content back where schema 9 kept it (`content`, keyed by kbid; records without
/// `content_seq`), so that a test can pretend the database predates migration 10.
fn content_as_in_schema_9(txn: &redb::WriteTransaction) {
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
            bands: rec.bands,
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
    content_as_in_schema_9(&txn);
    set_schema_version(&txn, 9);
    txn.commit().unwrap();
    kbids
}

#[test]
fn a_skills_listing_does_not_wait_for_a_write_in_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Arc::new(Kb::open_or_create(tmp.path()).unwrap().0);
    kb.learn(LearnRequest {
        source: Some("skill:deploy".into()),
        ..LearnRequest::text("Run the deploy script, then check the health page.")
    })
    .unwrap();
    assert_eq!(kb.source_key_range("skill:").unwrap().len(), 1);
    // A write holds the writers' turn for its whole transaction.
    let turn = kb.loaded_index_turn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = {
        let kb = kb.clone();
        std::thread::spawn(move || {
            let _ = tx.send(kb.source_key_range("skill:").unwrap());
        })
    };
    let listed = rx.recv_timeout(std::time::Duration::from_secs(5));
    drop(turn);
    reader.join().unwrap();
    assert_eq!(listed.expect("the listing waited for the write").len(), 1);
    // Opened again, the indexes are not loaded yet: the listing loads them.
    drop(kb);
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(kb.source_key_range("skill:").unwrap().len(), 1);
}

#[test]
fn journaled_writes_come_back_from_the_journal_after_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    kb.enable_journal().unwrap();
    kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
    let mut kept = Vec::new();
    for i in 0..40 {
        let r = kb
            .learn(LearnRequest {
                docid: Some(format!("notes/{}", i % 3)),
                tags: vec![format!("t{}", i % 4)],
                title: Some(format!("Note {i}")),
                ..LearnRequest::text(format!(
                    "Fact {i}: the journal keeps writes; see [[notes/0]] and [[notes/{}]].",
                    (i + 1) % 3
                ))
            })
            .unwrap();
        kept.push(r.kbid);
    }
    let gone = kept.remove(7);
    kb.unlearn(&gone).unwrap();
    let seq = kb.status().unwrap().last_change_seq;
    // The files as a kill -9 now would leave them (the writes after the first are only in
    // redb's memory and the journal).
    let journal = store::journal::read_file(&tmp.path().join(store::journal::JOURNAL_FILE));
    assert!(
        journal.unwrap().len() >= 40,
        "the writes went through the journal"
    );
    let copy = |with_journal: bool| {
        let d = tempfile::tempdir().unwrap();
        std::fs::copy(
            tmp.path().join(store::DB_FILE),
            d.path().join(store::DB_FILE),
        )
        .unwrap();
        if with_journal {
            let j = store::journal::JOURNAL_FILE;
            std::fs::copy(tmp.path().join(j), d.path().join(j)).unwrap();
        }
        d
    };
    // Without the journal the file alone has lost them: the journal is what keeps them.
    let bare = copy(false);
    assert!(Kb::open(bare.path()).unwrap().status().unwrap().sections < 39);
    let crashed = copy(true);
    let kb2 = Kb::open(crashed.path()).unwrap();
    let st = kb2.status().unwrap();
    assert_eq!((st.sections, st.last_change_seq), (39, seq));
    for kbid in &kept {
        kb2.retrieve(Some(kbid), None).unwrap();
    }
    assert!(kb2.retrieve(Some(&gone), None).is_err());
    assert_eq!(
        kb2.retrieve_document("notes/1").unwrap().sections.len(),
        12,
        "note 7 was unlearned"
    );
    let check = kb2.check().unwrap();
    assert!(check.ok, "{:?}", check.errors);
    assert_eq!(
        kb2.search(&SearchRequest::new("journal keeps"))
            .unwrap()
            .total,
        39
    );
    // The replay is in the database now: the next open skips every record of the file.
    drop(kb2);
    let st = Kb::open(crashed.path()).unwrap().status().unwrap();
    assert_eq!((st.sections, st.last_change_seq), (39, seq));
    // A clean close makes everything durable in redb and empties the journal.
    drop(kb);
    let after = store::journal::read_file(&tmp.path().join(store::journal::JOURNAL_FILE));
    assert!(after.unwrap().is_empty());
    let bare = copy(false);
    assert_eq!(
        Kb::open(bare.path()).unwrap().status().unwrap().sections,
        39
    );
}

#[test]
fn a_full_disk_still_reads_the_writes_only_the_journal_holds() {
    use store::faults::FaultPlan;
    let tmp = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.enable_journal().unwrap();
    kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
    let kbids: Vec<String> = ["durable in redb", "journaled one", "journaled two"]
        .into_iter()
        .map(|text| kb.learn(LearnRequest::text(text)).unwrap().kbid)
        .collect();
    // The disk fills: the checkpoint fails, and the store reopens read-only. The view must
    // replay the journal, or it would show the first write only.
    plan.fill_disk();
    assert!(kb.checkpoint_journal().is_err());
    assert_eq!(kb.status().unwrap().sections, 3);
    for kbid in &kbids {
        kb.retrieve(Some(kbid), None).unwrap();
    }
    assert!(kb.learn(LearnRequest::text("refused")).is_err());
    // Space is back: the writable store replays them for good.
    plan.free_disk();
    kb.learn(LearnRequest::text("after the disk was full"))
        .unwrap();
    assert_eq!(kb.status().unwrap().sections, 4);
    assert!(kb.check().unwrap().ok);
}

#[test]
fn a_journal_append_that_fails_fails_its_write_and_a_replay_skips_it() {
    use store::faults::{Errno, FaultPlan, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.enable_journal().unwrap();
    kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
    let learn = |text: &str| kb.learn(LearnRequest::text(text));
    let journal = tmp.path().join(store::journal::JOURNAL_FILE);
    let records = || store::journal::read_file(&journal).unwrap();
    learn("first: the journal starts over, so this commits durably in redb").unwrap();
    learn("second: through the journal").unwrap();
    assert_eq!(records().len(), 1);
    // The third's fsync fails after its record was written whole.
    let next_sync = plan.count(Target::Journal, Op::Sync) + 1;
    plan.fail_nth(Target::Journal, Op::Sync, next_sync, Errno::Eio);
    let third = "third: its journal fsync fails";
    let err = learn(third).unwrap_err();
    assert!(err.to_string().contains("kbdb.journal"), "{err}");
    assert_eq!(records().len(), 2, "the failed record is in the file");
    assert_eq!(kb.status().unwrap().sections, 2);
    // The next write commits durably and claims the failed record's number; the one after
    // goes through the journal again, written over the older records from the start of the
    // file (numbers: the second 1, the failed third 2, the fifth 3).
    learn("fourth: durable in redb").unwrap();
    learn("fifth: through the journal again").unwrap();
    assert_eq!(records()[0].0, 3);
    let copy = tempfile::tempdir().unwrap();
    for f in [store::DB_FILE, store::journal::JOURNAL_FILE] {
        std::fs::copy(tmp.path().join(f), copy.path().join(f)).unwrap();
    }
    let kb2 = Kb::open(copy.path()).unwrap();
    assert_eq!(kb2.status().unwrap().sections, 4);
    assert_eq!(kb2.search(&SearchRequest::new("fsync")).unwrap().total, 0);
    assert_eq!(kb2.search(&SearchRequest::new("fifth")).unwrap().total, 1);
    assert!(kb2.check().unwrap().ok);
}

#[test]
fn a_skills_listing_after_the_store_reopened_lists_what_the_store_holds() {
    use store::faults::{Errno, FaultPlan, Op, Target};
    let skill = |name: &str, text: &str| LearnRequest {
        source: Some(format!("skill:{name}")),
        ..LearnRequest::text(text)
    };
    // Fail each fsync of the second skill's commit in turn. Its write reports the failure
    // and the store reopens; when the failing fsync came after the commit's pages were
    // written, the reopened file holds the commit anyway.
    let mut applied = 0;
    for k in 1.. {
        let tmp = tempfile::tempdir().unwrap();
        let plan = FaultPlan::new();
        let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
        kb.learn(skill(
            "deploy",
            "Run the deploy script, then check the health page.",
        ))
        .unwrap();
        // The listing loads the in-memory indexes.
        assert_eq!(kb.source_key_range("skill:").unwrap().len(), 1);
        let nth = plan.count(Target::Store, Op::Sync) + k;
        plan.fail_nth(Target::Store, Op::Sync, nth, Errno::Eio);
        let learned = kb.learn(skill("rollback", "Revert the release tag, then redeploy."));
        if plan.fired().is_empty() {
            assert!(k > 1, "the commit made no fsync");
            break;
        }
        assert!(
            learned.is_err(),
            "fsync {k} failed, yet the learn succeeded"
        );
        let stored = kb.status().unwrap().sections;
        applied += usize::from(stored == 2);
        // The indexes loaded before the reopen may not know the second skill: the listing
        // must not trust them, and reads the store as it is now.
        assert_eq!(
            kb.source_key_range("skill:").unwrap().len() as u64,
            stored,
            "fsync {k} failed"
        );
    }
    assert!(
        applied > 0,
        "no failed commit reached the file: the test proves nothing"
    );
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

#[test]
fn a_crowded_band_is_read_from_its_newest_sections_also_after_reopening() {
    let tmp = tempfile::tempdir().unwrap();
    let base = "the release notes describe how the storage engine writes its pages, keeps \
                checksums, replays the change log after a crash and rebuilds the lexical \
                index from the store when it is missing or behind";
    let learn = |kb: &Kb, i: usize| {
        kb.learn(LearnRequest::text(format!("{base} entry{i}")))
            .unwrap()
    };
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let first: Vec<String> = (0..40).map(|i| learn(&kb, i).kbid).collect();
    // 40 near copies crowd their bands past the 32 entries read: the oldest 8 are left out.
    let oldest = &first[..8];
    let r = learn(&kb, 40);
    assert_eq!(r.near_duplicates.len(), near_dup_max(), "{r:?}");
    assert!(
        r.near_duplicates.iter().all(|d| !oldest.contains(&d.kbid)),
        "{:?}",
        r.near_duplicates
    );
    drop(kb);
    // Loaded again from the store: in the order the sections were stored, not by kbid.
    let kb = Kb::open(tmp.path()).unwrap();
    let r = learn(&kb, 41);
    assert_eq!(r.near_duplicates.len(), near_dup_max());
    assert!(
        r.near_duplicates.iter().all(|d| !oldest.contains(&d.kbid)),
        "{:?}",
        r.near_duplicates
    );
}

#[test]
fn near_duplicates_tied_on_their_bands_are_the_most_recent() {
    let tmp = tempfile::tempdir().unwrap();
    let base = "every copy has these very words and only these words so that all of them \
                share each band of the signature";
    // The same words, other bytes: every copy shares all 16 bands with every other.
    let text = |i: usize| format!("{base}{}", ".".repeat(i + 1));
    let learn = |kb: &Kb, i: usize| kb.learn(LearnRequest::text(text(i))).unwrap();
    let reported = |r: &LearnResult| {
        let mut k: Vec<String> = r.near_duplicates.iter().map(|d| d.kbid.clone()).collect();
        k.sort();
        k
    };
    let newest = |kbids: &[String]| {
        let mut k = kbids[kbids.len() - near_dup_max()..].to_vec();
        k.sort();
        k
    };
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let mut kbids: Vec<String> = (0..40).map(|i| learn(&kb, i).kbid).collect();
    let r = learn(&kb, 40);
    assert_eq!(reported(&r), newest(&kbids), "the 16 learned last");
    kbids.push(r.kbid);
    drop(kb);
    let kb = Kb::open(tmp.path()).unwrap();
    let r = learn(&kb, 41);
    assert_eq!(
        reported(&r),
        newest(&kbids),
        "also after loading the index again"
    );
    // Within one transaction, those added earlier in it are the newest of all.
    let out = kb
        .learn_many((42..45).map(|i| LearnRequest::text(text(i))).collect())
        .unwrap();
    let last = out[2].as_ref().unwrap();
    for earlier in &out[..2] {
        let kbid = &earlier.as_ref().unwrap().kbid;
        assert!(
            last.near_duplicates.iter().any(|d| &d.kbid == kbid),
            "{kbid} not in {:?}",
            last.near_duplicates
        );
    }
}

fn near_dup_max() -> usize {
    index::near_dup::MAX_CANDIDATES
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
        txn.open_multimap_table(SOURCE_KEYS)
            .unwrap()
            .insert("#Deploy", first.as_str())
            .unwrap();
        set_schema_version(&txn, 10);
        txn.commit().unwrap();
    }
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.status().unwrap().schema_version,
        store::migrate::current_version()
    );
    assert!(
        kb.db()
            .unwrap()
            .begin_read()
            .unwrap()
            .open_multimap_table(SOURCE_KEYS)
            .is_err(),
        "the table is gone"
    );
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
fn a_group_sees_its_own_source_keys_and_the_index_follows_its_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
    let fact = |content: &str, replace: bool| LearnRequest {
        content: content.into(),
        title: Some("Deploy".into()),
        replace,
        ..Default::default()
    };
    let out: Vec<LearnResult> = kb
        .learn_many(vec![
            fact("deploy with make all", false),
            fact("deploy with just all", false),
            fact("deploy with cargo xtask", true),
        ])
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(out[0].warnings.is_empty(), "{:?}", out[0].warnings);
    assert_eq!(out[1].warnings, ["source_key_exists"]);
    assert!(!out[2].superseded.is_empty());
    assert_eq!(
        rows(&kb)[1],
        1,
        "only the replacing section is left under the key"
    );
    // Unlearned and learned again within one group: the key is free in between.
    let last = out[2].kbid.clone();
    let results = kb
        .write_group(vec![
            WriteOp::Unlearn { kbid: last.clone() },
            WriteOp::Learn(fact("deploy by hand", false)),
        ])
        .unwrap();
    let Ok(WriteOutcome::Learned(by_hand)) = &results[1] else {
        panic!("{results:?}")
    };
    assert!(by_hand.warnings.is_empty(), "{:?}", by_hand.warnings);
    assert_eq!(rows(&kb)[1], 1);
    assert!(kb.check().unwrap().ok);
}

#[test]
fn a_write_that_did_not_load_the_indexes_cannot_look_up_source_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
    let txn = kb.begin_write().unwrap();
    let t = WriteTables::open(&txn, now()).unwrap();
    for e in [
        t.source_key_taken("#T", "k").unwrap_err(),
        t.kbids_with_source_key("#T").unwrap_err(),
    ] {
        assert!(
            e.to_string().contains("did not load the in-memory indexes"),
            "{e}"
        );
    }
    drop(t);
    txn.abort().unwrap();
    // A loaded turn answers.
    let turn = kb.loaded_index_turn().unwrap();
    let txn = kb.begin_write().unwrap();
    let mut t = WriteTables::open(&txn, now()).unwrap();
    t.indexes = turn.get();
    assert!(!t.source_key_taken("#T", "k").unwrap());
}

#[test]
fn unlearn_removes_every_row_that_points_at_the_section() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, created) = Kb::open_or_create(tmp.path().join("kb")).unwrap();
    assert!(created);
    let r = kb
        .learn(LearnRequest {
            content: "a fact with several words in it".into(),
            title: Some("T".into()),
            docid: Some("d".into()),
            tags: vec!["x".into(), "y".into()],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rows(&kb), [2, 1, 1, 1, 1, 1]);
    let seq = kb.status().unwrap().last_change_seq;
    assert!(kb.unlearn(&r.kbid).unwrap().removed);
    assert_eq!(rows(&kb), [0, 0, 0, 0, 0, 0]);
    assert!(
        kb.status().unwrap().last_change_seq > seq,
        "the change log records the removal"
    );
    let txn = kb.db().unwrap().begin_read().unwrap();
    let tags = txn.open_multimap_table(TAGS).unwrap();
    assert!(tags.get("x").unwrap().next().is_none());
}

#[test]
fn learn_many_is_one_transaction_with_per_item_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    let out = kb
        .learn_many(vec![
            LearnRequest::text("first"),
            LearnRequest::text(""),
            LearnRequest::text("first"),
        ])
        .unwrap();
    assert!(out[0].is_ok());
    assert_eq!(out[1].as_ref().unwrap_err().field(), Some("content"));
    assert!(
        out[2].as_ref().unwrap().skipped,
        "dedup sees earlier items of the same batch"
    );
    assert_eq!(kb.status().unwrap().sections, 1);
}

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

#[test]
fn near_duplicates_are_found_within_one_batch_and_across_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    let base = "the quick brown fox jumps over the lazy dog near the river bank today";
    let r = kb
        .learn_many(vec![
            LearnRequest::text(base),
            LearnRequest::text(format!("{base}!")),
        ])
        .unwrap();
    let first = r[0].as_ref().unwrap().kbid.clone();
    let second = r[1].as_ref().unwrap();
    assert_eq!(second.near_duplicates[0].kbid, first, "same batch");
    // A later batch sees both through the in-memory band index, and after a reopen.
    drop(kb);
    let kb = Kb::open(tmp.path()).unwrap();
    let r = kb.learn(LearnRequest::text(format!("{base}?"))).unwrap();
    assert_eq!(r.near_duplicates.len(), 2);
    kb.unlearn(&first).unwrap();
    let r = kb.learn(LearnRequest::text(format!("{base}."))).unwrap();
    assert!(
        r.near_duplicates.iter().all(|n| n.kbid != first),
        "an unlearned section is no longer a candidate"
    );
    // The shingle cache knows `second` by now; unlearned earlier in the same batch, it is no
    // candidate either.
    let second = second.kbid.clone();
    let out = kb
        .write_group(vec![
            WriteOp::Unlearn {
                kbid: second.clone(),
            },
            WriteOp::Learn(LearnRequest::text(format!("{base};"))),
        ])
        .unwrap();
    let Ok(WriteOutcome::Learned(r)) = &out[1] else {
        panic!("{:?}", out[1].as_ref().err())
    };
    assert!(
        !r.near_duplicates.is_empty(),
        "the `?` and `.` versions remain"
    );
    assert!(r.near_duplicates.iter().all(|n| n.kbid != second));
}

/// Commit one prepared learn by itself and return its result.
fn apply_learn(kb: &Kb, w: PreparedWrite) -> LearnResult {
    match kb.write_prepared_unindexed(vec![Ok(w)]).unwrap().remove(0) {
        Ok(WriteOutcome::Learned(r)) => r,
        other => panic!("not a learned section: {:?}", other.err()),
    }
}

/// Learning stored content again reports no near duplicates, so the scan before the
/// transaction is skipped; unlearned before it is applied, the content is learned anew and
/// the writer looks for its near duplicates itself.
#[test]
fn learning_stored_content_again_is_not_scanned_but_learned_anew_is() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    let base = "the quick brown fox jumps over the lazy dog near the river bank today";
    let near = kb
        .learn(LearnRequest::text(format!("{base}!")))
        .unwrap()
        .kbid;
    let first = kb.learn(LearnRequest::text(base)).unwrap();
    assert_eq!(first.near_duplicates.len(), 1);
    let prepare = || {
        kb.prepare_write(WriteOp::Learn(LearnRequest::text(base)))
            .unwrap()
    };
    let scanned = |w: &PreparedWrite| match &w.0 {
        writes::PreparedOp::Learn(p) => p.scanned(),
        _ => panic!("a learn"),
    };
    let again = prepare();
    assert_eq!(scanned(&again), None, "stored content is not scanned");
    let r = &apply_learn(&kb, again);
    assert_eq!(r.kbid, first.kbid);
    assert!(r.near_duplicates.is_empty());

    let again = prepare();
    kb.unlearn(&first.kbid).unwrap();
    let r = &apply_learn(&kb, again);
    let found: Vec<&str> = r.near_duplicates.iter().map(|n| n.kbid.as_str()).collect();
    assert_eq!(found, [near.as_str()], "found by the writer");
}

/// The daemon looks for near duplicates on the client's thread before the write is queued;
/// what the writer commits in between (or what this transaction unlearns) must still count.
#[test]
fn a_scan_made_before_the_transaction_is_completed_with_what_was_committed_since() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    let base = "the quick brown fox jumps over the lazy dog near the river bank today";
    let old = kb.learn(LearnRequest::text(base)).unwrap().kbid;
    let learn = |text: String| WriteOp::Learn(LearnRequest::text(text));
    let kbids = |r: &LearnResult| -> Vec<String> {
        r.near_duplicates.iter().map(|n| n.kbid.clone()).collect()
    };

    // Prepared (scanned) first; a near duplicate is committed before it is applied.
    let waiting = kb.prepare_write(learn(format!("{base}!"))).unwrap();
    let writes::PreparedOp::Learn(p) = &waiting.0 else {
        panic!("a learn")
    };
    assert_eq!(
        p.scanned(),
        Some(vec![old.clone()]),
        "scanned when prepared"
    );
    let between = kb.learn(LearnRequest::text(format!("{base}?"))).unwrap();
    assert_eq!(kbids(&between), std::slice::from_ref(&old));
    let r = &apply_learn(&kb, waiting);
    let mut found = kbids(r);
    found.sort();
    let mut want = vec![old.clone(), between.kbid.clone()];
    want.sort();
    assert_eq!(
        found, want,
        "the scan's find and the section committed since"
    );

    // Found by the scan, then unlearned (committed, or earlier in the same transaction).
    let waiting = kb.prepare_write(learn(format!("{base}."))).unwrap();
    kb.unlearn(&old).unwrap();
    let r = &apply_learn(&kb, waiting);
    assert!(!kbids(r).contains(&old), "{:?}", kbids(r));
    assert!(kbids(r).contains(&between.kbid));
    let waiting = kb.prepare_write(learn(format!("{base};"))).unwrap();
    let unlearn = kb
        .prepare_write(WriteOp::Unlearn {
            kbid: between.kbid.clone(),
        })
        .unwrap();
    let out = kb
        .write_prepared_unindexed(vec![Ok(unlearn), Ok(waiting)])
        .unwrap();
    let Ok(WriteOutcome::Learned(r)) = &out[1] else {
        panic!("{:?}", out[1].as_ref().err())
    };
    assert!(!kbids(r).contains(&between.kbid), "{:?}", kbids(r));
    assert!(!kbids(r).is_empty(), "the `!` and `.` versions remain");

    // More sections committed in between than the band index remembers (64 in unit
    // tests): the writer looks again itself and still finds the one among them.
    let waiting = kb.prepare_write(learn(format!("{base} ok"))).unwrap();
    let mut many: Vec<LearnRequest> = (0..80)
        .map(|i| LearnRequest::text(format!("unrelated note {i} on subject {}", i * 7919)))
        .collect();
    many.push(LearnRequest::text(format!("{base} fine")));
    let last = kb.learn_many(many).unwrap().pop().unwrap().unwrap().kbid;
    let r = &apply_learn(&kb, waiting);
    assert!(kbids(r).contains(&last), "{:?}", kbids(r));
}

/// Writes handed over while a group is applied join its transaction, in order, up to the
/// batch limit; failed preparations answer for themselves.
#[test]
fn writes_join_the_group_being_applied_up_to_the_batch_limit() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join(crate::config::CONFIG_FILE),
        "[limits]\nmax_batch = 4\n",
    )
    .unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    let prep = |text: &str| kb.prepare_write(WriteOp::Learn(LearnRequest::text(text)));
    let seq_before = kb.last_change_seq().unwrap();
    let mut offered = vec![
        vec![prep("second note about tea"), prep("")],
        vec![prep("third note about coffee")],
    ]
    .into_iter();
    let mut rooms = Vec::new();
    let out = kb
        .write_prepared_joining(vec![prep("first note about water")], |room| {
            rooms.push(room);
            offered.next()
        })
        .unwrap();
    // Asked after each batch, with the room left; the full group stops asking.
    assert_eq!(rooms, vec![3, 1]);
    let kinds: Vec<_> = out
        .iter()
        .map(|r| match r {
            Ok(WriteOutcome::Learned(l)) => kb.content(std::slice::from_ref(&l.kbid)).unwrap().data,
            Ok(_) => "other".to_string(),
            Err(e) => format!("error on {}", e.field().unwrap_or("?")),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "first note about water",
            "second note about tea",
            "error on content",
            "third note about coffee"
        ]
    );
    // One transaction: the three sections carry its timestamp and were logged together.
    let stamps: Vec<_> = out
        .iter()
        .flatten()
        .map(|r| match r {
            WriteOutcome::Learned(l) => l.created_at.clone(),
            _ => unreachable!("learned above"),
        })
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] == w[1]), "{stamps:?}");
    assert_eq!(kb.changes_since(seq_before).unwrap().len(), 3);

    // A group that starts with failed preparations only still takes the writes that join.
    let mut offered = Some(vec![prep("fourth note about juice")]);
    let out = kb
        .write_prepared_joining(vec![prep("")], |_| offered.take())
        .unwrap();
    assert!(out[0].is_err(), "{:?}", out[0]);
    let Ok(WriteOutcome::Learned(l)) = &out[1] else {
        panic!("{:?}", out[1].as_ref().err())
    };
    assert_eq!(out.len(), 2);
    assert!(
        kb.content(std::slice::from_ref(&l.kbid))
            .unwrap()
            .data
            .contains("juice")
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
fn the_engines_own_writes_commit_durably_instead_of_through_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _) = Kb::open_or_create(tmp.path()).unwrap();
    kb.enable_journal().unwrap();
    kb.journal.lock().unwrap().as_mut().unwrap().every = std::time::Duration::from_secs(3600);
    let journal_bytes = || kb.journal.lock().unwrap().as_ref().unwrap().journal.bytes();
    // The first write after the journal opens is durable; the next ones are journaled.
    kb.learn_document("notes/a", "# A\n\nfirst fact\n", None)
        .unwrap();
    kb.learn_document("notes/b", "# B\n\nsecond fact\n", None)
        .unwrap();
    assert!(
        journal_bytes() > 0,
        "a grouped write goes through the journal"
    );
    // Removing a document is an engine write: a durable redb commit, which empties the journal.
    assert!(kb.remove_document("notes/a").unwrap());
    assert_eq!(journal_bytes(), 0, "an engine write is committed durably");
    assert!(kb.retrieve_document("notes/a").is_err());
}

/// Rename a document in the raw tables, as a version that stored docids as typed would have
/// left it.
fn rename_raw(txn: &redb::WriteTransaction, from: &str, to: &str) {
    use redb::ReadableMultimapTable;
    let mut docs = txn.open_table(DOCUMENTS).unwrap();
    let bytes = docs.remove(from).unwrap().unwrap().value().to_vec();
    docs.insert(to, bytes.as_slice()).unwrap();
    let mut doc_sections = txn.open_multimap_table(DOC_SECTIONS).unwrap();
    let kbids: Vec<String> = doc_sections
        .get(from)
        .unwrap()
        .map(|v| v.unwrap().value().to_string())
        .collect();
    doc_sections.remove_all(from).unwrap();
    let mut section_docs = txn.open_multimap_table(SECTION_DOCS).unwrap();
    for k in &kbids {
        doc_sections.insert(to, k.as_str()).unwrap();
        section_docs.remove(k.as_str(), from).unwrap();
        section_docs.insert(k.as_str(), to).unwrap();
    }
}

#[test]
fn migration_14_stores_every_docid_in_nfc_and_keeps_both_documents_of_a_collision() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let doc = |docid: &str, text: &str| LearnRequest {
        docid: Some(docid.into()),
        ..LearnRequest::text(text)
    };
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
            v1.extend(postcard::to_stdvec(&rec).unwrap());
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
fn a_large_group_is_prepared_in_parallel_and_answers_in_the_order_of_its_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let reqs: Vec<LearnRequest> = (0..300)
        .map(|i| {
            if i == 150 {
                LearnRequest::text("   ")
            } else {
                LearnRequest::text(format!("fact number {i} of the group"))
            }
        })
        .collect();
    let out = kb.learn_many(reqs).unwrap();
    assert_eq!(out.len(), 300);
    for (i, r) in out.iter().enumerate() {
        if i == 150 {
            assert_eq!(r.as_ref().unwrap_err().field(), Some("content"));
            continue;
        }
        let kbid = &r.as_ref().unwrap().kbid;
        let got = kb.read_sections(&[kbid.as_str()]).unwrap();
        assert_eq!(got[0].content, format!("fact number {i} of the group"));
    }
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

/// A section learned into a document that already holds it is not attached twice, whichever
/// membership list is the shorter (`WriteTables::holds` reads that one).
#[test]
fn a_section_is_attached_to_a_document_once_whichever_membership_list_is_shorter() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let learn = |text: &str, docid: &str| {
        kb.learn(LearnRequest {
            docid: Some(docid.into()),
            ..LearnRequest::text(text)
        })
        .unwrap()
        .attached
    };
    // "Contents" is in four documents; "big" holds four sections. (`attached`: a section
    // already stored joined a document; a new one is stored, not attached.)
    assert!(!learn("## Contents", "a"));
    for d in ["b", "c"] {
        assert!(learn("## Contents", d));
    }
    for i in 0..3 {
        assert!(!learn(&format!("Big section {i}."), "big"));
    }
    assert!(learn("## Contents", "big"));
    // The section's list (4 documents) against the document's (1 or 4 sections).
    assert!(!learn("## Contents", "a"), "a already holds it");
    assert!(!learn("## Contents", "big"), "big already holds it");
    // A section in one document, a document of four sections: the section's list is shorter.
    assert!(!learn("Big section 0.", "big"));
    assert!(learn("Big section 0.", "d"), "a new document gets it");
    let docs = kb.list_documents().unwrap();
    let count = |d: &str| docs.iter().find(|x| x.docid == d).unwrap().sections;
    assert_eq!((count("a"), count("big"), count("d")), (1, 4, 1));
}

/// The documents listing every page of `documents_page` should give: `list_documents` sorted
/// newest first, ties by docid.
fn newest_first_oracle(kb: &Kb) -> Vec<(String, usize, String)> {
    let mut all: Vec<(String, usize, String)> = kb
        .list_documents()
        .unwrap()
        .into_iter()
        .map(|d| (d.docid, d.sections, d.updated_at))
        .collect();
    all.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    all
}

/// Every page of `documents_page` (pages of `size`), concatenated, with the totals they gave.
fn all_pages(kb: &Kb, size: usize) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    loop {
        let page = kb.documents_page(out.len(), size).unwrap();
        assert_eq!(page.total, kb.list_documents().unwrap().len());
        assert_eq!(page.offset, out.len());
        let n = page.documents.len();
        assert!(n <= size);
        out.extend(
            page.documents
                .into_iter()
                .map(|d| (d.docid, d.sections, d.updated_at)),
        );
        if n < size {
            return out;
        }
    }
}

#[test]
fn documents_page_lists_newest_first_and_follows_edits_renames_and_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    // Some documents in one transaction (same updated_at: ties by docid), some apart.
    let batch: Vec<WriteOp> = (0..7)
        .map(|i| {
            WriteOp::Learn(LearnRequest {
                docid: Some(format!("batch/{i}")),
                ..LearnRequest::text(format!("Batch fact number {i}."))
            })
        })
        .collect();
    for r in kb.write_group(batch).unwrap() {
        r.unwrap();
    }
    for i in 0..6 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        kb.learn_document(&format!("d/{i}"), &format!("# D{i}\n\nText {i}.\n"), None)
            .unwrap();
    }
    assert_eq!(kb.documents_page(0, 100).unwrap().total, 13);
    assert_eq!(all_pages(&kb, 4), newest_first_oracle(&kb));
    assert_eq!(kb.documents_page(0, 1).unwrap().documents[0].docid, "d/5");
    let batch_order: Vec<String> = all_pages(&kb, 100)
        .into_iter()
        .map(|d| d.0)
        .filter(|d| d.starts_with("batch/"))
        .collect();
    assert_eq!(
        batch_order,
        (0..7).map(|i| format!("batch/{i}")).collect::<Vec<_>>()
    );
    // An edit moves a document to the front, with its new section count.
    std::thread::sleep(std::time::Duration::from_millis(3));
    kb.learn(LearnRequest {
        docid: Some("d/1".into()),
        ..LearnRequest::text("A second section of d/1.")
    })
    .unwrap();
    let first = &kb.documents_page(0, 1).unwrap().documents[0];
    assert_eq!((first.docid.as_str(), first.sections), ("d/1", 2));
    assert_eq!(all_pages(&kb, 4), newest_first_oracle(&kb));
    // A delete takes it out of every page; a page past the end is empty.
    assert!(kb.remove_document("d/3").unwrap());
    let pages = all_pages(&kb, 4);
    assert_eq!(pages.len(), 12);
    assert!(pages.iter().all(|d| d.0 != "d/3"));
    assert_eq!(pages, newest_first_oracle(&kb));
    assert!(kb.documents_page(12, 4).unwrap().documents.is_empty());
    // A rename (the document learned under a new docid, the old one removed) and the removal of
    // a document's last section.
    std::thread::sleep(std::time::Duration::from_millis(3));
    kb.learn_document("d/renamed", "# D0\n\nText 0.\n", None)
        .unwrap();
    assert!(kb.remove_document("d/0").unwrap());
    let batch2 = kb.retrieve_document("batch/2").unwrap().kbids;
    assert_eq!(batch2.len(), 1);
    kb.unlearn(&batch2[0]).unwrap();
    let pages = all_pages(&kb, 5);
    assert_eq!(pages[0].0, "d/renamed");
    assert!(pages.iter().all(|d| d.0 != "d/0" && d.0 != "batch/2"));
    assert_eq!(pages, newest_first_oracle(&kb));
    // A second handle on the same store (another process's writes) catches up too.
    drop(kb);
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    assert_eq!(all_pages(&kb, 3), newest_first_oracle(&kb));
}

const VALIDATION_MODELS: &str = r#"
[[model]]
name = "Epic"
prefix = "epics/"

[[model.sections]]
heading = "Goal"
required = true

[model.relationships.stories]
type = "hasMany"
model = "Story"
heading = "Stories"

[[model]]
name = "Story"
prefix = "stories/"
"#;

#[test]
fn validation_report_follows_the_writes_that_fix_or_break_a_document() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    kb.models_load(VALIDATION_MODELS).unwrap();
    let epic = |goal: bool| {
        format!(
            "# Epic\n\n{}## Stories\n\n- [One](stories/one)\n",
            if goal { "## Goal\n\nShip it.\n\n" } else { "" }
        )
    };
    kb.learn_document("epics/e", &epic(true), None).unwrap();
    for i in 0..5 {
        kb.learn_document(
            &format!("notes/{i}"),
            &format!("# Note {i}\n\nx{i}\n"),
            None,
        )
        .unwrap();
    }
    let problems = |r: &crate::collections::validations::ValidationReport| -> Vec<String> {
        r.problems
            .iter()
            .flat_map(|v| {
                v.errors
                    .iter()
                    .map(move |e| format!("{} {}", v.docid, e.message))
            })
            .collect()
    };
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid, r.revalidated), (6, 1, 6));
    assert_eq!(problems(&r), ["epics/e item stories/one does not exist"]);
    // Nothing changed: nothing validated again.
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid, r.revalidated), (6, 1, 0));
    // The missing story is created: the epic that names it is validated again and is valid.
    kb.learn_document("stories/one", "# One\n\nA story.\n", None)
        .unwrap();
    let r = kb.validation_report(100).unwrap();
    assert_eq!(
        (r.checked, r.invalid, r.revalidated),
        (7, 0, 2),
        "{:?}",
        problems(&r)
    );
    // An edit that breaks the epic shows at once; one that fixes it too.
    kb.learn_document("epics/e", &epic(false), None).unwrap();
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.invalid, r.revalidated), (1, 1));
    assert_eq!(problems(&r), ["epics/e required section missing"]);
    kb.learn_document("epics/e", &epic(true), None).unwrap();
    assert_eq!(kb.validation_report(100).unwrap().invalid, 0);
    // The story removed: the epic is invalid again; the story is no longer checked.
    assert!(kb.remove_document("stories/one").unwrap());
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid), (6, 1));
    assert_eq!(problems(&r), ["epics/e item stories/one does not exist"]);
    // The limit bounds the list, not the counts.
    kb.learn_document("epics/f", "# F\n\nNo goal.\n", None)
        .unwrap();
    let r = kb.validation_report(1).unwrap();
    assert_eq!((r.invalid, r.with_problems, r.problems.len()), (2, 2, 1));
    // New models validate everything again.
    kb.models_load("[[model]]\nname = \"Story\"\nprefix = \"stories/\"\n")
        .unwrap();
    let r = kb.validation_report(100).unwrap();
    assert_eq!((r.checked, r.invalid, r.revalidated), (7, 0, 7));
}
