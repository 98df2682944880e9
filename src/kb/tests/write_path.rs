//! The write path: grouped writes, near duplicates and source keys within and across
//! groups, the scan made before a transaction, removals, document membership.

use super::*;

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
    assert_eq!(rows(&kb), [2, 1, 1, 1, 1]);
    let seq = kb.status().unwrap().last_change_seq;
    assert!(kb.unlearn(&r.kbid).unwrap().removed);
    assert_eq!(rows(&kb), [0, 0, 0, 0, 0]);
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
    let tmp = folder_with_config("[limits]\nmax_batch = 4\n");
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

/// A section learned into a document that already holds it is not attached twice, whether
/// `WriteTables::holds` reads the section's documents (a few) or the document's manifest (a
/// section in many documents), the manifest committed or changed earlier in the same batch.
#[test]
fn a_section_is_attached_to_a_document_once_however_many_documents_hold_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let learn = |text: &str, docid: &str| kb.learn(in_document(text, docid)).unwrap().attached;
    // (`attached`: a section already stored joined a document; a new one is stored, not
    // attached.)
    let contents = kb.learn(in_document("## Contents", "d0")).unwrap();
    assert!(!contents.attached);
    assert!(learn("## Contents", "d1"));
    assert!(
        !learn("## Contents", "d1"),
        "d1 already holds it (a few documents)"
    );
    let many = crate::store::txn::HOLDS_SCAN_DOCS as usize + 6;
    let batch = (2..many)
        .map(|i| in_document("## Contents", &format!("d{i}")))
        .collect();
    assert!(
        kb.learn_many(batch)
            .unwrap()
            .iter()
            .all(|r| r.as_ref().unwrap().attached)
    );
    for i in 0..3 {
        assert!(!learn(&format!("Big section {i}."), "big"));
    }
    // Held by `many` documents: the manifests are read, committed ones here.
    assert!(!learn("## Contents", "d0"), "d0 already holds it");
    assert!(!learn("## Contents", "d40"), "d40 already holds it");
    assert!(learn("## Contents", "big"), "big did not hold it");
    assert!(!learn("## Contents", "big"), "big holds it now");
    // A committed manifest asked about twice in a batch (read once), then changed by it.
    let out = kb
        .learn_many(vec![
            in_document("## Contents", "d0"),
            in_document("## Contents", "d0"),
            in_document("New in d0.", "d0"),
            in_document("## Contents", "d0"),
            in_document("## Contents", "d1"),
        ])
        .unwrap();
    let attached: Vec<bool> = out.iter().map(|r| r.as_ref().unwrap().attached).collect();
    assert_eq!(attached, [false; 5]);
    // A manifest changed earlier in the same batch.
    let out = kb
        .learn_many(vec![
            in_document("## Contents", "fresh"),
            in_document("Fresh words.", "fresh"),
            in_document("## Contents", "fresh"),
        ])
        .unwrap();
    let attached: Vec<bool> = out.iter().map(|r| r.as_ref().unwrap().attached).collect();
    assert_eq!(attached, [true, false, false]);
    // A section in one document, a document of four sections.
    assert!(!learn("Big section 0.", "big"));
    assert!(learn("Big section 0.", "d"), "a new document gets it");
    let docs = kb.list_documents().unwrap();
    let count = |d: &str| docs.iter().find(|x| x.docid == d).unwrap().sections;
    assert_eq!(
        (
            count("d0"),
            count("d40"),
            count("big"),
            count("fresh"),
            count("d")
        ),
        (2, 1, 4, 2, 1)
    );
    let req = RecallRequest::new(Some(contents.kbid), None, None, None).unwrap();
    let Recalled::One(item) = kb.recall(&req).unwrap() else {
        panic!("one section asked for")
    };
    assert_eq!(
        item.docids.len(),
        many + 2,
        "d0 to d{}, big and fresh",
        many - 1
    );
    assert!(kb.check().unwrap().ok);
}

