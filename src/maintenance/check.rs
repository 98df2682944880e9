//! `check`: verify the store against itself and the lexical index (docs/maintenance.md).

use std::collections::{BTreeMap, HashMap, HashSet};

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};

use crate::error::Result;
use crate::model::kbid;
use crate::model::records::{DocumentRecord, SectionRecord, decode};
use crate::model::section_type::{TypeKind, parse_type};
use crate::model::{CheckFinding, CheckResult};
use crate::references;
use crate::store::tables::DOC_SECTIONS;
use crate::store::txn::ReadTables;
use crate::text::markers::Target;

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
    fn error(&mut self, kind: &'static str, entity: &str, detail: String) {
        self.push(false, kind, entity, detail)
    }
    fn warning(&mut self, kind: &'static str, entity: &str, detail: String) {
        self.push(true, kind, entity, detail)
    }
}

/// Run every check inside one read transaction. `indexed_keys` are the lexical index's
/// `kbid_key`s (None: skip the index comparison).
pub(crate) fn check(
    txn: &ReadTransaction,
    indexed_keys: Option<Vec<u64>>,
    progress: &dyn Fn(u64, u64),
) -> Result<CheckResult> {
    let t = ReadTables::open(txn)?;
    let mut r = Report::default();
    let total = t.sections.len()?;
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

    for row in t.sections.iter()? {
        let (k, v) = row?;
        let id = k.value();
        sections_checked += 1;
        if sections_checked.is_multiple_of(1024) {
            progress(sections_checked, total);
        }
        let rec: SectionRecord = match decode("sections", id, v.value()) {
            Ok(rec) => rec,
            Err(e) => {
                r.error(
                    "checksum_mismatch",
                    id,
                    format!("section record unreadable: {e}"),
                );
                continue;
            }
        };
        store_keys.insert(crate::index::lexical::kbid_key(id), id.to_string());
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
        if !rec.standalone && t.docs_of(id)?.is_empty() {
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

    // Documents: manifests against sections and the membership tables.
    let doc_sections = txn.open_multimap_table(DOC_SECTIONS)?;
    let mut documents_checked = 0u64;
    let mut docs: HashMap<String, DocumentRecord> = HashMap::new();
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
        let members: HashSet<String> = crate::store::txn::multimap_values(&doc_sections, docid)?
            .into_iter()
            .collect();
        for k in &listed {
            if !members.contains(*k) {
                r.error(
                    "manifest_mismatch",
                    docid,
                    format!("the manifest lists {k} but the membership table does not"),
                );
            } else if !t.docs_of(k)?.iter().any(|d| d == docid) {
                r.error(
                    "manifest_mismatch",
                    docid,
                    format!("{k} is a member, but its section-side membership is missing"),
                );
            }
        }
        for k in &members {
            if !listed.contains(k) {
                r.error(
                    "manifest_mismatch",
                    docid,
                    format!("the membership table holds {k} but the manifest does not list it"),
                );
            }
        }
        docs.insert(docid.to_string(), doc);
    }

    // References: every marker must resolve; cycles are reported as warnings.
    let mut references_checked = 0u64;
    let mut graph: HashMap<String, Vec<String>> = HashMap::new();
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

    // The lexical index must hold each section exactly once.
    if let Some(keys) = indexed_keys {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for k in keys {
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

    let mut capped: Vec<(&'static str, usize, bool)> = r
        .per_kind
        .iter()
        .filter(|(_, (n, _))| *n > MAX_FINDINGS_PER_KIND)
        .map(|(kind, (n, warning))| (*kind, *n, *warning))
        .collect();
    capped.sort();
    for (kind, n, warning) in capped {
        // In the list of its kind: more warnings are still no error.
        let list = if warning {
            &mut r.warnings
        } else {
            &mut r.errors
        };
        list.push(CheckFinding {
            kind: kind.to_string(),
            entity: "*".into(),
            detail: format!("{} more of this kind not listed", n - MAX_FINDINGS_PER_KIND),
        });
    }
    Ok(CheckResult {
        ok: r.errors.is_empty(),
        errors: r.errors,
        warnings: r.warnings,
        sections_checked,
        documents_checked,
        references_checked,
        elapsed_ms: 0.0,
    })
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
