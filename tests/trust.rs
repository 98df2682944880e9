//! What a user trusts a knowledge base for, checked over random sequences of ordinary work:
//! after any mix of learn / split-learn / edit / sync / delete / unlearn / export / import,
//! `check` is clean (exit 0) and no text that the user replaced or deleted is found by search,
//! while everything still held is.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::TestDb;

/// A small deterministic generator (xorshift64*), so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The kbids a search for `word` finds in `db`.
/// (A search whose word matched nothing answers with the nearest indexed word, `corrected`:
/// none of those hold it.)
fn found(db: &TestDb, word: &str) -> usize {
    let v = db.json(&["search", word]);
    if v["corrected"].get(word).is_some() {
        return 0;
    }
    v["items"].as_array().unwrap().len()
}

/// What the user holds: a word is in exactly one place, so where it went is known.
#[derive(Default)]
struct World {
    next_word: usize,
    /// Facts learned on their own: word → kbid.
    facts: BTreeMap<String, String>,
    /// Documents learned with `--split`: docid → the word of each `## Hn` section.
    docs: BTreeMap<String, Vec<String>>,
    /// Files of the synced folder (synced or not yet): stem → the word of each section.
    files: BTreeMap<String, Vec<String>>,
    /// Words the user replaced or deleted.
    gone: BTreeSet<String>,
}

impl World {
    /// A new word no stemmer or synonym list relates to another: `zq` + letters.
    fn word(&mut self) -> String {
        let mut n = self.next_word;
        self.next_word += 1;
        let mut w = String::from("zq");
        loop {
            w.push((b'a' + (n % 26) as u8) as char);
            n /= 26;
            if n == 0 {
                break;
            }
        }
        w.push('x');
        w
    }

    fn live(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.facts.keys().cloned().collect();
        out.extend(self.docs.values().flatten().cloned());
        out.extend(self.files.values().flatten().cloned());
        out
    }
}

fn markdown(title: &str, words: &[String]) -> String {
    let mut s = format!("# {title}\n\nAbout {title}.\n");
    for (i, w) in words.iter().enumerate() {
        s.push_str(&format!("\n## H{i}\n\nThe {w} notes of part {i}.\n"));
    }
    s
}

