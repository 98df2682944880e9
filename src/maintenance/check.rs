//! `check`: verify the store against itself and the lexical index (docs/maintenance.md).

use std::collections::{BTreeMap, HashMap, HashSet};

use redb::{ReadTransaction, ReadableMultimapTable, ReadableTable, ReadableTableMetadata};

use crate::error::Result;
use crate::references;
use crate::store::tables::{SECTION_DOCS, TAGS};
use crate::store::txn::ReadTables;
use crate::text::markers::Target;
use crate::types::kbid;
use crate::types::records::{DocumentRecord, SectionRecord, decode};
use crate::types::section_type::{TypeKind, parse_type};
use crate::types::{CheckFinding, CheckResult};

/// Findings of one kind are capped so a badly damaged store still gives a readable report.
pub const MAX_FINDINGS_PER_KIND: usize = 1000;

#[derive(Default)]
struct Report {
    errors: Vec<CheckFinding>,
    warnings: Vec<CheckFinding>,
    /// Findings per kind, and whether the kind is a warning (for the "N more" entry).
    per_kind: HashMap<&'static str, (usize, bool)>,
    /// Every finding once: a section linking twice to the same missing document has two
    /// markers, and would otherwise be listed twice with the same words.
    seen: HashSet<(&'static str, String, String)>,
}

impl Report {
    fn push(&mut self, warning: bool, kind: &'static str, entity: &str, detail: String) {
        if !self.seen.insert((kind, entity.to_string(), detail.clone())) {
            return;
        }
        let (n, _) = self.per_kind.entry(kind).or_insert((0, warning));
        *n += 1;
        if *n > MAX_FINDINGS_PER_KIND {
            return;
        }
        let f = CheckFinding {
            kind: kind.to_string(),
            entity: entity.to_string(),
            detail,
        };
        if warning {
            self.warnings.push(f);
        } else {
            self.errors.push(f);
        }
    }
    /// A part of the walk that failed (an error from redb) or panicked inside redb (a damaged
    /// page: redb can reach `unreachable!()`): a `damaged` finding naming its tables; the other
    /// parts go on.
    fn damaged_if(
        &mut self,
        tables: &'static str,
        outcome: std::result::Result<Result<()>, String>,
    ) {
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.error(
                "damaged",
                tables,
                format!("reading it failed: {e}; what it holds was not all checked"),
            ),
            Err(panic) => self.error(
                "damaged",
                tables,
                format!(
                    "reading it stopped inside the store ({panic}): the database file is damaged \
                     there; what it holds was not all checked"
                ),
            ),
        }
    }

