//! The crash harness (docs/reliability.md): writers drive a realistic mix of writes through the
//! real daemon — single and batched learns, documents split at their headings, appends,
//! replaces, unlearns, and gc / rebuild / export — while the harness SIGKILLs the daemon at
//! random moments. After each kill the next client starts a new daemon, and the harness checks:
//!
//! - every acknowledged write is there: sections with their exact content (which hashes to
//!   their kbid), documents with their acknowledged manifest, unlearned and superseded sections
//!   gone;
//! - a write whose answer never came is whole or absent: the state matches the world before it
//!   or the world after it, never a mix (a document with some of its new sections, a replace
//!   that added the new version but kept the old one, part of a batch);
//! - `kbdb check` is ok (only sections that re-learned documents let go may be reported, as
//!   orphans that `gc` collects; past 500 of them the harness runs `gc` between rounds, so that
//!   check's listing is never cut short);
//! - the lexical index agrees with the store: each tracked section's unique word finds exactly
//!   that section (with its document), each removed section's word finds nothing, the seed
//!   sections are all found;
//! - every acknowledged export is a complete snapshot, and an interrupted one is complete or
//!   absent.
//!
//! It prints `kills, acknowledged writes, lost, divergences`.
//!
//! `KBDB_CRASH_KILLS` (default 15: what `cargo test` runs), `KBDB_CRASH_SEED` (default: the
//! clock; printed), `KBDB_CRASH_MAX_MS` (the longest wait before a kill, default 250),
//! `KBDB_CRASH_VERBOSE=1` (a progress line every 5 % of the kills, and each problem as it is
//! found), `KBDB_CRASH_SKIP=rebuild` (maintenance operations to leave out, comma-separated).
//! `tools/crash-test.sh N` runs it at a large count in release mode.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TestDb;
use common::daemon::{Reply, Rpc, alive, become_subreaper, sigkill, socket_path, wait_gone};
use serde_json::{Value, json};

