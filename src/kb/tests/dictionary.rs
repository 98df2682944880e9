//! The content dictionary: trained once a database holds enough sections, stored before any row
//! uses it, used for new content only, and found again by the next open.

use super::*;
use crate::kb::dictionary::TRAIN_AT;
use crate::store::content_codec;

/// `n` sections of generated prose (seeded).
fn prose(n: usize, seed: u64) -> Vec<String> {
    crate::test_rng::prose(n, seed, 60)
}

fn learn_all(kb: &Kb, texts: &[String]) -> Vec<String> {
    texts
        .chunks(1_000)
        .flat_map(|chunk| {
            let reqs = chunk
                .iter()
                .map(|t| LearnRequest::text(t.clone()))
                .collect();
            kb.learn_many(reqs).unwrap()
        })
        .map(|r| r.unwrap().kbid)
        .collect()
}

/// The stored row of section `kbid` and the content's length.
fn row_of(kb: &Kb, kbid: &str) -> (Vec<u8>, usize) {
    let txn = kb.db().unwrap().begin_read().unwrap();
    let t = ReadTables::open(&txn).unwrap();
    let rec = t.section(kbid).unwrap().unwrap();
    let row = t
        .content
        .get(rec.content_seq)
        .unwrap()
        .unwrap()
        .value()
        .to_vec();
    (row, rec.size as usize)
}

fn read(kb: &Kb, kbid: &str) -> String {
    kb.read_sections(&[kbid]).unwrap().remove(0).content
}

#[test]
fn a_database_trains_its_dictionary_once_and_compresses_new_content_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let texts = prose(TRAIN_AT as usize + 300, 21);
    let (before, after) = texts.split_at(TRAIN_AT as usize - 100);
    let early = learn_all(&kb, before);
    assert_eq!(kb.status().unwrap().content_dictionary, None, "too few yet");
    let late = learn_all(&kb, after);
    let id = kb.status().unwrap().content_dictionary.expect("trained");
    let d = content_codec::installed(id).unwrap();
    // Rows stored before (the group that reached the threshold too) stay as they were; the
    // next ones are made with it.
    for kbid in [&early[0], late.last().unwrap()] {
        let (row, size) = row_of(&kb, kbid);
        assert_eq!(content_codec::frame_dictionary(&row), None, "{size} bytes");
    }
    let next = learn_all(&kb, &prose(3, 23));
    let (row, size) = row_of(&kb, &next[0]);
    assert_eq!(
        content_codec::frame_dictionary(&row),
        Some(d.id),
        "{size} bytes"
    );
    assert_eq!(read(&kb, &next[0]), prose(3, 23)[0]);
    assert_eq!(read(&kb, &early[0]), before[0]);
    assert_eq!(read(&kb, late.last().unwrap()), *after.last().unwrap());
    // Asked again, it keeps the one it has.
    assert_eq!(kb.train_content_dictionary().unwrap(), Some(id));
    drop(kb);

    // The next open finds it in the store and goes on using it.
    let kb = Kb::open(tmp.path()).unwrap();
    assert_eq!(kb.status().unwrap().content_dictionary, Some(id));
    let more = learn_all(&kb, &prose(5, 22));
    let (row, size) = row_of(&kb, &more[0]);
    assert_eq!(
        content_codec::frame_dictionary(&row),
        Some(d.id),
        "{size} bytes"
    );
    assert_eq!(read(&kb, &early[1]), before[1]);
    assert_eq!(read(&kb, &more[0]), prose(5, 22)[0]);
    assert!(kb.check().unwrap().ok);
}

#[test]
fn a_database_with_nothing_to_train_on_goes_on_without_a_dictionary() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    // Short facts: nothing long enough to train on.
    let facts: Vec<String> = (0..50).map(|i| format!("fact {i}")).collect();
    learn_all(&kb, &facts);
    assert_eq!(kb.train_content_dictionary().unwrap(), None);
    assert_eq!(kb.status().unwrap().content_dictionary, None);
    let kbid = learn_all(&kb, &prose(1, 5)).remove(0);
    let (row, size) = row_of(&kb, &kbid);
    assert_eq!(content_codec::frame_dictionary(&row), None, "{size} bytes");
}