#[test]
fn a_batch_logs_one_change_per_section_and_document_it_touches() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let before = kb.changes_since(0).unwrap().len() as u64;
    let in_doc = |text: &str| LearnRequest {
        docid: Some("guide".into()),
        ..LearnRequest::text(text)
    };
    let out = kb
        .learn_many(vec![
            in_doc("first part about pages"),
            in_doc("second part about checksums"),
            in_doc("third part about the journal"),
        ])
        .unwrap();
    assert!(out.iter().all(|r| r.is_ok()), "{out:?}");
    let kinds_since = |seq: u64| -> Vec<String> {
        kb.changes_since(seq)
            .unwrap()
            .into_iter()
            .map(|c| c.kind)
            .collect()
    };
    let kinds = kinds_since(before);
    // Added and then attached: one entry per section; appended three times: one for the
    // document.
    assert_eq!(
        kinds,
        [
            "section_added",
            "document_changed",
            "section_added",
            "section_added"
        ],
        "{kinds:?}"
    );
    // A later transaction that changes the document again logs it again, and a removal is
    // always logged.
    let seq = kb.changes_since(0).unwrap().last().unwrap().seq;
    kb.learn(in_doc("fourth part about recovery")).unwrap();
    let kbid = out[0].as_ref().unwrap().kbid.clone();
    kb.unlearn(&kbid).unwrap();
    let kinds = kinds_since(seq);
    assert!(kinds.contains(&"document_changed".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"section_removed".to_string()), "{kinds:?}");
}

#[test]
fn a_stream_of_batches_learns_like_learn_many_and_is_searchable_when_it_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let batch = |b: usize| -> Vec<LearnRequest> {
        (0..100)
            .map(|i| {
                LearnRequest::text(format!(
                    "stream batch{b} entry{i} about the pipelined writer zq{b}x{i}"
                ))
            })
            .chain([LearnRequest::text("")]) // invalid: fails alone
            .collect()
    };
    let mut results = Vec::new();
    kb.learn_stream((0..5).map(batch), |r| results.push(r.unwrap()));
    assert_eq!(results.len(), 5, "one result list per batch, in order");
    for r in &results {
        assert_eq!(r.len(), 101);
        assert!(r[..100].iter().all(|x| x.is_ok()), "{r:?}");
        assert!(r[100].is_err());
    }
    assert_eq!(kb.status().unwrap().sections, 500);
    // The index caught up before learn_stream returned.
    assert_eq!(kb.search(&SearchRequest::new("zq3x42")).unwrap().total, 1);
    // A batch over the limit fails as a whole, the batches around it are learned; a near copy
    // of a section of an earlier batch is found although its batch was prepared before that
    // one was written (the writer scans).
    let near = |b: usize| -> Vec<LearnRequest> {
        vec![LearnRequest::text(format!(
            "stream batch{b} entry7 about the pipelined writer zq{b}x7 again"
        ))]
    };
    let too_many = vec![LearnRequest::text("x"); kb.config.limits.max_batch + 1];
    let mut more = Vec::new();
    kb.learn_stream([near(0), too_many, near(1)].into_iter(), |r| more.push(r));
    assert_eq!(more.len(), 3);
    assert!(
        matches!(&more[1], Err(e) if e.field() == Some("batch")),
        "{:?}",
        more[1].as_ref().err()
    );
    for r in [&more[0], &more[2]] {
        let l = r.as_ref().unwrap()[0].as_ref().unwrap();
        assert!(!l.near_duplicates.is_empty(), "{l:?}");
    }
    assert_eq!(kb.status().unwrap().sections, 502);
}