/// Notes (standalone sections) a writer keeps at most; beyond, it unlearns.
const NOTE_CAP: usize = 24;
/// Documents and replaceable facts per writer.
const DOC_SLOTS: u64 = 3;
const FACT_SLOTS: u64 = 3;
/// A document longer than this is re-learned (shorter) instead of appended to.
const DOC_MAX: usize = 10;
/// Writers talking JSON-RPC to the socket; one more writer goes through the CLI.
const SOCKET_WRITERS: usize = 2;
/// Standalone sections learned before the first kill (they give rebuild and export some work).
const SEEDS: usize = 200;
const SEED_WORD: &str = "zzseedq";
/// Longest a client may wait for an answer before the harness calls it a hang.
const RPC_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Randomness (no crate needed): SplitMix64.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (0 when n is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

/// A word no other section contains: `zk` + writer letter + 6 letters + `q` (letters only and a
/// final `q`, so stemming leaves it alone and no two tokens share a stem).
fn token(w: usize, n: u64) -> String {
    let mut digits = [b'a'; 6];
    let mut x = n;
    for d in digits.iter_mut().rev() {
        *d = b'a' + (x % 26) as u8;
        x /= 26;
    }
    format!(
        "zk{}{}q",
        (b'a' + w as u8) as char,
        std::str::from_utf8(&digits).unwrap()
    )
}

const FILLER: &[&str] = &[
    "The deploy pipeline runs the migrations before the new binaries start.",
    "We keep the retention window at thirty days because audits ask for it.",
    "Search ranks headings twice as high as body text.",
    "Every acknowledged write is a committed transaction on disk.",
    "The on-call rotation changes every Monday at nine.",
    "Caches are warmed from the last snapshot after a restart.",
    "Latency budgets are measured at the 99th percentile.",
    "A section is addressed by the hash of its content.",
];

/// Some prose: usually a sentence or three, now and then a few kilobytes.
fn filler(rng: &mut Rng) -> String {
    let n = if rng.below(20) == 0 {
        rng.range(30, 120)
    } else {
        rng.range(1, 3)
    };
    (0..n)
        .map(|_| FILLER[rng.index(FILLER.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

// ---------------------------------------------------------------------------------------------
// The model: what each writer's keys must hold.

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Sec(String),
    Doc(String),
}

/// A section is `Present` or `Absent`; a document is `Absent` or has a `Manifest`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum St {
    Present,
    Absent,
    Manifest(Vec<String>),
}

#[derive(Clone, Debug)]
enum Role {
    Note,
    Fact(u64),
    /// A section of one of the writer's documents.
    Part,
}

#[derive(Clone, Debug)]
struct Info {
    content: String,
    token: String,
    role: Role,
}

/// What an acknowledgement must say.
#[derive(Clone, Debug)]
enum Expect {
    Kbid(String),
    Replace {
        kbid: String,
        superseded: Option<String>,
    },
    Batch(Vec<String>),
    Manifest(Vec<String>),
    Removed,
}

impl Expect {
    /// Why `v` is not the acknowledgement expected (None: it is).
    fn mismatch(&self, v: &Value) -> Option<String> {
        let kbid = |v: &Value| v["kbid"].as_str().map(str::to_string);
        match self {
            Expect::Kbid(k) => (kbid(v).as_deref() != Some(k)).then(|| format!("kbid {k}")),
            Expect::Replace {
                kbid: k,
                superseded,
            } => {
                let sup = v["superseded"].as_str().map(str::to_string);
                (kbid(v).as_deref() != Some(k) || sup != *superseded)
                    .then(|| format!("kbid {k} superseding {superseded:?}"))
            }
            Expect::Batch(ks) => {
                let got: Vec<Option<String>> = v
                    .as_array()
                    .map(|a| a.iter().map(|i| kbid(&i["ok"])).collect())
                    .unwrap_or_default();
                let want: Vec<Option<String>> = ks.iter().cloned().map(Some).collect();
                (got != want).then(|| format!("kbids {ks:?}"))
            }
            Expect::Manifest(ks) => {
                let got: Vec<Option<String>> = v["sections"]
                    .as_array()
                    .map(|a| a.iter().map(kbid).collect())
                    .unwrap_or_default();
                let want: Vec<Option<String>> = ks.iter().cloned().map(Some).collect();
                (got != want).then(|| format!("sections {ks:?}"))
            }
            Expect::Removed => (v["removed"] != json!(true)).then(|| "removed: true".into()),
        }
    }
}

/// One write as the model sees it: the state of its keys before and after. A key missing from
/// a world is free in it (sections a re-learned document let go of: gc may collect them).
#[derive(Clone, Debug)]
struct Part {
    label: &'static str,
    before: Vec<(Key, St)>,
    after: Vec<(Key, St)>,
    /// Sections the write lets go of (orphans until gc).
    detach: Vec<String>,
    expect: Expect,
}

/// The request of a write.
#[derive(Clone, Debug)]
enum Req {
    Learn(Value),
    LearnMany(Vec<Value>),
    Document { docid: String, markdown: String },
    Unlearn(String),
}

/// A write to send: one request, and its parts (one, except a `--jsonl` stream whose lines are
/// acknowledged one by one).
struct Plan {
    label: &'static str,
    req: Req,
    parts: Vec<Part>,
}

enum Outcome {
    Acked(Value),
    /// No answer (the daemon died): applied or not.
    Unknown(String),
    /// An error answer: nothing should have been applied, but the harness only assumes
    /// "applied or not" and reports it.
    Failed(String),
    /// Refused by the start race of [`start_race`].
    StartRace,
}

struct Model {
    w: usize,
    cli: bool,
    counter: u64,
    known: BTreeMap<Key, St>,
    pending: Vec<Part>,
    info: HashMap<String, Info>,
    detached: BTreeSet<String>,
    acked: u64,
    acked_by_label: BTreeMap<&'static str, u64>,
    unknown: u64,
    start_races: u64,
    /// Error answers to writes (should never happen: every write is valid).
    errors: Vec<String>,
    /// Acknowledgements that did not say what was asked.
    bad_acks: Vec<String>,
}

impl Model {
    fn new(w: usize, cli: bool) -> Model {
        Model {
            w,
            cli,
            counter: 0,
            known: BTreeMap::new(),
            pending: Vec::new(),
            info: HashMap::new(),
            detached: BTreeSet::new(),
            acked: 0,
            acked_by_label: BTreeMap::new(),
            unknown: 0,
            start_races: 0,
            errors: Vec::new(),
            bad_acks: Vec::new(),
        }
    }

    fn docid(&self, slot: u64) -> String {
        format!("crash/w{}/doc{slot}", self.w)
    }

    fn next_token(&mut self) -> String {
        self.counter += 1;
        token(self.w, self.counter)
    }

    fn state(&self, key: &Key) -> St {
        self.known.get(key).cloned().unwrap_or(St::Absent)
    }

    fn manifest(&self, docid: &str) -> Vec<String> {
        match self.state(&Key::Doc(docid.to_string())) {
            St::Manifest(m) => m,
            _ => Vec::new(),
        }
    }

    /// Remove a key from the known state (it moves into a write's worlds).
    fn take(&mut self, key: &Key) -> St {
        self.known.remove(key).unwrap_or(St::Absent)
    }

    fn present_with(&self, pred: impl Fn(&Role) -> bool) -> Vec<String> {
        self.known
            .iter()
            .filter_map(|(k, s)| match (k, s) {
                (Key::Sec(id), St::Present) if pred(&self.info[id].role) => Some(id.clone()),
                _ => None,
            })
            .collect()
    }

    fn new_section(&mut self, role: Role, content: String, token: String) -> String {
        let k = kbdb::kbid_of(content.as_bytes());
        self.info.insert(
            k.clone(),
            Info {
                content,
                token,
                role,
            },
        );
        k
    }

    fn new_note(&mut self, rng: &mut Rng) -> (String, Value) {
        let tok = self.next_token();
        let content = format!(
            "# Note {tok}\n\nWriter {} noted {tok}. {}",
            self.w,
            filler(rng)
        );
        let mut p = json!({ "content": content });
        if rng.below(2) == 0 {
            p["tags"] = json!(["crash", format!("w{}", self.w)]);
        }
        (self.new_section(Role::Note, content, tok), p)
    }

    fn new_appendix(&mut self, rng: &mut Rng, docid: &str) -> (String, Value) {
        let tok = self.next_token();
        let content = format!(
            "## Appendix {tok}\n\nAppended to {docid}: {tok}. {}",
            filler(rng)
        );
        let p = json!({ "content": content, "docid": docid });
        (self.new_section(Role::Part, content, tok), p)
    }

    fn plan(&mut self, rng: &mut Rng) -> Plan {
        let notes = self.present_with(|r| matches!(r, Role::Note));
        let full = notes.len() >= NOTE_CAP;
        // Full: make room, or write something else (appends, documents, replaces).
        let roll = if full && rng.below(2) == 1 {
            rng.range(36, 81)
        } else {
            rng.below(100)
        };
        if (full && !(36..82).contains(&roll)) || ((82..90).contains(&roll) && !notes.is_empty()) {
            return self.plan_unlearn(notes[rng.index(notes.len())].clone(), None);
        }
        match roll {
            0..22 | 82..90 => {
                let (k, p) = self.new_note(rng);
                single("learn", Req::Learn(p), new_section_part("learn", k))
            }
            22..36 if self.cli => self.plan_jsonl(rng),
            22..36 => self.plan_batch(rng),
            36..50 => self.plan_append(rng),
            50..68 => self.plan_document(rng),
            68..82 => self.plan_replace(rng),
            _ => self.plan_unlearn_part(rng),
        }
    }

    /// `learn --jsonl` through the CLI: notes, each line acknowledged on its own.
    fn plan_jsonl(&mut self, rng: &mut Rng) -> Plan {
        let mut items = Vec::new();
        let mut parts = Vec::new();
        for _ in 0..rng.range(2, 5) {
            let (k, p) = self.new_note(rng);
            items.push(p);
            parts.push(new_section_part("learn --jsonl", k));
        }
        Plan {
            label: "learn --jsonl",
            req: Req::LearnMany(items),
            parts,
        }
    }

    /// `learn_many`: notes and appends in one request, all or nothing.
    fn plan_batch(&mut self, rng: &mut Rng) -> Plan {
        let mut items = Vec::new();
        let mut kbids = Vec::new();
        let mut before = Vec::new();
        let mut after = Vec::new();
        let mut docs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for _ in 0..rng.range(2, 5) {
            let docid = self.docid(rng.below(DOC_SLOTS));
            let (k, p) = if rng.below(10) < 3 {
                if !docs.contains_key(&docid) {
                    let cur = self.take(&Key::Doc(docid.clone()));
                    before.push((Key::Doc(docid.clone()), cur.clone()));
                    let m = match cur {
                        St::Manifest(m) => m,
                        _ => Vec::new(),
                    };
                    docs.insert(docid.clone(), m);
                }
                let (k, p) = self.new_appendix(rng, &docid);
                docs.get_mut(&docid).unwrap().push(k.clone());
                (k, p)
            } else {
                self.new_note(rng)
            };
            before.push((Key::Sec(k.clone()), St::Absent));
            after.push((Key::Sec(k.clone()), St::Present));
            kbids.push(k);
            items.push(p);
        }
        for (docid, m) in docs {
            after.push((Key::Doc(docid), St::Manifest(m)));
        }
        single(
            "learn_many",
            Req::LearnMany(items),
            Part {
                label: "learn_many",
                before,
                after,
                detach: Vec::new(),
                expect: Expect::Batch(kbids),
            },
        )
    }

    /// `learn` with a docid: appended to the document (created when absent).
    fn plan_append(&mut self, rng: &mut Rng) -> Plan {
        let docid = self.docid(rng.below(DOC_SLOTS));
        if self.manifest(&docid).len() >= DOC_MAX {
            return self.plan_document(rng);
        }
        let cur = self.take(&Key::Doc(docid.clone()));
        let mut m = match &cur {
            St::Manifest(m) => m.clone(),
            _ => Vec::new(),
        };
        let (k, p) = self.new_appendix(rng, &docid);
        m.push(k.clone());
        single(
            "learn --docid",
            Req::Learn(p),
            Part {
                label: "learn --docid",
                before: vec![
                    (Key::Sec(k.clone()), St::Absent),
                    (Key::Doc(docid.clone()), cur),
                ],
                after: vec![
                    (Key::Sec(k.clone()), St::Present),
                    (Key::Doc(docid), St::Manifest(m)),
                ],
                detach: Vec::new(),
                expect: Expect::Kbid(k),
            },
        )
    }

    /// `learn_document` / `learn --split`: a markdown document, new or re-learned with some
    /// sections kept, some dropped, some added.
    fn plan_document(&mut self, rng: &mut Rng) -> Plan {
        let docid = self.docid(rng.below(DOC_SLOTS));
        let cur = self.take(&Key::Doc(docid.clone()));
        let old = match &cur {
            St::Manifest(m) => m.clone(),
            _ => Vec::new(),
        };
        let mut sections: Vec<String> = old
            .iter()
            .filter(|_| rng.below(100) < 65)
            .cloned()
            .collect();
        if old.is_empty() {
            let tok = self.next_token();
            let content = format!(
                "# Document {docid} {tok}\n\nIntroduces {tok}. {}",
                filler(rng)
            );
            sections.push(self.new_section(Role::Part, content, tok));
        }
        let adds = if sections.len() <= 1 {
            rng.range(1, 4)
        } else {
            rng.range(0, 2)
        };
        for _ in 0..adds {
            let tok = self.next_token();
            let content = format!("## Part {tok}\n\n{} Part {tok} of {docid}.", filler(rng));
            let k = self.new_section(Role::Part, content, tok);
            let at = rng.index(sections.len() + 1);
            sections.insert(at, k);
        }
        let markdown = sections
            .iter()
            .map(|k| self.info[k].content.as_str())
            .collect::<Vec<_>>()
            .join("\n\n");
        let split: Vec<String> = kbdb::text::markdown::split_sections(&markdown)
            .iter()
            .map(|s| kbdb::kbid_of(s.text.trim().as_bytes()))
            .collect();
        assert_eq!(
            split, sections,
            "harness bug: the markdown splits as planned"
        );

        let mut before = vec![(Key::Doc(docid.clone()), cur)];
        for k in &old {
            before.push((Key::Sec(k.clone()), self.take(&Key::Sec(k.clone()))));
        }
        for k in sections.iter().filter(|k| !old.contains(k)) {
            before.push((Key::Sec(k.clone()), St::Absent));
        }
        let mut after = vec![(Key::Doc(docid.clone()), St::Manifest(sections.clone()))];
        after.extend(sections.iter().map(|k| (Key::Sec(k.clone()), St::Present)));
        let detach = old
            .iter()
            .filter(|k| !sections.contains(k))
            .cloned()
            .collect();
        single(
            "learn --split",
            Req::Document { docid, markdown },
            Part {
                label: "learn --split",
                before,
                after,
                detach,
                expect: Expect::Manifest(sections),
            },
        )
    }

    /// `learn --replace` under an explicit source key: the new version in, the old one out.
    fn plan_replace(&mut self, rng: &mut Rng) -> Plan {
        let slot = rng.below(FACT_SLOTS);
        let old = self
            .present_with(|r| matches!(r, Role::Fact(s) if *s == slot))
            .pop();
        let tok = self.next_token();
        let content = format!(
            "# Fact {slot} of writer {}\n\nVersion {tok} of the fact. {}",
            self.w,
            filler(rng)
        );
        let k = self.new_section(Role::Fact(slot), content.clone(), tok);
        let p = json!({
            "content": content,
            "source": format!("crash/w{}/fact{slot}", self.w),
            "replace": true,
        });
        let mut before = vec![(Key::Sec(k.clone()), St::Absent)];
        let mut after = vec![(Key::Sec(k.clone()), St::Present)];
        if let Some(o) = &old {
            before.push((Key::Sec(o.clone()), self.take(&Key::Sec(o.clone()))));
            after.push((Key::Sec(o.clone()), St::Absent));
        }
        single(
            "learn --replace",
            Req::Learn(p),
            Part {
                label: "learn --replace",
                before,
                after,
                detach: Vec::new(),
                expect: Expect::Replace {
                    kbid: k,
                    superseded: old,
                },
            },
        )
    }

    /// `unlearn` of a section; with `doc`, a section of that document (which shrinks, or goes
    /// away with its last section).
    fn plan_unlearn(&mut self, k: String, doc: Option<String>) -> Plan {
        let mut before = vec![(Key::Sec(k.clone()), self.take(&Key::Sec(k.clone())))];
        let mut after = vec![(Key::Sec(k.clone()), St::Absent)];
        if let Some(docid) = doc {
            let cur = self.take(&Key::Doc(docid.clone()));
            let rest: Vec<String> = match &cur {
                St::Manifest(m) => m.iter().filter(|x| **x != k).cloned().collect(),
                _ => Vec::new(),
            };
            before.push((Key::Doc(docid.clone()), cur));
            after.push((
                Key::Doc(docid),
                if rest.is_empty() {
                    St::Absent
                } else {
                    St::Manifest(rest)
                },
            ));
        }
        single(
            "unlearn",
            Req::Unlearn(k),
            Part {
                label: "unlearn",
                before,
                after,
                detach: Vec::new(),
                expect: Expect::Removed,
            },
        )
    }

    fn plan_unlearn_part(&mut self, rng: &mut Rng) -> Plan {
        let docs: Vec<String> = (0..DOC_SLOTS)
            .map(|s| self.docid(s))
            .filter(|d| !self.manifest(d).is_empty())
            .collect();
        if docs.is_empty() {
            return self.plan_document(rng);
        }
        let docid = docs[rng.index(docs.len())].clone();
        let m = self.manifest(&docid);
        let k = m[rng.index(m.len())].clone();
        self.plan_unlearn(k, Some(docid))
    }

    /// Record the outcome of a part; false when it is not known (the writer stops for this
    /// round).
    fn settle(&mut self, part: Part, outcome: Outcome) -> bool {
        match outcome {
            Outcome::Acked(v) => {
                if let Some(why) = part.expect.mismatch(&v) {
                    self.bad_acks.push(format!(
                        "w{} {}: acknowledged, but not with {why}: {v}",
                        self.w, part.label
                    ));
                }
                self.known.extend(part.after);
                self.detached.extend(part.detach);
                self.acked += 1;
                *self.acked_by_label.entry(part.label).or_default() += 1;
                true
            }
            Outcome::Unknown(why) => {
                // A daemon that stops answering without dying is a hang, not a crash.
                if why.contains("timed out") || why.contains("temporarily unavailable") {
                    self.errors
                        .push(format!("w{} {}: no answer: {why}", self.w, part.label));
                }
                self.pending.push(part);
                self.unknown += 1;
                false
            }
            Outcome::StartRace => {
                self.start_races += 1;
                self.pending.push(part);
                self.unknown += 1;
                false
            }
            Outcome::Failed(msg) => {
                self.errors
                    .push(format!("w{} {}: {msg}", self.w, part.label));
                self.pending.push(part);
                self.unknown += 1;
                false
            }
        }
    }
}

fn single(label: &'static str, req: Req, part: Part) -> Plan {
    Plan {
        label,
        req,
        parts: vec![part],
    }
}

fn new_section_part(label: &'static str, k: String) -> Part {
    Part {
        label,
        before: vec![(Key::Sec(k.clone()), St::Absent)],
        after: vec![(Key::Sec(k.clone()), St::Present)],
        detach: Vec::new(),
        expect: Expect::Kbid(k),
    }
}

// ---------------------------------------------------------------------------------------------
// Talking to kbdb.

/// `kbdb --db DIR` for the harness: daemons it starts stay up between rounds.
fn cmd(db: &TestDb) -> assert_cmd::Command {
    let mut c = db.cmd();
    c.env("KBDB_DAEMON_IDLE_SECS", "120");
    c
}

/// Run `kbdb ARGS --format json` with optional stdin: (success, stdout, stderr).
fn run(db: &TestDb, args: &[&str], stdin: Option<String>) -> (bool, String, String) {
    let mut c = cmd(db);
    c.args(args).args(["--format", "json"]);
    if let Some(s) = stdin {
        c.write_stdin(s);
    }
    let out = c.output().expect("kbdb runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a failed write's answer means: "may or may not have been applied" is the documented
/// answer when the daemon dies mid-request.
/// A client that found the daemon dead started a new one, which could not open the database
/// because the killed daemon had not released it yet: the write was refused, nothing applied.
/// A known client bug (docs/reliability.md, "Known problems"); counted, not failed.
fn start_race(msg: &str) -> bool {
    msg.contains("exited at start") && msg.contains("in use by another process")
}

fn failed_write(stdout: &str, stderr: &str) -> Outcome {
    let msg = serde_json::from_str::<Value>(stdout.lines().last().unwrap_or(""))
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{stdout}{stderr}"));
    if msg.contains("may or may not have been applied") {
        Outcome::Unknown(msg)
    } else if start_race(&msg) {
        Outcome::StartRace
    } else {
        Outcome::Failed(msg)
    }
}

fn exec_socket(rpc: &mut Rpc, req: &Req) -> Vec<Outcome> {
    let (method, params) = match req {
        Req::Learn(p) => ("learn", p.clone()),
        Req::LearnMany(items) => ("learn_many", json!({ "requests": items })),
        Req::Document { docid, markdown } => (
            "learn_document",
            json!({ "docid": docid, "markdown": markdown }),
        ),
        Req::Unlearn(k) => ("unlearn", json!({ "kbid": k })),
    };
    vec![match rpc.call(method, params) {
        Reply::Ok(v) => Outcome::Acked(v),
        Reply::Error(e) => Outcome::Failed(e.to_string()),
        Reply::Gone(why) => Outcome::Unknown(why),
    }]
}

fn exec_cli(db: &TestDb, tmp: &Path, plan: &Plan) -> Vec<Outcome> {
    let mut args: Vec<String> = Vec::new();
    let mut stdin = None;
    match &plan.req {
        Req::Learn(p) => {
            args.extend(["learn".into(), p["content"].as_str().unwrap().to_string()]);
            if let Some(d) = p["docid"].as_str() {
                args.extend(["--docid".into(), d.to_string()]);
            }
            if let Some(s) = p["source"].as_str() {
                args.extend(["--source".into(), s.to_string(), "--replace".into()]);
            }
            for t in p["tags"].as_array().into_iter().flatten() {
                args.extend(["--tag".into(), t.as_str().unwrap().to_string()]);
            }
        }
        Req::LearnMany(items) => {
            args.extend(["learn".into(), "--jsonl".into()]);
            stdin = Some(items.iter().map(|i| format!("{i}\n")).collect::<String>());
        }
        Req::Document { docid, markdown } => {
            let file = tmp.join(format!("{}.md", docid.replace('/', "-")));
            std::fs::write(&file, markdown).unwrap();
            args.extend([
                "learn".into(),
                "--split".into(),
                "--docid".into(),
                docid.clone(),
                "--file".into(),
                file.to_str().unwrap().to_string(),
            ]);
        }
        Req::Unlearn(k) => args.extend(["unlearn".into(), k.clone()]),
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout, stderr) = run(db, &refs, stdin);
    if let Req::LearnMany(_) = plan.req {
        // Lines printed are acknowledged, whatever happened after them.
        let printed: HashMap<String, Value> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| Some((v["kbid"].as_str()?.to_string(), v)))
            .collect();
        return plan
            .parts
            .iter()
            .map(|part| {
                let Expect::Kbid(k) = &part.expect else {
                    unreachable!("--jsonl parts are notes")
                };
                match printed.get(k) {
                    Some(v) => Outcome::Acked(v.clone()),
                    None if ok => Outcome::Failed(format!("no result line for {k}: {stdout}")),
                    None => failed_write(&stdout, &stderr),
                }
            })
            .collect();
    }
    vec![if ok {
        match serde_json::from_str(&stdout) {
            Ok(v) => Outcome::Acked(v),
            Err(e) => Outcome::Failed(format!("unreadable output ({e}): {stdout}")),
        }
    } else {
        failed_write(&stdout, &stderr)
    }]
}

// ---------------------------------------------------------------------------------------------
// One round: writers and maintenance run while the daemon is killed.

/// What each thread is doing right now (for "in flight at the kill").
type InFlight = Arc<Mutex<Vec<&'static str>>>;

fn set_in_flight(f: &InFlight, slot: usize, what: &'static str) {
    f.lock().unwrap()[slot] = what;
}

fn writer(
    db: Arc<TestDb>,
    mut m: Model,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    in_flight: InFlight,
    slot: usize,
) -> Model {
    let tmp = db.tmp.path().join(format!("md-w{}", m.w));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut rpc = if m.cli {
        None
    } else {
        match socket_path(&db).map(|s| Rpc::connect(&s, RPC_TIMEOUT)) {
            Some(Ok(r)) => Some(r),
            // Killed before we connected.
            _ => return m,
        }
    };
    while !stop.load(Ordering::SeqCst) {
        let plan = m.plan(&mut rng);
        set_in_flight(&in_flight, slot, plan.label);
        let outcomes = match &mut rpc {
            Some(rpc) => exec_socket(rpc, &plan.req),
            None => exec_cli(&db, &tmp, &plan),
        };
        set_in_flight(&in_flight, slot, "");
        let mut all_known = true;
        for (part, outcome) in plan.parts.into_iter().zip(outcomes) {
            all_known &= m.settle(part, outcome);
        }
        if !all_known {
            break;
        }
        if rng.below(4) == 0 {
            std::thread::sleep(Duration::from_millis(rng.below(4)));
        }
    }
    m
}

#[derive(Default)]
struct Maintenance {
    acked: BTreeMap<&'static str, u64>,
    /// Export folders: (path, acknowledged).
    exports: Vec<(PathBuf, bool)>,
    start_races: u64,
    errors: Vec<String>,
}

fn maintenance(
    db: Arc<TestDb>,
    mut rng: Rng,
    stop: Arc<AtomicBool>,
    in_flight: InFlight,
    slot: usize,
    round: u64,
    ops: Vec<&'static str>,
) -> Maintenance {
    let mut out = Maintenance::default();
    let exports = db.tmp.path().join("exports");
    let mut n = 0;
    while !ops.is_empty() && !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(rng.below(20)));
        let op = ops[rng.index(ops.len())];
        let (label, args): (&'static str, Vec<String>) = if op == "gc" {
            ("gc", vec!["gc".into()])
        } else if op == "rebuild" {
            ("rebuild", vec!["rebuild".into()])
        } else {
            n += 1;
            let p = exports.join(format!("r{round}-{n}"));
            out.exports.push((p.clone(), false));
            ("export", vec!["export".into(), p.to_str().unwrap().into()])
        };
        set_in_flight(&in_flight, slot, label);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, stdout, stderr) = run(&db, &refs, None);
        set_in_flight(&in_flight, slot, "");
        if ok {
            *out.acked.entry(label).or_default() += 1;
            if label == "export" {
                out.exports.last_mut().unwrap().1 = true;
            }
            continue;
        }
        // The daemon died under it: the documented answer for a long request is that the
        // connection closed; anything else is reported.
        let msg = format!("{stdout}{stderr}");
        if start_race(&msg) {
            out.start_races += 1;
        } else if !(msg.contains("stopped before answering") || msg.contains("may or may not")) {
            out.errors.push(format!("{label}: {msg}"));
        }
        break;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Verification after a restart.

#[derive(Default)]
struct Tally {
    kills: u64,
    startup_kills: u64,
    lost: u64,
    divergences: u64,
    unknown_applied: u64,
    unknown_not_applied: u64,
    in_flight_at_kill: BTreeMap<&'static str, u64>,
    maintenance_acked: BTreeMap<&'static str, u64>,
    export_leftovers: u64,
    problems: Vec<String>,
    errors: Vec<String>,
    start_races: u64,
    seen: BTreeSet<String>,
    round: u64,
    verbose: bool,
    /// A database that did not come back has been kept.
    kept: bool,
}

impl Tally {
    fn lost(&mut self, what: String) {
        self.lost += 1;
        self.report(format!("LOST: {what}"));
    }
    /// A divergence still there after the next kill is counted once.
    fn diverged(&mut self, what: String) {
        if self.seen.insert(what.clone()) {
            self.divergences += 1;
            self.report(format!("DIVERGENCE: {what}"));
        }
    }
    fn report(&mut self, what: String) {
        let line = format!("round {}: {what}", self.round);
        if self.verbose {
            eprintln!("{line}");
        }
        self.problems.push(line);
    }
}

/// The state of a key in the store, through the daemon.
fn observe(rpc: &mut Rpc, m: &Model, key: &Key, t: &mut Tally) -> St {
    let (params, id) = match key {
        Key::Sec(k) => (json!({ "kbid": k }), k),
        Key::Doc(d) => (json!({ "docid": d }), d),
    };
    match rpc.call("retrieve", params) {
        Reply::Ok(v) => match key {
            Key::Sec(k) => {
                let content = v[0]["content"].as_str().unwrap_or_default();
                let want = &m.info[k].content;
                if content != want || kbdb::kbid_of(content.as_bytes()) != *k {
                    t.diverged(format!(
                        "section {k}: content {content:?} differs from what was written ({want:?})"
                    ));
                }
                St::Present
            }
            Key::Doc(_) => St::Manifest(
                v["kbids"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| x.as_str().unwrap_or_default().to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
        },
        Reply::Error(e) if e["data"]["code"] == "not_found" => St::Absent,
        other => panic!("retrieve {id} after a restart: {other:?}"),
    }
}

/// Resolve every writer's unknown writes against the store and compare everything it knows.
fn verify_models(rpc: &mut Rpc, models: &mut [Model], t: &mut Tally) {
    for m in models.iter_mut() {
        let mut keys: BTreeSet<Key> = m.known.keys().cloned().collect();
        for p in &m.pending {
            keys.extend(p.before.iter().map(|(k, _)| k.clone()));
            keys.extend(p.after.iter().map(|(k, _)| k.clone()));
        }
        let obs: BTreeMap<Key, St> = keys
            .into_iter()
            .map(|k| {
                let s = observe(rpc, m, &k, t);
                (k, s)
            })
            .collect();
        let known = std::mem::take(&mut m.known);
        for (k, want) in known {
            let got = obs[&k].clone();
            if got != want {
                t.lost(format!(
                    "w{}: {k:?} was acknowledged as {want:?}, found {got:?}",
                    m.w
                ));
            }
            // Count each loss once.
            m.known.insert(k, got);
        }
        for p in std::mem::take(&mut m.pending) {
            let holds = |world: &[(Key, St)]| world.iter().all(|(k, s)| obs[k] == *s);
            if holds(&p.after) {
                t.unknown_applied += 1;
                m.known.extend(p.after);
                m.detached.extend(p.detach);
            } else if holds(&p.before) {
                t.unknown_not_applied += 1;
                m.known.extend(p.before);
            } else {
                let found: Vec<(&Key, &St)> = p
                    .before
                    .iter()
                    .chain(&p.after)
                    .map(|(k, _)| (k, &obs[k]))
                    .collect();
                t.diverged(format!(
                    "w{}: an unacknowledged {} is half there: before {:?}, after {:?}, found {found:?}",
                    m.w, p.label, p.before, p.after
                ));
                for (k, _) in p.before.iter().chain(&p.after) {
                    m.known.insert(k.clone(), obs[k].clone());
                }
                m.detached.extend(p.detach);
            }
        }
    }
}

/// `kbdb check` must be ok but for the orphans re-learned documents let go of.
fn verify_check(db: &TestDb, models: &mut [Model], t: &mut Tally) {
    let (_, stdout, stderr) = run(db, &["check"], None);
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("check after a restart ({e}): {stdout}{stderr}"));
    let allowed: BTreeSet<&String> = models.iter().flat_map(|m| m.detached.iter()).collect();
    let mut orphans = BTreeSet::new();
    for e in v["errors"].as_array().expect("check lists errors") {
        let entity = e["entity"].as_str().unwrap_or_default().to_string();
        if e["type"] == "orphan_section" && allowed.contains(&entity) {
            orphans.insert(entity);
        } else {
            t.diverged(format!("check: {e}"));
        }
    }
    // Collected ones are gone for good.
    for m in models.iter_mut() {
        m.detached.retain(|k| orphans.contains(k));
    }
    // `check` lists at most MAX_FINDINGS_PER_KIND findings of a kind; when the rounds' own gc
    // runs keep being cut short (a long export holds the maintenance thread), collect here, with
    // no kill under way, so every orphan stays listed and compared by kbid.
    if orphans.len() > ORPHANS_BEFORE_GC {
        let (ok, stdout, stderr) = run(db, &["gc"], None);
        assert!(ok, "gc between rounds failed: {stdout}{stderr}");
        for m in models.iter_mut() {
            m.detached.clear();
        }
    }
}

/// Orphans listed by `check` above which the harness runs `gc` itself between rounds.
const ORPHANS_BEFORE_GC: usize = 500;

/// The lexical index agrees with the store for every tracked section.
fn verify_index(rpc: &mut Rpc, models: &mut [Model], t: &mut Tally) {
    for m in models.iter_mut() {
        let members: HashMap<&String, &String> = m
            .known
            .iter()
            .filter_map(|(k, s)| match (k, s) {
                (Key::Doc(d), St::Manifest(ks)) => Some(ks.iter().map(move |x| (x, d))),
                _ => None,
            })
            .flatten()
            .collect();
        for (key, st) in &m.known {
            let Key::Sec(k) = key else { continue };
            let tok = &m.info[k].token;
            let v = match rpc.call("search", json!({ "query": tok, "limit": 5 })) {
                Reply::Ok(v) => v,
                other => panic!("search after a restart: {other:?}"),
            };
            // What the token itself finds: a search whose token matched nothing answers with the
            // nearest indexed token instead (typo tolerance, `corrected`), which is no hit of it.
            let hits: Vec<&str> = if v["corrected"].get(tok.to_lowercase()).is_some() {
                Vec::new()
            } else {
                v["items"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|i| i["kbid"].as_str()).collect())
                    .unwrap_or_default()
            };
            match st {
                St::Present => {
                    let want_docs: Vec<&str> =
                        members.get(k).map(|d| d.as_str()).into_iter().collect();
                    let got_docs: Vec<&str> = v["items"][0]["docids"]
                        .as_array()
                        .map(|a| a.iter().filter_map(|d| d.as_str()).collect())
                        .unwrap_or_default();
                    if hits != [k.as_str()] || got_docs != want_docs {
                        t.diverged(format!(
                            "index: {tok} should find {k} (in {want_docs:?}), found {hits:?} (in {got_docs:?})"
                        ));
                    }
                }
                _ => {
                    if !hits.is_empty() {
                        t.diverged(format!(
                            "index: {tok} finds {hits:?}, but section {k} is gone from the store"
                        ));
                    }
                }
            }
        }
        // Removed sections were checked once after the kill; stop tracking them.
        m.known
            .retain(|k, s| !(matches!(k, Key::Sec(_)) && *s == St::Absent));
    }
}

struct Seeds {
    kbids: Vec<String>,
    contents: HashMap<String, String>,
}

fn learn_seeds(db: &TestDb) -> Seeds {
    let mut contents = HashMap::new();
    let lines: String = (0..SEEDS)
        .map(|i| {
            let content = format!(
                "# Seed {i}\n\n{SEED_WORD} {}",
                FILLER[i % FILLER.len()].repeat(i % 5 + 1)
            );
            contents.insert(kbdb::kbid_of(content.as_bytes()), content.clone());
            format!("{}\n", json!({ "content": content, "tags": ["seed"] }))
        })
        .collect();
    let (ok, stdout, stderr) = run(db, &["learn", "--jsonl"], Some(lines));
    assert!(ok, "seeding: {stdout}{stderr}");
    let kbids: Vec<String> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["kbid"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kbids.len(), SEEDS);
    Seeds { kbids, contents }
}

fn verify_seeds(rpc: &mut Rpc, seeds: &Seeds, t: &mut Tally) {
    match rpc.call("retrieve_many", json!({ "kbids": seeds.kbids })) {
        Reply::Ok(v) => {
            if v.as_array().map(Vec::len) != Some(SEEDS) {
                t.lost(format!(
                    "seed sections: {} of {SEEDS} came back",
                    v.as_array().map_or(0, Vec::len)
                ));
            }
            for s in v.as_array().into_iter().flatten() {
                let k = s["kbid"].as_str().unwrap_or_default();
                if seeds.contents.get(k).map(String::as_str) != s["content"].as_str() {
                    t.diverged(format!("seed {k}: content differs"));
                }
            }
        }
        other => t.lost(format!("seed sections: {other:?}")),
    }
    match rpc.call("search", json!({ "query": SEED_WORD, "limit": 1 })) {
        Reply::Ok(v) if v["total"] == json!(SEEDS) => {}
        other => t.diverged(format!(
            "index: {SEED_WORD} should find the {SEEDS} seed sections: {other:?}"
        )),
    }
}

/// An export folder is complete: the catalog's counts match the files, and each content file
/// hashes to its kbid.
fn export_problem(path: &Path) -> Option<String> {
    let catalog: toml::Value = match std::fs::read_to_string(path.join("catalog.toml"))
        .map_err(|e| e.to_string())
        .and_then(|s| toml::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => return Some(format!("catalog.toml: {e}")),
    };
    let want_sections = catalog["catalog"]["sections"].as_integer().unwrap_or(-1);
    let want_documents = catalog["catalog"]["documents"].as_integer().unwrap_or(-1);
    let mut sections = 0i64;
    for dir in std::fs::read_dir(path.join("sections"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = f.path();
            if p.extension().is_some_and(|e| e == "toml") {
                sections += 1;
            } else {
                let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
                let bytes = std::fs::read(&p).unwrap_or_default();
                if kbdb::kbid_of(&bytes) != stem {
                    return Some(format!("{} does not hash to its kbid", p.display()));
                }
            }
        }
    }
    fn manifests(dir: &Path) -> i64 {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| {
                let p = e.path();
                if p.is_dir() {
                    manifests(&p)
                } else {
                    i64::from(p.extension().is_some_and(|x| x == "toml"))
                }
            })
            .sum()
    }
    let documents = manifests(&path.join("documents"));
    (sections != want_sections || documents != want_documents).then(|| {
        format!(
            "catalog says {want_sections} sections and {want_documents} documents, the folder holds {sections} and {documents}"
        )
    })
}

fn verify_exports(db: &TestDb, exports: &[(PathBuf, bool)], t: &mut Tally) {
    for (path, acked) in exports {
        if path.exists() {
            if let Some(p) = export_problem(path) {
                t.diverged(format!("export {}: {p}", path.display()));
            }
        } else if *acked {
            t.lost(format!("acknowledged export {} is missing", path.display()));
        }
    }
    let dir = db.tmp.path().join("exports");
    // What interrupted exports leave behind (hidden temporary folders next to the target).
    t.export_leftovers += std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .count() as u64;
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// The harness.

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Start the daemon the way every client does (the next command starts it), and return its pid.
/// A database that does not come back is a divergence: a copy of it is kept for study (the
/// first time), then the derived lexical index is removed (it is rebuilt from the store on open)
/// and the harness goes on.
fn restart(db: &TestDb, t: &mut Tally) -> u32 {
    let mut last = String::new();
    for attempt in 0..4 {
        if attempt == 3 {
            t.diverged(format!("no daemon starts after the kill: {last}"));
            let keep = std::env::temp_dir().join(format!("kbdb-crash-kept-round{}", t.round));
            if !t.kept && copy_dir(&db.dir, &keep).is_ok() {
                t.kept = true;
                t.report(format!(
                    "the database that did not start is kept in {}",
                    keep.display()
                ));
            }
            let _ = std::fs::remove_dir_all(db.dir.join("index").join("lexical"));
        }
        let (ok, stdout, stderr) = run(db, &["status"], None);
        if ok {
            let sock = socket_path(db).expect("the daemon's socket");
            return Rpc::connect(&sock, RPC_TIMEOUT)
                .ok()
                .and_then(|mut r| r.pid())
                .expect("the new daemon answers hello");
        }
        last = format!("{stdout}{stderr}");
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("no daemon starts, even without its lexical index: {last}");
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), target)?;
        }
    }
    Ok(())
}

