//! How writes become durable: the journal, its replay after a crash, I/O faults, the
//! engine's own durable commits, and readers that do not wait for a write in progress.

use super::*;

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
    assert_eq!(records().len(), 1, "the failed record is taken back");
    assert_eq!(kb.status().unwrap().sections, 2);
    // The next write commits durably and claims the failed record's number; the one after
    // goes through the journal again, written over the older records from the start of the
    // file (numbers: the second 1, the failed third 2, the fifth 3).
    learn("fourth: durable in redb").unwrap();
    learn("fifth: through the journal again").unwrap();
    assert_eq!(records()[0].0, 3);
    let (_copy, kb2) = opened_as_if_killed(tmp.path());
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
    // written, the reopened file holds the commit anyway. (Durable commits in redb: a
    // journaled group that fails has its record taken back, so the reopen never holds it.)
    let mut applied = 0;
    for k in 1.. {
        let tmp = folder_with_config("[daemon]\njournal = false\n");
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

#[test]
fn a_process_of_its_own_journals_its_writes_after_the_first_and_a_lone_write_costs_no_checkpoint() {
    use store::faults::{FaultPlan, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let syncs = |plan: &FaultPlan| {
        (
            plan.count(Target::Store, Op::Sync),
            plan.count(Target::Journal, Op::Sync),
        )
    };
    // One write, then close: one durable redb commit, and no checkpoint commit after it.
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    let opened = syncs(&plan);
    kb.learn(LearnRequest::text("the only write of this process"))
        .unwrap();
    let written = syncs(&plan);
    assert!(written.0 > opened.0, "{opened:?} {written:?}");
    assert_eq!(written.1, 0, "the first write is durable in redb");
    // What a close checkpoints (the store's own shutdown writes follow it).
    kb.checkpoint_journal().unwrap();
    assert_eq!(syncs(&plan), written, "nothing left to checkpoint at close");
    drop(kb);

    // Writes that follow go through the journal: one fsync of it each, none of the store
    // (no checkpoint falls due during the test).
    let config = tmp.path().join(crate::config::CONFIG_FILE);
    std::fs::write(config, "[daemon]\njournal_checkpoint_ms = 3600000\n").unwrap();
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.learn(LearnRequest::text(
        "durable in redb: the first write of this run",
    ))
    .unwrap();
    let before = syncs(&plan);
    for i in 0..3 {
        kb.learn(LearnRequest::text(format!("journaled write number {i}")))
            .unwrap();
    }
    let after = syncs(&plan);
    assert_eq!(after.0, before.0, "no redb fsync for a journaled write");
    assert_eq!(after.1, before.1 + 3);
    // Killed now (the files copied as they are): the next open replays the three.
    let (_copy, kb2) = opened_as_if_killed(tmp.path());
    assert_eq!(kb2.status().unwrap().sections, 5);
    assert_eq!(
        kb2.search(&SearchRequest::new("journaled")).unwrap().total,
        3
    );
    assert!(kb2.check().unwrap().ok);
    drop(kb2);
    // A clean close makes them durable in redb and leaves an empty journal.
    drop(kb);
    let journal = tmp.path().join(store::journal::JOURNAL_FILE);
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), 0);
    assert_eq!(Kb::open(tmp.path()).unwrap().status().unwrap().sections, 5);
}

#[test]
fn with_the_journal_off_in_the_config_every_write_commits_durably_in_redb() {
    use store::faults::{FaultPlan, Op, Target};
    let tmp = folder_with_config("[daemon]\njournal = false\n");
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    for i in 0..3 {
        let before = plan.count(Target::Store, Op::Sync);
        kb.learn(LearnRequest::text(format!("durable write {i}")))
            .unwrap();
        assert!(plan.count(Target::Store, Op::Sync) > before);
    }
    assert_eq!(plan.count(Target::Journal, Op::Sync), 0);
    assert!(!tmp.path().join(store::journal::JOURNAL_FILE).exists());
}