    /// The result: the "N more" entry of each kind listed past the cap, in its kind's list.
    fn finish(
        mut self,
        sections_checked: u64,
        documents_checked: u64,
        references_checked: u64,
    ) -> CheckResult {
        let mut capped: Vec<(&'static str, usize, bool)> = self
            .per_kind
            .iter()
            .filter(|(_, (n, _))| *n > MAX_FINDINGS_PER_KIND)
            .map(|(kind, (n, warning))| (*kind, *n, *warning))
            .collect();
        capped.sort();
        for (kind, n, warning) in capped {
            // In the list of its kind: more warnings are still no error.
            let list = if warning {
                &mut self.warnings
            } else {
                &mut self.errors
            };
            list.push(CheckFinding {
                kind: kind.to_string(),
                entity: "*".into(),
                detail: format!("{} more of this kind not listed", n - MAX_FINDINGS_PER_KIND),
            });
        }
        CheckResult {
            ok: self.errors.is_empty(),
            errors: self.errors,
            warnings: self.warnings,
            sections_checked,
            documents_checked,
            references_checked,
            elapsed_ms: 0.0,
        }
    }

    fn error(&mut self, kind: &'static str, entity: &str, detail: String) {
        self.push(false, kind, entity, detail)
    }
    fn warning(&mut self, kind: &'static str, entity: &str, detail: String) {
        self.push(true, kind, entity, detail)
    }
}

/// Documents per index segment whose stored fields `check` reads back (evenly spread, the last
/// one included): enough to touch every block of a segment's document store in a usual index,
/// cheap next to reading every section of the store.
pub const STORED_SAMPLE_PER_SEGMENT: u32 = 256;

/// What `check` reads of the lexical index, under its lock: every live document's `kbid_key`
/// (fast field), and for a sample, what reading its stored document gives. Damage inside the
/// index (a doc store that fails or panics) is kept as a finding, never an error of `check`.
pub(crate) struct IndexView {
    pub keys: Vec<u64>,
    /// (`kbid_key` of the document, its stored kbid or why it could not be read).
    pub stored: Vec<(u64, std::result::Result<String, String>)>,
    /// Why the keys themselves could not be read.
    pub unreadable: Option<String>,
    /// What the index holds of each section besides its kbid (by `kbid_key`), or why it could
    /// not be read.
    pub fields: std::result::Result<HashMap<u64, IndexedFields>, String>,
}

impl IndexView {
    pub(crate) fn read(lex: &crate::index::lexical::LexicalIndex) -> IndexView {
        let keys = match guarded(|| lex.indexed_keys()) {
            Ok(Ok(keys)) => keys,
            Ok(Err(e)) => return IndexView::unreadable(e.to_string()),
            Err(panic) => return IndexView::unreadable(panic),
        };
        let stored = guarded(|| sample_stored(lex)).unwrap_or_else(|panic| vec![(0, Err(panic))]);
        let fields = guarded(|| indexed_fields(lex)).and_then(|r| r);
        IndexView {
            keys,
            stored,
            unreadable: None,
            fields,
        }
    }

    fn unreadable(why: String) -> IndexView {
        IndexView {
            keys: Vec::new(),
            stored: Vec::new(),
            unreadable: Some(why.clone()),
            fields: Err(why),
        }
    }
}

/// What the lexical index holds of one section's record: the terms of each field it indexes
/// from the record folded into one hash, and the creation time. (Its documents are left out:
/// the memberships are checked against the manifests, and a store changed by other means can
/// leave the index's copy behind, which is no damage.) The index is written from the record, so it is the one other copy of a
/// record's type, title, description, tags and creation time: a record damaged in place — still
/// decodable, so nothing else notices — no longer matches it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexedFields {
    pub section_type: u64,
    pub heading: u64,
    pub description: u64,
    pub tags: u64,
    pub created_ms: Option<i64>,
}

/// Fold one term into a field's hash. Terms come in byte order (the index's term dictionary
/// order), so the same set of terms gives the same hash on both sides.
fn fold(acc: u64, term: &[u8]) -> u64 {
    crate::text::shingles::mix64(acc ^ crate::text::shingles::fnv1a(term))
}

fn fold_all<'a>(terms: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let set: std::collections::BTreeSet<&[u8]> = terms.into_iter().collect();
    set.into_iter().fold(0, fold)
}

/// Where a field's hash goes in [`IndexedFields`].
type FieldSlot = fn(&mut IndexedFields) -> &mut u64;