/// Now and then, also kill a daemon while it starts (opening the store, replaying the index).
fn kill_during_startup(db: &TestDb, rng: &mut Rng, t: &mut Tally) {
    if socket_path(db)
        .and_then(|s| Rpc::connect(&s, RPC_TIMEOUT).ok())
        .and_then(|mut r| r.pid())
        .is_some()
    {
        return; // a client already started the next daemon
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kbdb"))
        .env("KBDB_RUNTIME_DIR", db.runtime_dir())
        .env("KBDB_DAEMON_IDLE_SECS", "120")
        .env_remove("KBDB_DIR")
        .env_remove("KBDB_EMBEDDED")
        .env_remove("KBDB_LOG")
        .args(["--db", db.dir.to_str().unwrap(), "daemon"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(rng.below(60)));
    if child.kill().is_ok() {
        t.startup_kills += 1;
    }
    child.wait().unwrap();
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let kills = env_u64("KBDB_CRASH_KILLS", 15);
    let seed = env_u64(
        "KBDB_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    );
    let max_ms = env_u64("KBDB_CRASH_MAX_MS", 250);
    let verbose = std::env::var("KBDB_CRASH_VERBOSE").is_ok_and(|v| v == "1");
    // Maintenance operations to leave out (e.g. `rebuild`), comma-separated.
    let skip = std::env::var("KBDB_CRASH_SKIP").unwrap_or_default();
    let ops: Vec<&'static str> = ["gc", "rebuild", "export"]
        .into_iter()
        .filter(|o| !skip.split(',').any(|s| s.trim() == *o))
        .collect();
    eprintln!(
        "crash harness: {kills} kills, seed {seed}, kills within {max_ms} ms (now and then {} ms), maintenance {ops:?}",
        4 * max_ms
    );
    let started = Instant::now();
    let mut rng = Rng(seed);
    // Daemons that clients start outlive those clients; reap them here once killed.
    become_subreaper();

    let db = Arc::new(TestDb::new());
    let seeds = learn_seeds(&db);
    let mut models: Vec<Model> = (0..=SOCKET_WRITERS)
        .map(|w| Model::new(w, w == SOCKET_WRITERS))
        .collect();
    let mut t = Tally {
        verbose,
        ..Tally::default()
    };
    let threads = models.len() + 1;
    let mut pid = restart(&db, &mut t);

    for round in 0..kills {
        t.round = round + 1;
        let stop = Arc::new(AtomicBool::new(false));
        let in_flight: InFlight = Arc::new(Mutex::new(vec![""; threads]));
        let writers: Vec<_> = std::mem::take(&mut models)
            .into_iter()
            .enumerate()
            .map(|(slot, m)| {
                let (db, stop, f, r) = (db.clone(), stop.clone(), in_flight.clone(), rng.fork());
                std::thread::spawn(move || writer(db, m, r, stop, f, slot))
            })
            .collect();
        let maint = {
            let (db, stop, f, r) = (db.clone(), stop.clone(), in_flight.clone(), rng.fork());
            let ops = ops.clone();
            std::thread::spawn(move || maintenance(db, r, stop, f, threads - 1, round, ops))
        };

        // Now and then a longer round, so slow maintenance gets to finish too.
        let window = if rng.below(8) == 0 {
            4 * max_ms
        } else {
            max_ms
        };
        std::thread::sleep(Duration::from_millis(rng.below(window + 1)));
        let doing: Vec<&'static str> = in_flight.lock().unwrap().clone();
        stop.store(true, Ordering::SeqCst);
        assert!(
            sigkill(pid),
            "round {round}: the daemon {pid} was no longer running when the kill came"
        );
        t.kills += 1;
        assert!(
            wait_gone(pid, Duration::from_secs(30)),
            "daemon {pid} survived SIGKILL"
        );
        for d in doing.into_iter().filter(|d| !d.is_empty()) {
            *t.in_flight_at_kill.entry(d).or_default() += 1;
        }
        models = writers.into_iter().map(|h| h.join().unwrap()).collect();
        let maint = maint.join().unwrap();
        for (k, n) in maint.acked {
            *t.maintenance_acked.entry(k).or_default() += n;
        }
        t.errors.extend(maint.errors);
        t.start_races += maint.start_races;

        if rng.below(8) == 0 {
            kill_during_startup(&db, &mut rng, &mut t);
        }
        pid = restart(&db, &mut t);
        let sock = socket_path(&db).unwrap();
        let mut rpc = Rpc::connect(&sock, RPC_TIMEOUT).unwrap();
        verify_models(&mut rpc, &mut models, &mut t);
        verify_check(&db, &mut models, &mut t);
        verify_index(&mut rpc, &mut models, &mut t);
        verify_seeds(&mut rpc, &seeds, &mut t);
        verify_exports(&db, &maint.exports, &mut t);
        for m in &mut models {
            t.errors.append(&mut m.errors);
            t.start_races += std::mem::take(&mut m.start_races);
            for b in m.bad_acks.drain(..) {
                t.diverged(b);
            }
        }
        if verbose && (round + 1) % (kills / 20).max(1) == 0 {
            eprintln!(
                "[{}/{kills} {:.0}s] acknowledged writes {}, lost {}, divergences {}",
                round + 1,
                started.elapsed().as_secs_f64(),
                models.iter().map(|m| m.acked).sum::<u64>(),
                t.lost,
                t.divergences
            );
        }
    }

    let acked: u64 = models.iter().map(|m| m.acked).sum();
    let unknown: u64 = models.iter().map(|m| m.unknown).sum();
    let mut by_label: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &models {
        for (l, n) in &m.acked_by_label {
            *by_label.entry(l).or_default() += n;
        }
    }
    let divergences = t.divergences;
    println!(
        "kills {}, acknowledged writes {acked}, lost {}, divergences {divergences}",
        t.kills + t.startup_kills,
        t.lost
    );
    println!(
        "  kills during writes {}, during start-up {}; unanswered writes {unknown} (applied {}, not applied {}, refused by the start race {}); other write errors {}",
        t.kills,
        t.startup_kills,
        t.unknown_applied,
        t.unknown_not_applied,
        t.start_races,
        t.errors.len()
    );
    println!("  acknowledged writes by kind: {by_label:?}");
    println!(
        "  acknowledged maintenance: {:?}; in flight at the kills: {:?}; leftover export temp folders: {}",
        t.maintenance_acked, t.in_flight_at_kill, t.export_leftovers
    );
    println!("  seed {seed}, {:.1} s", started.elapsed().as_secs_f64());
    for p in t.problems.iter().chain(&t.errors).take(40) {
        println!("  {p}");
    }
    assert!(alive(pid), "the last daemon still runs");
    assert_eq!(t.lost, 0, "acknowledged writes were lost (seed {seed})");
    assert_eq!(divergences, 0, "divergences (seed {seed})");
    assert!(
        t.errors.is_empty(),
        "unexpected errors (seed {seed}): {:?}",
        t.errors
    );
    assert!(acked > 0 || kills == 0, "the writers wrote");
}

/// The verification is not vacuous: a write the model holds as acknowledged but the store never
/// saw is lost, an unanswered write found half there is a divergence, and so is a section the
/// index does not find by its word.
#[test]
fn the_verification_notices_losses_half_writes_and_index_gaps() {
    let db = TestDb::new();
    restart(&db, &mut Tally::default());
    let mut rpc = Rpc::connect(&socket_path(&db).unwrap(), RPC_TIMEOUT).unwrap();
    let mut rng = Rng(7);
    let mut m = Model::new(0, false);
    let mut learn = |m: &mut Model, rng: &mut Rng| {
        let (k, p) = m.new_note(rng);
        let Reply::Ok(v) = rpc.call("learn", p) else {
            panic!("learn")
        };
        assert_eq!(v["kbid"], json!(k));
        k
    };
    // Acknowledged and there: fine.
    let fine = learn(&mut m, &mut rng);
    m.known.insert(Key::Sec(fine), St::Present);
    // "Acknowledged" but never written: lost.
    let (never, _) = m.new_note(&mut rng);
    m.known.insert(Key::Sec(never), St::Present);
    // Unanswered, and only half of it there: a divergence.
    let half = learn(&mut m, &mut rng);
    let (missing, _) = m.new_note(&mut rng);
    let keys = [Key::Sec(half), Key::Sec(missing)];
    m.pending.push(Part {
        label: "learn_many",
        before: keys.iter().map(|k| (k.clone(), St::Absent)).collect(),
        after: keys.iter().map(|k| (k.clone(), St::Present)).collect(),
        detach: Vec::new(),
        expect: Expect::Removed,
    });
    // There, but the index does not find it by the word the model expects: a divergence.
    let unfound = learn(&mut m, &mut rng);
    m.info.get_mut(&unfound).unwrap().token = token(0, 999_999);
    m.known.insert(Key::Sec(unfound), St::Present);

    let mut models = vec![m];
    let mut t = Tally::default();
    drop(rpc);
    let mut rpc = Rpc::connect(&socket_path(&db).unwrap(), RPC_TIMEOUT).unwrap();
    verify_models(&mut rpc, &mut models, &mut t);
    verify_check(&db, &mut models, &mut t);
    verify_index(&mut rpc, &mut models, &mut t);
    assert_eq!(t.lost, 1, "{:#?}", t.problems);
    assert_eq!(t.divergences, 2, "{:#?}", t.problems);
    assert!(t.problems[1].contains("half there"), "{:#?}", t.problems);
    assert!(t.problems[2].contains("index"), "{:#?}", t.problems);
}