/// The checkpoint at the end of a stream of writes fails (the store's fsync): every write of
/// the stream was acknowledged from the journal and stays there, so a kill then loses none of
/// them, and the `Kb` writes on and checkpoints at its close.
#[test]
fn a_checkpoint_that_fails_after_a_stream_keeps_its_writes_in_the_journal() {
    use store::faults::{Errno, FaultPlan, Op, Target};
    let tmp = folder_with_config("[daemon]\njournal_checkpoint_ms = 3600000\n");
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(tmp.path(), plan.clone()).unwrap();
    kb.learn(LearnRequest::text("durable in redb: the first write"))
        .unwrap();
    let batch = |b: usize| {
        (0..2)
            .map(|i| LearnRequest::text(format!("streamed platypus {b} {i}")))
            .collect::<Vec<_>>()
    };
    let mut acknowledged = 0;
    kb.learn_stream((0..3).map(batch), |r| {
        acknowledged += r.unwrap().into_iter().filter(|r| r.is_ok()).count();
        if acknowledged == 6 {
            // The stream's last batch is durable (in the journal): the store's next fsync is
            // the checkpoint's (redb also fsyncs when it grows its file, at any write).
            plan.fail_nth(
                Target::Store,
                Op::Sync,
                plan.count(Target::Store, Op::Sync) + 1,
                Errno::Eio,
            );
        }
    });
    assert_eq!(acknowledged, 6);
    let fired = plan.fired();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!((fired[0].target, fired[0].op), (Target::Store, Op::Sync));
    let journal = tmp.path().join(store::journal::JOURNAL_FILE);
    assert!(std::fs::metadata(&journal).unwrap().len() > 0);
    // Killed now: the next open replays the stream from the journal.
    {
        let (_copy, killed) = opened_as_if_killed(tmp.path());
        assert_eq!(
            killed
                .search(&SearchRequest::new("platypus"))
                .unwrap()
                .total,
            6
        );
        assert_eq!(killed.status().unwrap().sections, 7);
        assert!(killed.check().unwrap().ok);
    }
    // Not killed: it writes on, and its close makes everything durable in redb.
    kb.learn(LearnRequest::text("after the failed checkpoint"))
        .unwrap();
    drop(kb);
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), 0);
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(kb.status().unwrap().sections, 8);
    assert_eq!(kb.search(&SearchRequest::new("platypus")).unwrap().total, 6);
}

/// A new database with one durable write, whose next group's redb commit fails (it grows the
/// file, and that fsync fails) once its record is in the journal.
fn kb_whose_next_commit_fails(dir: &std::path::Path) -> (Kb, store::faults::FaultPlan) {
    use store::faults::{Errno, FaultPlan, Op, Target};
    let plan = FaultPlan::new();
    let (kb, _) = Kb::open_with_io(dir, plan.clone()).unwrap();
    kb.learn(LearnRequest::text("durable in redb: the first write"))
        .unwrap();
    plan.fail_nth(
        Target::Store,
        Op::Sync,
        plan.count(Target::Store, Op::Sync) + 1,
        Errno::Eio,
    );
    (kb, plan)
}

/// `kb_whose_next_commit_fails`, with the failed group's record still in the journal: the disk
/// also refused the zeros that would have taken it back.
fn kb_with_a_refused_record(dir: &std::path::Path) -> (Kb, store::faults::FaultPlan) {
    use store::faults::{Errno, Op, Target};
    let (kb, plan) = kb_whose_next_commit_fails(dir);
    // The journal's first append grows the file (one write) and writes the record (a second);
    // the take-back's zeros would be the third, which fails.
    let take_back = plan.count(Target::Journal, Op::Write) + 3;
    plan.fail_nth(Target::Journal, Op::Write, take_back, Errno::Eio);
    let failed = kb.learn(LearnRequest::text("a kiwi whose commit fails"));
    assert!(failed.is_err(), "{failed:?}");
    assert!(
        plan.fired()
            .iter()
            .any(|f| f.target == Target::Journal && f.n == take_back),
        "the take-back was not refused: {:?}",
        plan.fired()
    );
    (kb, plan)
}

fn found(kb: &Kb, text: &str) -> u64 {
    kb.search(&SearchRequest::new(text)).unwrap().total
}

/// After the failed group of `kb_with_a_refused_record`, a write that succeeds: the failed one
/// is in neither `kb` nor a copy of its files opened as after a kill.
fn only_the_write_after_it_is_there(kb: &Kb, dir: &std::path::Path) {
    kb.learn(LearnRequest::text("a takahe written after it"))
        .unwrap();
    let (_copy, killed) = opened_as_if_killed(dir);
    for kb in [kb, &killed] {
        assert_eq!(found(kb, "kiwi"), 0);
        assert_eq!(found(kb, "takahe"), 1);
        assert_eq!(kb.status().unwrap().sections, 2);
    }
}