#[test]
fn a_stream_awaited_line_by_line_between_bulk_batches_reports_in_order() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    // One-line batches drawn only once every batch before them is reported (a writer that
    // awaits each result: written where drawn), between 150-line batches drawn at once
    // (pipelined). The one-line batch after a bulk one is a near copy of its first line.
    let plan = [1, 1, 150, 150, 1, 150, 1, 1];
    let text = |b: usize, i: usize| {
        format!("awaited stream batch{b} line{i} about the writer that draws its lines zw{b}y{i}")
    };
    let near_copy_of = |b: usize| plan[b] == 1 && b > 0 && plan[b - 1] > 1;
    let reported = AtomicUsize::new(0);
    let batches = plan.iter().enumerate().map(|(b, &n)| {
        if n == 1 {
            while reported.load(SeqCst) < b {
                std::thread::yield_now();
            }
        }
        (0..n)
            .map(|i| match near_copy_of(b) {
                true => LearnRequest::text(format!("{} again", text(b - 1, 0))),
                false => LearnRequest::text(text(b, i)),
            })
            .collect::<Vec<_>>()
    });
    let mut results = Vec::new();
    kb.learn_stream(batches, |r| {
        results.push(r.unwrap());
        reported.fetch_add(1, SeqCst);
    });
    assert_eq!(results.len(), plan.len(), "one result list per batch");
    for (b, r) in results.iter().enumerate() {
        assert_eq!(r.len(), plan[b], "batch {b}");
        for (i, l) in r.iter().enumerate() {
            let l = l.as_ref().unwrap();
            let stored = kb
                .read_sections(&[l.kbid.as_str()])
                .unwrap()
                .remove(0)
                .content;
            if near_copy_of(b) {
                assert!(stored.ends_with(" again"), "batch {b}: {stored}");
                assert!(!l.near_duplicates.is_empty(), "batch {b}: {l:?}");
            } else {
                assert_eq!(
                    stored,
                    text(b, i),
                    "batch {b} line {i}: results in input order"
                );
            }
        }
    }
    assert_eq!(kb.status().unwrap().sections, 455);
    assert_eq!(kb.search(&SearchRequest::new("zw7y0")).unwrap().total, 1);
    assert_eq!(kb.search(&SearchRequest::new("zw5y149")).unwrap().total, 1);
}