/// The index's fields of every live document, by `kbid_key`: each field's term dictionary is
/// walked once with its postings (a pass over what the index holds of records, not of content).
fn indexed_fields(
    lex: &crate::index::lexical::LexicalIndex,
) -> std::result::Result<HashMap<u64, IndexedFields>, String> {
    use tantivy::schema::IndexRecordOption;
    use tantivy::{DocSet, TERMINATED};
    let f = lex.fields;
    let searcher = lex.searcher();
    let mut out = HashMap::with_capacity(searcher.num_docs() as usize);
    for segment in searcher.segment_readers() {
        let keys = segment
            .fast_fields()
            .u64("kbid_key")
            .map_err(|e| format!("kbid_key cannot be read: {e}"))?;
        let created = segment
            .fast_fields()
            .i64("created_at")
            .map_err(|e| format!("created_at cannot be read: {e}"))?;
        let mut docs = vec![IndexedFields::default(); segment.max_doc() as usize];
        let slots: [(tantivy::schema::Field, FieldSlot); 4] = [
            (f.section_type, |d| &mut d.section_type),
            (f.heading, |d| &mut d.heading),
            (f.description, |d| &mut d.description),
            (f.tags, |d| &mut d.tags),
        ];
        for (field, slot) in slots {
            let inverted = segment
                .inverted_index(field)
                .map_err(|e| format!("a field's terms cannot be read: {e}"))?;
            let mut terms = inverted
                .terms()
                .stream()
                .map_err(|e| format!("a field's terms cannot be read: {e}"))?;
            while terms.advance() {
                let mut postings = inverted
                    .read_postings_from_terminfo(terms.value(), IndexRecordOption::Basic)
                    .map_err(|e| format!("a term's postings cannot be read: {e}"))?;
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if let Some(d) = docs.get_mut(doc as usize) {
                        let acc = slot(d);
                        *acc = fold(*acc, terms.key());
                    }
                    doc = postings.advance();
                }
            }
        }
        let alive = segment.alive_bitset();
        for (doc, mut d) in docs.into_iter().enumerate() {
            let doc = doc as u32;
            if alive.is_some_and(|a| !a.is_alive(doc)) {
                continue;
            }
            if let Some(k) = keys.first(doc) {
                d.created_ms = created.first(doc);
                out.insert(k, d);
            }
        }
    }
    Ok(out)
}

/// What the index should hold of a section, from its record (as `LexicalIndex::document`
/// indexes it).
fn expected_fields(
    rec: &SectionRecord,
    analyzer: &mut tantivy::tokenizer::TextAnalyzer,
) -> IndexedFields {
    let mut words = |text: Option<&str>| {
        let mut terms = Vec::new();
        if let Some(text) = text {
            let mut stream = analyzer.token_stream(text);
            while stream.advance() {
                terms.push(stream.token().text.clone());
            }
        }
        fold_all(terms.iter().map(|t| t.as_bytes()))
    };
    IndexedFields {
        section_type: fold(0, rec.section_type.as_bytes()),
        heading: words(rec.title.as_deref()),
        description: words(rec.description.as_deref()),
        tags: fold_all(rec.tags.iter().map(|t| t.as_bytes())),
        created_ms: Some(created_ms(&rec.created_at).unwrap_or(0)),
    }
}

fn created_ms(at: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|d| d.timestamp_millis())
}

/// The fields of a section record that differ from what the lexical index holds for it, each
/// with the record's value.
fn record_differences(
    rec: &SectionRecord,
    want: &IndexedFields,
    have: &IndexedFields,
) -> Vec<String> {
    let quoted = |v: Option<&str>| match v {
        Some(v) => format!("{v:?}"),
        None => "none".to_string(),
    };
    let mut out = Vec::new();
    if want.section_type != have.section_type {
        out.push(format!("type {:?}", rec.section_type));
    }
    if want.heading != have.heading {
        out.push(format!("title {}", quoted(rec.title.as_deref())));
    }
    if want.description != have.description {
        out.push(format!(
            "description {}",
            quoted(rec.description.as_deref())
        ));
    }
    if want.tags != have.tags {
        out.push(format!("tags {:?}", rec.tags));
    }
    if want.created_ms != have.created_ms {
        out.push(format!("created_at {:?}", rec.created_at));
    }
    out
}