/// The store's reopen after such a failure leaves the record out of its replay, and claims its
/// number: a kill then replays the journal, which still holds the record, onto a database that
/// skips it.
#[test]
fn a_failed_group_whose_record_the_disk_would_not_take_back_is_not_replayed() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, _plan) = kb_with_a_refused_record(tmp.path());
    assert_eq!(found(&kb, "kiwi"), 0, "the reopen replayed a failed write");
    let (_copy, killed) = opened_as_if_killed(tmp.path());
    assert_eq!(
        found(&killed, "kiwi"),
        0,
        "the open after a kill replayed it"
    );
    drop(killed);
    only_the_write_after_it_is_there(&kb, tmp.path());
}

/// The same when the disk is full by the time the store reopens: the read-only view it opens
/// instead leaves the record out too, and the reopen for writing, once there is room, claims it.
#[test]
fn a_refused_record_stays_out_of_the_read_only_view_of_a_full_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let (kb, plan) = kb_with_a_refused_record(tmp.path());
    plan.fill_disk();
    // The store's sections: the lexical index cannot take a change on a full disk either.
    assert_eq!(
        kb.status().unwrap().sections,
        1,
        "the read-only view replayed a failed write"
    );
    assert_eq!(kb.store.generation(), 0, "the store reopened for writing");
    let full = kb.learn(LearnRequest::text("a write on the full disk"));
    assert!(full.is_err(), "{full:?}");
    plan.free_disk();
    only_the_write_after_it_is_there(&kb, tmp.path());
}

/// The same when the reopen's own durable commit, the one that claims the record's number,
/// fails (an fsync error, with room on the disk): the view the store falls back to leaves the
/// record out, and a later reopen for writing claims it.
#[test]
fn a_refused_record_stays_out_when_the_commit_that_claims_it_fails() {
    use store::faults::{Errno, Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let (kb, plan) = kb_with_a_refused_record(tmp.path());
    let claim = plan.count(Target::Store, Op::Sync) + 1;
    plan.fail_nth(Target::Store, Op::Sync, claim, Errno::Eio);
    assert_eq!(
        kb.status().unwrap().sections,
        1,
        "the view after a failed claim replayed a failed write"
    );
    assert!(
        plan.fired()
            .iter()
            .any(|f| f.target == Target::Store && f.n == claim),
        "the reopen made no durable commit: {:?}",
        plan.fired()
    );
    assert_eq!(kb.store.generation(), 0, "the store reopened for writing");
    only_the_write_after_it_is_there(&kb, tmp.path());
}

/// A journaled group whose redb commit fails after its record is in the journal (here redb's
/// fsync when it grows its file, which a commit without an fsync of its own still makes): the
/// write fails, and neither the store's reopen after the failure nor an open after a kill
/// replays it, while the writes around it are there.
#[test]
fn a_journaled_group_whose_commit_fails_is_not_replayed_by_the_reopen() {
    use store::faults::{Op, Target};
    let tmp = tempfile::tempdir().unwrap();
    let (kb, plan) = kb_whose_next_commit_fails(tmp.path());
    let journal_syncs = plan.count(Target::Journal, Op::Sync);
    let failed = kb.learn(LearnRequest::text("a kiwi whose commit fails"));
    assert!(
        failed.is_err(),
        "{failed:?}: the commit did not grow the file"
    );
    assert_eq!(
        plan.count(Target::Journal, Op::Sync),
        journal_syncs + 2,
        "its record was in the journal, and was taken back"
    );
    kb.learn(LearnRequest::text("a takahe written after it"))
        .unwrap();
    let (_copy, killed) = opened_as_if_killed(tmp.path());
    for kb in [&kb, &killed] {
        let found = |text: &str| kb.search(&SearchRequest::new(text)).unwrap().total;
        assert_eq!(found("kiwi"), 0);
        assert_eq!(found("takahe"), 1);
        assert_eq!(kb.status().unwrap().sections, 2);
    }
}