#[test]
fn threads_writing_at_once_share_commits_and_each_gets_its_own_results() {
    use store::faults::{FaultPlan, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.learn(LearnRequest::text("the first write starts the journal"))
        .unwrap();
    let syncs = || plan.count(Target::Store, Op::Sync) + plan.count(Target::Journal, Op::Sync);
    let content = |kbid: &str| match kb.retrieve(Some(kbid), None).unwrap() {
        Retrieved::Sections(mut s) => s.remove(0).content,
        other => panic!("{other:?}"),
    };
    let before = syncs();
    let (threads, each) = (8, 40);
    let start = std::sync::Barrier::new(threads);
    let results: Vec<Vec<(String, String)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (kb, start, content) = (&kb, &start, &content);
                s.spawn(move || {
                    start.wait();
                    (0..each)
                        .map(|i| {
                            // Two sections a write now and then: a batch joins whole.
                            let text = format!("writer {t} wrote note {i} about topic{t}x{i}");
                            let r = if i % 5 == 0 {
                                let more = format!("writer {t} added a second note {i}");
                                let mut out = kb
                                    .learn_many(vec![
                                        LearnRequest::text(&text),
                                        LearnRequest::text(&more),
                                    ])
                                    .unwrap();
                                assert_eq!(out.len(), 2);
                                let second = out.pop().unwrap().unwrap();
                                assert_eq!(content(&second.kbid), more);
                                out.pop().unwrap().unwrap()
                            } else {
                                kb.learn(LearnRequest::text(&text)).unwrap()
                            };
                            (r.kbid, text)
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every write's result names its own section.
    for (kbid, text) in results.iter().flatten() {
        assert_eq!(&content(kbid), text);
    }
    assert_eq!(
        kb.status().unwrap().sections as usize,
        1 + threads * each + threads * each / 5
    );
    // Writes made while another thread committed joined its group: fewer fsyncs than writes.
    let fsyncs = syncs() - before;
    assert!(
        fsyncs < (threads * each) as u64,
        "{fsyncs} fsyncs for {} writes",
        threads * each
    );
    assert!(kb.check().unwrap().ok);
}

#[test]
fn the_index_thread_catches_up_after_a_write_and_a_close_waits_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    for i in 0..20 {
        kb.learn(LearnRequest::text(format!(
            "a note about kestrels number {i}"
        )))
        .unwrap();
    }
    // Without a search: the Kb's index thread takes the changes.
    let last = kb.last_change_seq().unwrap();
    wait_until("the index stayed behind the store", || {
        kb.lexical().unwrap().applied_seq() >= last
    });
    // A write just before the close is in the index the close commits.
    kb.learn(LearnRequest::text("the last note before closing"))
        .unwrap();
    let last = kb.last_change_seq().unwrap();
    kb.close().unwrap();
    assert_eq!(kb.lexical().unwrap().applied_seq(), last);
    drop(kb);
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(
        kb.search(&SearchRequest::new("kestrels")).unwrap().total,
        20
    );
}

/// Wait (30 s at most) until `done`.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Run `first` and `second` on two threads so that `second`'s writes are taken into the group
/// that `first`'s thread commits: the writers' turn is held until `first`'s thread commits (and
/// waits inside its group) and `second`'s batch is queued. `first`'s outcome comes as its
/// thread's join (it may panic).
fn in_one_group<A: Send, B: Send>(
    kb: &Kb,
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B + Send,
) -> (std::thread::Result<A>, B) {
    let turn = kb.loaded_index_turn().unwrap();
    std::thread::scope(|s| {
        let first = s.spawn(first);
        wait_until("the first thread commits", || kb.commit_queue.committing());
        let second = s.spawn(second);
        wait_until("the second thread's batch is queued", || {
            kb.commit_queue.waiting() > 0
        });
        drop(turn);
        (first.join(), second.join().unwrap())
    })
}

#[test]
fn a_write_that_joined_a_group_that_fails_fails_with_it_and_changes_nothing() {
    use store::faults::{Errno, FaultPlan, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.learn(LearnRequest::text("the first write starts the journal"))
        .unwrap();
    let next_sync = plan.count(Target::Journal, Op::Sync) + 1;
    plan.fail_nth(Target::Journal, Op::Sync, next_sync, Errno::Eio);
    let (first, second) = in_one_group(
        &kb,
        || kb.learn(LearnRequest::text("the committing thread's write")),
        || {
            kb.learn_many(vec![
                LearnRequest::text("a queued write"),
                LearnRequest::text("and its second section"),
            ])
        },
    );
    let first = first.unwrap();
    // The group's journal fsync failed: both threads' writes fail, and none of them is there.
    let first = first.unwrap_err().to_string();
    let second = second.unwrap_err().to_string();
    assert!(first.contains("kbdb.journal"), "{first}");
    assert!(second.contains("kbdb.journal"), "{second}");
    assert_eq!(
        plan.count(Target::Journal, Op::Sync),
        next_sync + 1,
        "one group, one fsync (and the take-back of its record)"
    );
    assert_eq!(kb.status().unwrap().sections, 1);
    for text in ["committing", "queued"] {
        assert_eq!(
            kb.search(&SearchRequest::new(text)).unwrap().total,
            0,
            "{text}"
        );
    }
    // The next writes go on.
    kb.learn(LearnRequest::text("after the failed group"))
        .unwrap();
    assert_eq!(kb.status().unwrap().sections, 2);
}

/// A panic inside a group that another thread's batch joined (here in the journal's fsync, once
/// the group's record is written: a kill then leaves the record for a replay): the joined thread gets
/// an error instead of waiting for ever, the panic reaches the thread that was committing, the
/// `Kb` recovers (its store reopened, the next group durable and claiming the record's number),
/// and every write acknowledged after it survives a kill, the panicked group's record not
/// replayed in its place.
#[test]
fn a_group_that_panics_fails_the_batch_joined_to_it_and_the_kb_writes_on() {
    use store::faults::{FaultPlan, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.learn(LearnRequest::text("the first write starts the journal"))
        .unwrap();
    kb.learn(LearnRequest::text("an echidna acknowledged before"))
        .unwrap();
    // The first thread's group, into which the second thread's batch is taken, panics in the
    // journal's fsync.
    let journal_syncs = plan.count(Target::Journal, Op::Sync);
    plan.panic_nth(Target::Journal, Op::Sync, journal_syncs + 1);
    let (first, second) = in_one_group(
        &kb,
        || kb.learn(LearnRequest::text("the quokka of the group that panics")),
        || {
            kb.learn_many(vec![
                LearnRequest::text("a wombat queued by another thread"),
                LearnRequest::text("and its second wombat"),
            ])
        },
    );
    assert!(
        first.is_err(),
        "the committing thread's panic reaches it: {first:?}"
    );
    let second = second.unwrap_err().to_string();
    assert!(second.contains("failed (internal error)"), "{second}");
    assert!(!kb.commit_queue.committing());
    assert_eq!(
        plan.count(Target::Journal, Op::Sync),
        journal_syncs + 2,
        "the group's record was written to the journal before the panic, then taken back"
    );
    // The `Kb` writes on, and what it acknowledges from now on survives a kill.
    for i in 0..3 {
        kb.learn(LearnRequest::text(format!(
            "a numbat written after it, {i}"
        )))
        .unwrap();
    }
    let (_copy, killed) = opened_as_if_killed(tmp.path());
    for kb in [&kb, &killed] {
        let found = |text: &str| kb.search(&SearchRequest::new(text)).unwrap().total;
        assert_eq!(found("numbat"), 3);
        assert_eq!(found("echidna"), 1);
        assert_eq!(
            found("quokka"),
            0,
            "the group that panicked was not written"
        );
        assert_eq!(found("wombat"), 0, "nor the batch joined to it");
        assert_eq!(kb.status().unwrap().sections, 5);
    }
}

/// A new section's first document is kept in its record, its other documents in
/// `section_docs` (schema 22): every way of reading and changing memberships sees both, and a
/// section whose documents all let go of it is collected.
#[test]
fn a_sections_first_document_lives_in_its_record_and_the_others_in_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let kbid = kb
        .learn(in_document("a shared paragraph", "b/first"))
        .unwrap()
        .kbid;
    let stored = || -> (Option<String>, Vec<String>) {
        let txn = kb.db().unwrap().begin_read().unwrap();
        let t = ReadTables::open(&txn).unwrap();
        let rec = t.section(&kbid).unwrap().unwrap();
        let rows = store::txn::multimap_values(&t.section_docs, &kbid).unwrap();
        (rec.doc, rows)
    };
    assert_eq!(stored(), (Some("b/first".into()), vec![]));
    // Learned again into the same document: held already, nothing added.
    assert!(
        kb.learn(in_document("a shared paragraph", "b/first"))
            .unwrap()
            .skipped
    );
    // Into two more documents: rows, and every reader lists the three in order.
    kb.learn(in_document("a shared paragraph", "c/third"))
        .unwrap();
    kb.learn(in_document("a shared paragraph", "a/second"))
        .unwrap();
    assert_eq!(
        stored(),
        (
            Some("b/first".into()),
            vec!["a/second".into(), "c/third".into()]
        )
    );
    let docids = |kb: &Kb| match kb
        .recall(&crate::RecallRequest::new(Some(kbid.clone()), None, Some(0), None).unwrap())
        .unwrap()
    {
        crate::Recalled::One(item) => item.docids,
        other => panic!("{other:?}"),
    };
    assert_eq!(docids(&kb), ["a/second", "b/first", "c/third"]);
    assert!(kb.check().unwrap().ok);
    // The first document lets go of it: the record forgets it, the rows stay.
    assert!(kb.remove_document("b/first").unwrap());
    assert_eq!(stored(), (None, vec!["a/second".into(), "c/third".into()]));
    assert!(kb.check().unwrap().ok);
    // The others too: no document holds it any more, so it is collected.
    assert!(kb.remove_document("a/second").unwrap());
    assert!(kb.remove_document("c/third").unwrap());
    assert!(
        kb.retrieve(Some(&kbid), None).is_err(),
        "collected with its last document"
    );
    assert!(kb.check().unwrap().ok);
}