/// The stored kbid of a sample of live documents of each segment, beside its `kbid_key`.
fn sample_stored(
    lex: &crate::index::lexical::LexicalIndex,
) -> Vec<(u64, std::result::Result<String, String>)> {
    use tantivy::schema::Value;
    use tantivy::{DocAddress, TantivyDocument};
    let searcher = lex.searcher();
    let mut out = Vec::new();
    for (ord, segment) in searcher.segment_readers().iter().enumerate() {
        let keys = match segment.fast_fields().u64("kbid_key") {
            Ok(k) => k,
            Err(e) => {
                out.push((0, Err(format!("kbid_key cannot be read: {e}"))));
                continue;
            }
        };
        let max = segment.max_doc();
        let step = (max / STORED_SAMPLE_PER_SEGMENT).max(1);
        let alive = segment.alive_bitset();
        let docs = (0..max).step_by(step as usize).chain(max.checked_sub(1));
        for doc in docs {
            if alive.is_some_and(|a| !a.is_alive(doc)) {
                continue;
            }
            let key = keys.first(doc).unwrap_or(0);
            let read =
                guarded(|| searcher.doc::<TantivyDocument>(DocAddress::new(ord as u32, doc)))
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .and_then(|d| {
                        d.get_first(lex.fields.kbid)
                            .and_then(|v| v.as_str())
                            .map(str::to_string)
                            .ok_or_else(|| "the stored document has no kbid".to_string())
                    });
            out.push((key, read));
        }
    }
    out.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    out
}

/// Run `f`, turning a panic inside it (redb or tantivy meeting damaged bytes) into an error
/// message: `check` exists to report damage, so it must not die of it.
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into())
    })
}

