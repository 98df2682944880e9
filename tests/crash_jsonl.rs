//! Nothing acknowledged is lost: stream sections into `kbdb learn --jsonl`, SIGKILL it
//! mid-stream, reopen, and check every section whose result line was printed.

mod common;

use std::io::{BufRead, BufReader, Write};

use common::{JsonlStream, TestDb};

fn content(run: usize, i: usize) -> String {
    format!(
        "# Fact {run}-{i}\nSection number {i} of run {run}: {}",
        "lorem ipsum ".repeat(i % 7 + 1).trim_end()
    )
}

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_section() {
    let db = TestDb::new();
    let mut total_acked = 0;
    for (run, kill_after) in [1usize, 7, 60, 400].into_iter().enumerate() {
        let mut child = db.spawn_jsonl();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            for i in 0..5000 {
                let line = serde_json::json!({"content": content(run, i), "docid": format!("run/{run}"), "tags": ["crash"]});
                if writeln!(stdin, "{line}").is_err() {
                    break; // the process was killed
                }
            }
        });
        let mut acked = Vec::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while let Some(Ok(line)) = lines.next() {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            acked.push(v["kbid"].as_str().unwrap().to_string());
            if acked.len() == kill_after {
                child.kill().unwrap(); // SIGKILL
                break;
            }
        }
        // Lines already written to the pipe before the kill were acknowledged too.
        for line in lines.map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            acked.push(v["kbid"].as_str().unwrap().to_string());
        }
        child.wait().unwrap();
        writer.join().unwrap();
        assert!(acked.len() >= kill_after);

        let kb = kbdb::Kb::open(db.path()).expect("reopens after SIGKILL");
        let refs: Vec<&str> = acked.iter().map(String::as_str).collect();
        let sections = kb
            .read_sections(&refs)
            .expect("every acknowledged section is there");
        for (i, s) in sections.iter().enumerate() {
            assert_eq!(
                s.content,
                content(run, i),
                "content of acknowledged line {i}"
            );
            assert_eq!(
                kbdb::kbid_of(s.content.as_bytes()),
                s.kbid,
                "checksum matches kbid"
            );
        }
        // The document lists the acknowledged sections, in order, as its prefix.
        let doc = kb.retrieve_document(&format!("run/{run}")).unwrap();
        assert_eq!(&doc.kbids[..acked.len()], &acked[..]);
        total_acked += acked.len();
        drop(kb);
    }
    assert!(total_acked >= 468);
}

/// The journal file's length (0 when missing).
fn journal_len(db: &TestDb) -> u64 {
    std::fs::metadata(db.path().join("kbdb.journal")).map_or(0, |m| m.len())
}

/// Write section `i` of the slow document to a `learn --jsonl` process and await its result
/// line: the kbid.
fn learn_awaited(
    stdin: &mut impl Write,
    results: &mut impl Iterator<Item = std::io::Result<String>>,
    i: usize,
) -> String {
    let line = serde_json::json!({"content": content(9, i), "docid": "slow/doc"});
    writeln!(stdin, "{line}").unwrap();
    stdin.flush().unwrap();
    let v: serde_json::Value = serde_json::from_str(&results.next().unwrap().unwrap()).unwrap();
    v["kbid"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

#[test]
fn a_stream_written_line_by_line_is_acknowledged_from_the_journal_and_replayed_after_a_kill() {
    let db = TestDb::new();
    let JsonlStream {
        mut child,
        mut stdin,
        mut lines,
    } = db.jsonl_stream();
    let mut acked = Vec::new();
    // One line at a time, each awaited: one write group each, as a durable writer sends them.
    for i in 0..12 {
        acked.push(learn_awaited(&mut stdin, &mut lines, i));
    }
    assert!(
        journal_len(&db) > 0,
        "the groups after the first went through the journal"
    );
    child.kill().unwrap(); // SIGKILL: the last groups are in the journal only
    child.wait().unwrap();
    let kb = kbdb::Kb::open(db.path()).expect("reopens, replaying the journal");
    assert_eq!(
        journal_len(&db),
        0,
        "once replayed, the journal holds nothing the database lacks"
    );
    let refs: Vec<&str> = acked.iter().map(String::as_str).collect();
    let sections = kb.read_sections(&refs).expect("every acknowledged section");
    for (i, s) in sections.iter().enumerate() {
        assert_eq!(s.content, content(9, i));
    }
    assert_eq!(kb.retrieve_document("slow/doc").unwrap().kbids, acked);
    assert!(kb.check().unwrap().ok);
    drop(kb);

    // A stream that ends makes its writes durable in the database and empties the journal.
    let JsonlStream {
        mut child,
        mut stdin,
        mut lines,
    } = db.jsonl_stream();
    for i in 12..16 {
        learn_awaited(&mut stdin, &mut lines, i);
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(
        journal_len(&db),
        0,
        "a finished stream leaves nothing to replay"
    );
    let kb = kbdb::Kb::open(db.path()).unwrap();
    assert_eq!(kb.retrieve_document("slow/doc").unwrap().kbids.len(), 16);
}