#[test]
fn an_import_large_enough_is_compressed_with_a_dictionary_trained_on_it_first() {
    let tmp = tempfile::tempdir().unwrap();
    let source = Kb::open_or_create(tmp.path().join("source")).unwrap().0;
    let texts = prose(TRAIN_AT as usize + 50, 41);
    let kbids = learn_all(&source, &texts);
    let export = tmp.path().join("export");
    source
        .export(&crate::snapshot::export::ExportOptions {
            path: export.clone(),
            with_indexes: false,
            force: false,
            confine_to: None,
        })
        .unwrap();
    drop(source);
    // One import transaction into an empty database: without a dictionary trained first, all
    // of it would be stored without one.
    let kb = Kb::open_or_create(tmp.path().join("copy")).unwrap().0;
    kb.import(&export, true).unwrap();
    let id = kb.status().unwrap().content_dictionary.expect("trained");
    let d = content_codec::installed(id).unwrap();
    for i in [0, TRAIN_AT as usize / 2, kbids.len() - 1] {
        let (row, size) = row_of(&kb, &kbids[i]);
        assert!(
            content_codec::frame_dictionary(&row) == Some(d.id) && row.len() < size,
            "section {i}"
        );
        assert_eq!(read(&kb, &kbids[i]), texts[i]);
    }
    assert!(kb.check().unwrap().ok);
}

#[test]
fn a_write_prepared_before_the_dictionary_existed_is_stored_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    learn_all(&kb, &prose(1_000, 51));
    let text = prose(1, 52).remove(0);
    let prepared = kb
        .prepare_write(WriteOp::Learn(LearnRequest::text(text.clone())))
        .unwrap();
    let id = kb.train_content_dictionary().unwrap().expect("trained");
    let out = kb.write_prepared_unindexed(vec![Ok(prepared)]).unwrap();
    let kbid = match out.into_iter().next().unwrap().unwrap() {
        WriteOutcome::Learned(r) => r.kbid,
        other => panic!("{other:?}"),
    };
    let (row, size) = row_of(&kb, &kbid);
    assert_eq!(
        content_codec::frame_dictionary(&row),
        Some(id),
        "{size} bytes"
    );
    assert_eq!(read(&kb, &kbid), text);
}

#[test]
fn a_stream_trains_the_dictionary_behind_its_writer_and_has_it_when_it_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let kb = Kb::open_or_create(tmp.path()).unwrap().0;
    let texts = prose(TRAIN_AT as usize + 2_000, 61);
    let batches = texts
        .chunks(500)
        .map(|c| c.iter().map(|t| LearnRequest::text(t.clone())).collect())
        .collect::<Vec<Vec<_>>>();
    let mut kbids = Vec::new();
    kb.learn_stream(batches.into_iter(), |r| {
        kbids.extend(r.unwrap().into_iter().map(|l| l.unwrap().kbid))
    });
    // Trained on the stream's index thread, which the stream waits for before it returns.
    let id = kb.status().unwrap().content_dictionary.expect("trained");
    // Every section reads back; the first ones were stored before the dictionary.
    let (first, _) = row_of(&kb, &kbids[0]);
    assert_eq!(content_codec::frame_dictionary(&first), None);
    for (kbid, text) in kbids.iter().zip(&texts).step_by(97) {
        assert_eq!(&read(&kb, kbid), text);
    }
    // Content learned now is compressed with it.
    let later = learn_all(&kb, &prose(1, 62));
    let (row, size) = row_of(&kb, &later[0]);
    assert!(content_codec::frame_dictionary(&row) == Some(id) && row.len() < size);
    assert!(kb.check().unwrap().ok);
}