/// Run every check inside one read transaction. `index` is what was read of the lexical index
/// (None: skip the index comparison).
pub(crate) fn check(
    txn: &ReadTransaction,
    index: Option<IndexView>,
    progress: &dyn Fn(u64, u64),
) -> Result<CheckResult> {
    let mut r = Report::default();
    let t = match guarded(|| ReadTables::open(txn)) {
        Ok(Ok(t)) => t,
        outcome => {
            r.damaged_if("tables", outcome.map(|o| o.map(|_| ())));
            return Ok(r.finish(0, 0, 0));
        }
    };
    let mut sections_checked = 0u64;
    let mut headings: HashMap<String, Option<String>> = HashMap::new();
    let mut store_keys: HashMap<u64, String> = HashMap::new();
    // Content sequence → the section naming it; how many of those rows exist.
    let mut content_owners: HashMap<u64, String> = HashMap::new();
    let mut named_rows = 0u64;
    // Source key → the sections under it (in kbid order, as the records are read).
    let mut source_keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Sections no document holds that were not learned on their own: a document's history.
    let mut detached: HashSet<String> = HashSet::new();
    // What the lexical index holds of each section, to compare the records with.
    let indexed = match index.as_ref().map(|i| &i.fields) {
        Some(Ok(fields)) => Some(fields),
        Some(Err(why)) => {
            r.error(
                "index_mismatch",
                "lexical index",
                format!("the lexical index's fields cannot be read: {why} (run rebuild)"),
            );
            None
        }
        None => None,
    };
    let mut analyzer = crate::index::analyzer::analyzer();
    // (tag, kbid) pairs the records name, for the tags table.
    let mut tagged: HashSet<(String, String)> = HashSet::new();
    // Sections whose record cannot be read (reported once, as such): their tags are unknown.
    let mut unreadable: HashSet<String> = HashSet::new();

    let outcome = guarded(|| -> Result<()> {
        let total = t.sections.len()?;
        for row in t.sections.iter()? {
            let (k, v) = row?;
            let id = k.value();
            sections_checked += 1;
            if sections_checked.is_multiple_of(1024) {
                progress(sections_checked, total);
            }
            // The section is in the store even when its record is damaged: the index holding
            // it is no second finding.
            store_keys.insert(crate::index::lexical::kbid_key(id), id.to_string());
            let rec: SectionRecord = match decode("sections", id, v.value()) {
                Ok(rec) => rec,
                Err(e) => {
                    r.error(
                        "checksum_mismatch",
                        id,
                        format!("section record unreadable: {e}"),
                    );
                    unreadable.insert(id.to_string());
                    continue;
                }
            };
            headings.insert(id.to_string(), rec.title.clone());
            if let Some(key) = &rec.source_key {
                source_keys
                    .entry(key.clone())
                    .or_default()
                    .push(id.to_string());
            }
            let shared = match rec.content_seq {
                0 => None,
                seq => content_owners.insert(seq, id.to_string()),
            };
            if let Some(other) = &shared {
                r.error(
                    "checksum_mismatch",
                    id,
                    format!(
                        "its content row {} is also named by {other}",
                        rec.content_seq
                    ),
                );
            }
            let Some(bytes) = t.content_unverified_of(&rec)? else {
                r.error("checksum_mismatch", id, "content is missing".into());
                continue;
            };
            if shared.is_none() {
                named_rows += 1;
            }
            let digest = kbid::sha256(&bytes);
            if kbid::hex(&digest) != rec.checksum {
                r.error(
                    "checksum_mismatch",
                    id,
                    format!(
                        "content hashes to {} but the stored checksum is {}",
                        kbid::hex(&digest),
                        rec.checksum
                    ),
                );
            } else if kbid::encode_kbid(&digest) != id {
                r.error(
                    "checksum_mismatch",
                    id,
                    format!(
                        "content hashes to kbid {}, not to its own kbid",
                        kbid::encode_kbid(&digest)
                    ),
                );
            }
            if rec.size != bytes.len() as u64 {
                r.error(
                    "checksum_mismatch",
                    id,
                    format!(
                        "stored size {} but content is {} bytes",
                        rec.size,
                        bytes.len()
                    ),
                );
            }
            if let Some(problem) = type_problem(&rec.section_type, &bytes) {
                r.error("type_mismatch", id, problem);
            }
            for (name, at) in [
                ("created_at", &rec.created_at),
                ("updated_at", &rec.updated_at),
            ] {
                if created_ms(at).is_none() {
                    r.error(
                        "record_mismatch",
                        id,
                        format!("the section record's {name} {at:?} is not a time"),
                    );
                }
            }
            for tag in &rec.tags {
                tagged.insert((tag.clone(), id.to_string()));
            }
            let docids = t.docs_of(id)?;
            if let Some(have) = indexed.and_then(|i| i.get(&crate::index::lexical::kbid_key(id))) {
                let want = expected_fields(&rec, &mut analyzer);
                let differ = record_differences(&rec, &want, have);
                if !differ.is_empty() {
                    r.error(
                        "record_mismatch",
                        id,
                        format!(
                            "what the store holds of this section ({}) is not what the lexical \
                             index holds for it (indexed from the store when the section was \
                             written): the section record is damaged, or the index is. Compare the \
                             section with an export before a `rebuild`, which indexes the record \
                             as it is now",
                            differ.join(", ")
                        ),
                    );
                }
            }
            if !rec.standalone && docids.is_empty() {
                // What an edit or a re-sync leaves behind: routine, not damage.
                detached.insert(id.to_string());
                r.warning(
                "orphan_section",
                id,
                "no document holds it any more (an edit or re-sync let go of it) and it was not \
                 learned on its own: gc removes it"
                    .into(),
            );
            }
        }
        progress(sections_checked, total);
        Ok(())
    });
    r.damaged_if("sections, section_content, section_docs", outcome);
    let outcome = guarded(|| -> Result<()> {
        let content_rows = t.content.len()?;
        if content_rows > named_rows {
            r.warning(
                "orphan_content",
                "*",
                format!(
                    "{} content row(s) named by no section: space only, nothing reads them",
                    content_rows - named_rows
                ),
            );
        }

        Ok(())
    });
    r.damaged_if("section_content", outcome);
    // The tags table holds exactly the (tag, section) pairs the records name.
    let outcome = guarded(|| -> Result<()> {
        let tags = txn.open_multimap_table(TAGS)?;
        let mut listed = 0usize;
        for row in tags.iter()? {
            let (tag, kbids) = row?;
            for kbid in kbids {
                let kbid = kbid?;
                let pair = (tag.value().to_string(), kbid.value().to_string());
                if tagged.contains(&pair) {
                    listed += 1;
                } else if !unreadable.contains(&pair.1) {
                    r.error(
                        "record_mismatch",
                        &pair.1,
                        format!(
                            "the tags table gives the section the tag {:?}, which its record does not have",
                            pair.0
                        ),
                    );
                }
            }
        }
        if listed < tagged.len() {
            for (tag, kbid) in &tagged {
                if !crate::store::txn::multimap_values(&tags, tag.as_str())?.contains(kbid) {
                    r.error(
                        "record_mismatch",
                        kbid,
                        format!(
                            "the section record has the tag {tag:?}, which the tags table does not list for it"
                        ),
                    );
                }
            }
        }
        Ok(())
    });
    r.damaged_if("tags", outcome);

    // Documents: manifests against sections and the membership table, both ways.
    let mut documents_checked = 0u64;
    let mut docs: HashMap<String, DocumentRecord> = HashMap::new();
    let outcome = guarded(|| -> Result<()> {
        for row in t.documents.iter()? {
            let (k, v) = row?;
            let docid = k.value();
            documents_checked += 1;
            let doc: DocumentRecord = match decode("documents", docid, v.value()) {
                Ok(d) => d,
                Err(e) => {
                    r.error(
                        "orphan_document",
                        docid,
                        format!("manifest unreadable: {e}"),
                    );
                    continue;
                }
            };
            let mut present = 0;
            for k in &doc.kbids {
                if headings.contains_key(k) {
                    present += 1;
                } else {
                    r.error(
                        "broken_reference",
                        docid,
                        format!("the manifest lists section {k}, which does not exist"),
                    );
                }
            }
            if present == 0 {
                r.error(
                    "orphan_document",
                    docid,
                    "the document holds no existing section".into(),
                );
            }
            let listed: HashSet<&String> = doc.kbids.iter().collect();
            for k in &listed {
                if !t.docs_of(k)?.iter().any(|d| d == docid) {
                    r.error(
                        "manifest_mismatch",
                        docid,
                        format!("the manifest lists {k} but the membership table does not"),
                    );
                }
            }
            docs.insert(docid.to_string(), doc);
        }
        // The other way: each membership row names a document whose manifest lists the section.
        let listed: HashSet<(&str, &str)> = docs
            .iter()
            .flat_map(|(docid, doc)| doc.kbids.iter().map(move |k| (docid.as_str(), k.as_str())))
            .collect();
        for row in txn.open_multimap_table(SECTION_DOCS)?.iter()? {
            let (k, values) = row?;
            let kbid = k.value();
            for docid in values {
                let docid = docid?;
                let docid = docid.value();
                if !listed.contains(&(docid, kbid)) {
                    r.error(
                        "manifest_mismatch",
                        docid,
                        format!(
                            "the membership table holds {kbid} but the manifest does not list it"
                        ),
                    );
                }
            }
        }
        // And each section record's first document (`SectionRecord::doc`).
        for row in t.sections.iter()? {
            let (k, v) = row?;
            let kbid = k.value();
            let Ok(rec) = decode::<SectionRecord>("sections", kbid, v.value()) else {
                // Reported by the walk of the sections.
                continue;
            };
            if let Some(docid) = rec.doc.as_deref()
                && !listed.contains(&(docid, kbid))
            {
                r.error(
                    "manifest_mismatch",
                    docid,
                    format!("the record of {kbid} names it as its document but the manifest does not list it"),
                );
            }
        }
        Ok(())
    });
    r.damaged_if("documents, section_docs", outcome);

    // References: every marker must resolve; cycles are reported as warnings.
    let mut references_checked = 0u64;
    let mut graph: HashMap<String, Vec<String>> = HashMap::new();
    let outcome = guarded(|| -> Result<()> {
        for row in t.refs_out.iter()? {
            let (k, v) = row?;
            let (source, _) = k.value();
            references_checked += 1;
            if detached.contains(source) {
                // An earlier version's links: its targets may have moved on since, as it has.
                continue;
            }
            let m: crate::text::markers::Marker = decode("refs_out", source, v.value())?;
            let resolved = match &m.target {
                Target::Section(kbid) => {
                    if headings.contains_key(kbid) {
                        Some(Some(kbid.clone()))
                    } else {
                        None
                    }
                }
                Target::Document { docid, anchor } => match (docs.get(docid), anchor) {
                    (None, _) => None,
                    (Some(_), None) => Some(None),
                    (Some(doc), Some(a)) => references::section_for_anchor(doc, a, |k| {
                        Ok(headings.get(k).cloned().flatten())
                    })?
                    .map(Some),
                },
            };
            match resolved {
                None => r.error(
                    "broken_reference",
                    source,
                    format!(
                        "{} ({}) does not exist (yet)",
                        m.target.uri(),
                        m.marker_type.as_str()
                    ),
                ),
                Some(Some(target)) => graph.entry(source.to_string()).or_default().push(target),
                Some(None) => {}
            }
        }
        Ok(())
    });
    r.damaged_if("refs_out", outcome);
    for cycle in cycles(&graph) {
        let entity = cycle.iter().min().cloned().unwrap_or_default();
        r.push(
            true,
            "circular_reference",
            &entity,
            format!(
                "{} sections reference each other in a cycle: {}{}",
                cycle.len(),
                cycle[..cycle.len().min(10)].join(", "),
                if cycle.len() > 10 { ", …" } else { "" }
            ),
        );
    }

    // Divergent content: several live sections under one source key. The versions a document's
    // edits let go of (detached) are its history, not a contradiction; between live sections it
    // is a conflict to resolve (learn with replace), not damage: a warning.
    let outcome = guarded(|| -> Result<()> {
        for (key, kbids) in &source_keys {
            let kbids: Vec<&String> = kbids.iter().filter(|k| !detached.contains(*k)).collect();
            if kbids.len() < 2 {
                continue;
            }
            // Sections of one document may share a derived key (a heading repeated in the same
            // document): those are parts, not contradicting versions.
            let mut common: Option<HashSet<String>> = None;
            for k in &kbids {
                let docs: HashSet<String> = t.docs_of(k)?.into_iter().collect();
                common = Some(match common {
                    None => docs,
                    Some(c) => c.intersection(&docs).cloned().collect(),
                });
            }
            let same_document = common.is_some_and(|c| !c.is_empty());
            if !same_document {
                let list: Vec<&str> = kbids.iter().map(|k| k.as_str()).collect();
                r.warning(
                "divergent_content",
                key,
                format!(
                    "{} sections share this source key with different content: {} (learn with replace to supersede)",
                    kbids.len(),
                    list.join(", ")
                ),
            );
            }
        }

        Ok(())
    });
    r.damaged_if("section_docs", outcome);

    // The lexical index must hold each section exactly once, and its stored fields must read
    // back as the sections they index (a search shows a hit by its stored kbid).
    if let Some(index) = index {
        if let Some(why) = &index.unreadable {
            r.error(
                "index_mismatch",
                "lexical index",
                format!("the lexical index cannot be read: {why} (run rebuild)"),
            );
        }
        let entity = |k: u64| match store_keys.get(&k) {
            Some(kbid) => kbid.clone(),
            None if k == 0 => "lexical index".to_string(),
            None => format!("index-key:{k:016x}"),
        };
        for (k, stored) in &index.stored {
            match stored {
                Err(why) => r.error(
                    "index_mismatch",
                    &entity(*k),
                    format!(
                        "the lexical index's stored fields cannot be read: {why} (run rebuild)"
                    ),
                ),
                Ok(kbid) if crate::index::lexical::kbid_key(kbid) != *k => r.error(
                    "index_mismatch",
                    &entity(*k),
                    format!(
                        "the lexical index's stored kbid {kbid:?} is not the section it indexes (run rebuild)"
                    ),
                ),
                Ok(_) => {}
            }
        }
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for k in index.keys {
            *seen.entry(k).or_default() += 1;
        }
        let mut missing: Vec<&String> = store_keys
            .iter()
            .filter(|(k, _)| !seen.contains_key(k))
            .map(|(_, id)| id)
            .collect();
        missing.sort();
        for id in missing {
            r.error(
                "index_mismatch",
                id,
                "the section is missing from the lexical index (run rebuild)".into(),
            );
        }
        let mut extra: Vec<(u64, usize)> = seen
            .into_iter()
            .filter(|(k, n)| !store_keys.contains_key(k) || *n > 1)
            .collect();
        extra.sort();
        for (k, n) in extra {
            match store_keys.get(&k) {
                Some(id) => r.error(
                    "index_mismatch",
                    id,
                    format!("the section is in the lexical index {n} times (run rebuild)"),
                ),
                None => r.error(
                    "index_mismatch",
                    &format!("index-key:{k:016x}"),
                    "the lexical index holds a section the store does not (run rebuild)".into(),
                ),
            }
        }
    }

    Ok(r.finish(sections_checked, documents_checked, references_checked))
}