fn run_sequence(seed: u64, steps: usize) {
    let db = TestDb::new();
    let folder = db.tmp.path().join("notes");
    std::fs::create_dir(&folder).unwrap();
    let scratch = db.tmp.path().join("scratch.md");
    let mut rng = Rng(seed);
    let mut w = World::default();
    let mut log = Vec::new();
    for step in 0..steps {
        let op = rng.below(10);
        log.push(op);
        let what = format!("seed {seed}, step {step}, ops {log:?}");
        match op {
            // A fact of the user's own.
            0 => {
                let word = w.word();
                let r = db.learn(&[&format!("A fact about {word}.")]);
                w.facts
                    .insert(word, r["kbid"].as_str().unwrap().to_string());
            }
            // Unlearn one.
            1 => {
                if let Some(word) = w.facts.keys().nth(rng.below(w.facts.len().max(1))).cloned() {
                    let kbid = w.facts.remove(&word).unwrap();
                    db.json(&["unlearn", &kbid]);
                    w.gone.insert(word);
                }
            }
            // A new document, or a re-learn of one with a section changed, one added and
            // one dropped.
            2 | 3 => {
                let docid = format!("docs/d{}", rng.below(4));
                let mut words = w.docs.get(&docid).cloned().unwrap_or_default();
                if !words.is_empty() {
                    let i = rng.below(words.len());
                    let new = w.word();
                    w.gone.insert(std::mem::replace(&mut words[i], new));
                    if words.len() > 1 && rng.below(2) == 0 {
                        w.gone.insert(words.remove(rng.below(words.len())));
                    }
                }
                words.push(w.word());
                std::fs::write(&scratch, markdown(&docid, &words)).unwrap();
                db.learn(&[
                    "--file",
                    scratch.to_str().unwrap(),
                    "--docid",
                    &docid,
                    "--split",
                ]);
                w.docs.insert(docid, words);
            }
            // Delete a learned document.
            4 => {
                if let Some(docid) = w.docs.keys().nth(rng.below(w.docs.len().max(1))).cloned() {
                    db.json(&["doc", "delete", &docid]);
                    w.gone.extend(w.docs.remove(&docid).unwrap());
                }
            }
            // Write a file of the folder (new or changed), then sync.
            5 | 6 => {
                let stem = format!("f{}", rng.below(4));
                let mut words = w.files.get(&stem).cloned().unwrap_or_default();
                if !words.is_empty() && rng.below(2) == 0 {
                    let i = rng.below(words.len());
                    let new = w.word();
                    w.gone.insert(std::mem::replace(&mut words[i], new));
                } else {
                    words.push(w.word());
                }
                std::fs::write(folder.join(format!("{stem}.md")), markdown(&stem, &words)).unwrap();
                w.files.insert(stem, words);
                db.json(&["sync", folder.to_str().unwrap()]);
            }
            // Delete a file, then sync.
            7 => {
                if let Some(stem) = w.files.keys().nth(rng.below(w.files.len().max(1))).cloned() {
                    std::fs::remove_file(folder.join(format!("{stem}.md"))).unwrap();
                    w.gone.extend(w.files.remove(&stem).unwrap());
                    db.json(&["sync", folder.to_str().unwrap()]);
                }
            }
            // Edit a section of a synced document (written back to its file).
            8 => {
                let synced: Vec<String> = w
                    .files
                    .iter()
                    .filter(|(_, words)| !words.is_empty())
                    .map(|(s, _)| s.clone())
                    .collect();
                if !synced.is_empty() {
                    let stem = synced[rng.below(synced.len())].clone();
                    // Make sure the store has the file as it is now.
                    db.json(&["sync", folder.to_str().unwrap()]);
                    let i = rng.below(w.files[&stem].len());
                    let word = w.word();
                    db.json(&[
                        "doc",
                        "section",
                        &stem,
                        &format!("H{i}"),
                        "--action",
                        "replace",
                        "--content",
                        &format!("The {word} notes of part {i}."),
                    ]);
                    let old = std::mem::replace(&mut w.files.get_mut(&stem).unwrap()[i], word);
                    w.gone.insert(old);
                }
            }
            // Export, and import into a new database: the copy checks clean and holds what
            // the user holds.
            _ => {
                db.json(&["sync", folder.to_str().unwrap()]);
                let out = db.tmp.path().join(format!("export-{step}"));
                db.json(&["export", out.to_str().unwrap()]);
                let copy = TestDb::uninit();
                copy.json(&["import", out.to_str().unwrap(), "--strict"]);
                copy.assert_checks_clean(&format!("the import of {what}"));
                verify(&copy, &w, &what, true);
            }
        }
        db.assert_checks_clean(&what);
    }
    db.json(&["sync", folder.to_str().unwrap()]);
    verify(&db, &w, &format!("seed {seed}, ops {log:?}"), false);
}

/// Every word the user replaced or deleted is found nowhere; every word still held is found
/// (`sample`: a few of each, for the imported copies).
fn verify(db: &TestDb, w: &World, what: &str, sample: bool) {
    let live = w.live();
    let take = if sample { 5 } else { usize::MAX };
    for word in w.gone.iter().rev().take(take) {
        assert_eq!(
            found(db, word),
            0,
            "{word} was deleted but is found ({what})"
        );
    }
    for word in live.iter().rev().take(take) {
        assert_eq!(
            found(db, word),
            1,
            "{word} is held but not found once ({what})"
        );
    }
}

#[test]
fn random_ordinary_work_checks_clean_and_serves_no_deleted_text() {
    let seeds: Vec<u64> = match std::env::var("KBDB_TRUST_SEED") {
        Ok(s) => vec![s.parse().expect("KBDB_TRUST_SEED: a number")],
        Err(_) => vec![0x9e37_79b9_7f4a_7c15, 0xd1b5_4a32_d192_ed03, 42],
    };
    for seed in seeds {
        run_sequence(seed, 30);
    }
}

#[test]
fn status_counts_what_the_store_holds_after_an_unlearn() {
    let db = TestDb::new();
    let a = db.learn(&["alpha fact"])["kbid"]
        .as_str()
        .unwrap()
        .to_string();
    db.learn(&["beta fact"]);
    db.json(&["unlearn", &a]);
    let s = db.status();
    assert_eq!(s["sections"], 1, "{s}");
    assert_eq!(s["cacheStats"]["indexCount"], 1, "{s}");
}