/// Why stored bytes do not fit their declared type, if they do not.
pub(crate) fn type_problem(section_type: &str, bytes: &[u8]) -> Option<String> {
    let kind = match parse_type(Some(section_type)) {
        Ok((_, kind)) => kind,
        Err(e) => return Some(format!("the stored type is not valid: {e}")),
    };
    match kind {
        TypeKind::Image => (!crate::learn::image_signature_ok(section_type, bytes))
            .then(|| format!("the bytes are not a {section_type} image")),
        TypeKind::Text | TypeKind::Json => {
            let Ok(text) = std::str::from_utf8(bytes) else {
                return Some(format!("{section_type} content is not valid UTF-8"));
            };
            if kind == TypeKind::Json
                && serde_json::from_str::<serde::de::IgnoredAny>(text).is_err()
            {
                return Some("application/json content is not valid JSON".into());
            }
            None
        }
    }
}

/// The strongly connected components of more than one node (and self-loops): reference
/// cycles, each listed from its smallest kbid in edge order. Iterative Tarjan: no recursion,
/// whatever the graph's depth.
fn cycles(graph: &HashMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let mut nodes: Vec<&String> = graph.keys().collect();
    nodes.sort();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut low: HashMap<&str, usize> = HashMap::new();
    let mut on_stack: HashSet<&str> = HashSet::new();
    let mut stack: Vec<&str> = Vec::new();
    let mut next = 0usize;
    let mut out = Vec::new();
    let empty = Vec::new();
    for &start in &nodes {
        if index.contains_key(start.as_str()) {
            continue;
        }
        // (node, next edge to visit)
        let mut work: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
        while let Some(&mut (v, ref mut ei)) = work.last_mut() {
            if *ei == 0 && !index.contains_key(v) {
                index.insert(v, next);
                low.insert(v, next);
                next += 1;
                stack.push(v);
                on_stack.insert(v);
            }
            let edges = graph.get(v).unwrap_or(&empty);
            if *ei < edges.len() {
                let w = edges[*ei].as_str();
                *ei += 1;
                if !index.contains_key(w) {
                    work.push((w, 0));
                } else if on_stack.contains(w) {
                    let lw = index[w];
                    let lv = low[v];
                    low.insert(v, lv.min(lw));
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                let lv = low[v];
                let lp = low[parent];
                low.insert(parent, lp.min(lv));
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                let self_loop = graph.get(v).is_some_and(|e| e.iter().any(|x| x == v));
                if comp.len() > 1 || self_loop {
                    comp.sort();
                    out.push(comp);
                }
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_found_once_each() {
        let g: HashMap<String, Vec<String>> = [
            ("a", vec!["b"]),
            ("b", vec!["a", "c"]),
            ("c", vec!["d"]),
            ("d", vec![]),
            ("e", vec!["e"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(
            cycles(&g),
            vec![vec!["a".to_string(), "b".into()], vec!["e".to_string()]]
        );
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 200_000;
        let g: HashMap<String, Vec<String>> = (0..n)
            .map(|i| (i.to_string(), vec![((i + 1) % n).to_string()]))
            .collect();
        let c = cycles(&g);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].len(), n);
    }
}
