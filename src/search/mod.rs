//! Search: query understanding (query.rs), AND with a relaxed OR fallback, filters, the three
//! result modes, snippets and hints. Results are the paged envelope of the spec.

pub mod builtin_synonyms;
pub mod mode;
pub mod query;
pub mod snippet;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tantivy::collector::{Count, TopDocs};
use tantivy::query::{BooleanQuery, Occur, Query};
use tantivy::schema::Value;
use tantivy::{DocAddress, Searcher, TantivyDocument};

pub use self::mode::{Retrieval, SearchMode, Shape};
use crate::error::{KbError, Result};
use crate::index::analyzer::Normalizer;
use crate::index::lexical::Fields;
use crate::store::txn::ReadTables;

pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 100;
/// Deepest result reachable by paging (offset + limit).
pub const MAX_DEPTH: usize = 10_000;
/// Most hits grouped into documents (`documents` mode) or counted (`stats` mode).
pub const MAX_GROUPED_HITS: usize = 10_000;
/// Hits at the top of the ranking that the proximity bonus may reorder.
pub const RERANK_WINDOW: usize = 30;
/// Most matching sections listed per document in `documents` mode.
pub const SECTIONS_PER_DOCUMENT: usize = 10;
/// Length of each ranked list fused by RRF (and the deepest page of `vector`/`hybrid`).
pub const FUSION_DEPTH: usize = 200;
/// The default relevance floor of `vector` and `hybrid` search (`min_score`): the least cosine
/// similarity between the query's embedding and a section's for the vector list to hold the
/// section. Calibrated with all-MiniLM-L6-v2 on the relevance sets (docs/search.md, *Relevance
/// floor*): below every relevant section those sets put in a vector top 10, above what an
/// unrelated text scores.
pub const DEFAULT_MIN_SCORE: f32 = 0.15;

/// The floor a request asks for: `min_score`, else the default; an error outside -1..=1.
pub fn min_score(req: &SearchRequest) -> Result<f32> {
    match req.min_score {
        None => Ok(DEFAULT_MIN_SCORE),
        Some(s) if s.is_finite() && (-1.0..=1.0).contains(&s) => Ok(s),
        Some(s) => Err(KbError::invalid(
            "min_score",
            format!("must be a cosine similarity between -1 and 1 (got {s})"),
        )),
    }
}

/// A relaxed (OR) list this short counts fully in hybrid fusion: a word of the query is rare,
/// and these few sections hold it (see `lexical_weight`).
pub const RELAXED_SPECIFIC_HITS: f32 = 3.0;
/// Below this weight a relaxed list does not count at all (and its sections are not listed).
pub const RELAXED_MIN_WEIGHT: f32 = 0.1;
/// A relaxed list holding more than this share of the base is no evidence, however short.
pub const RELAXED_MAX_SHARE: f32 = 0.1;

/// The weight of the lexical list's votes in hybrid fusion, judged per query from how specific
/// its evidence is. Sections holding all the query's words: 1. The relaxed OR fallback of
/// `hits` sections out of `sections`: `min(1, 3 / hits)²`, and 0 below `RELAXED_MIN_WEIGHT`
/// (more than 9 hits) or when the hits are more than a tenth of the base. A question phrased
/// in other words than its answer relaxes to hundreds of sections that share a common word
/// with it; any vote they get lifts the vector list's near misses above its best match. A
/// short OR list is the opposite: one rare word of the query (`密码`, `退货`) and the few
/// sections that hold it, where the vector leg is often unsure. Measured in docs/search.md
/// (*Fusion by the strength of each list*).
pub fn lexical_weight(relaxed: bool, hits: usize, sections: u64) -> f32 {
    if !relaxed {
        return 1.0;
    }
    if hits as f32 > RELAXED_MAX_SHARE * sections as f32 {
        return 0.0;
    }
    let w = (RELAXED_SPECIFIC_HITS / hits.max(1) as f32)
        .min(1.0)
        .powi(2);
    if w < RELAXED_MIN_WEIGHT { 0.0 } else { w }
}

/// A search: the parameters of the `search` method and MCP tool (their `inputSchema` is derived
/// from this type; the field doc comments are its descriptions).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// Keywords to look for. Only the first 32 words / 1,000 characters are used (the result
    /// then warns `query_truncated`).
    pub query: String,
    /// Result shape or retrieval path. `sections` (default): one item per matching section.
    /// `documents`: hits grouped by document, best first (`total` counts documents). `stats`:
    /// no items, only counts by type, tag and document and each word's document frequency.
    /// `lexical` is the default retrieval (keyword ranking) with `sections` results; `vector`
    /// (meaning, by embedding similarity) and `hybrid` (keywords and meaning fused by
    /// reciprocal rank) need an embedding provider configured for the database
    /// (EMBEDDING_PROVIDER_NOT_CONFIGURED otherwise); they return `sections` results.
    #[serde(
        default,
        deserialize_with = "mode::search_mode",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = "sections"))]
    pub mode: Option<SearchMode>,
    /// The retrieval path, stated explicitly (the same values as in `mode`; giving both with
    /// different values is an error). `hybrid` finds sections that say the same thing in other
    /// words; when the stored vectors are of another model the search answers lexically with
    /// `vector_index_stale: true`. `vector` and `hybrid` pages end at offset + limit = 200.
    #[serde(
        default,
        deserialize_with = "mode::retrieval",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(extend("default" = "lexical"))]
    pub search_mode: Option<Retrieval>,
    /// Results per page (1-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100), extend("default" = 20))]
    pub limit: Option<usize>,
    /// Zero-based index of the first result, for paging; `offset + limit` must not exceed
    /// 10,000. Use the previous page's `has_more` to know whether to ask again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 9999), extend("default" = 0))]
    pub offset: Option<usize>,
    /// Include each section's full text in its item. Usually better left false: judge by
    /// snippets, then `recall` the sections you need.
    #[serde(default)]
    pub content: bool,
    /// Only sections carrying all of these tags (kbdb filter; does not change the ranking).
    #[serde(
        default,
        deserialize_with = "crate::types::requests::null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// Only sections of this MIME type, e.g. `text/markdown`, `text/x-rust`, `image/png`
    /// (kbdb filter).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub section_type: Option<String>,
    /// Only sections of this document (kbdb filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docid: Option<String>,
    /// Only sections of documents of this collection model (see `inspect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Only sections of documents whose metadata matches — the `where` of the `query` tool
    /// (object or array form).
    #[serde(rename = "where", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "object_or_array")]
    pub where_: Option<serde_json::Value>,
    /// `vector` and `hybrid`: the relevance floor, the least cosine similarity between the
    /// query and a section found by its meaning (sections that hold the query's words stay in
    /// `hybrid`). 0 lists every section; lexical search ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1, max = 1), extend("default" = 0.15))]
    pub min_score: Option<f32>,
}

fn object_or_array(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"anyOf": [{"type": "object"}, {"type": "array"}]})
}

impl SearchRequest {
    /// Whether the request filters by collection (model or metadata).
    pub fn has_collection_filter(&self) -> bool {
        self.model.is_some() || self.where_.is_some()
    }

    pub fn new(query: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SearchItem {
    pub kbid: String,
    pub heading: Option<String>,
    #[serde(rename = "type")]
    pub section_type: String,
    pub docids: Vec<String>,
    pub snippet: String,
    pub matched_terms: Vec<String>,
    pub matched_fields: Vec<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The ranking score: BM25F (with the proximity bonus) for a lexical search, the cosine
    /// similarity for `vector`, the fused reciprocal-rank score for `hybrid`. Comparable within
    /// one response, not across searches.
    #[serde(default)]
    pub score: f32,
    /// Hybrid only: the section's 1-based rank in the lexical list (null: not in it).
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub lexical_rank: Option<Option<usize>>,
    /// Hybrid only: the section's 1-based rank in the vector list (null: not in it).
    #[serde(
        default,
        deserialize_with = "present_or_null",
        skip_serializing_if = "Option::is_none"
    )]
    pub vector_rank: Option<Option<usize>>,
}

/// A field that may be absent (None), null (Some(None)) or a value: serde reads a null
/// `Option<Option<_>>` as absent, which would drop the null on its way through the daemon.
fn present_or_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Option<usize>>, D::Error> {
    Option::<usize>::deserialize(d).map(Some)
}

/// A document in `documents` mode: its matching sections, best first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocumentHit {
    /// null for sections that belong to no document.
    pub docid: Option<String>,
    pub title: Option<String>,
    /// Matching sections in this document (the list holds at most 10).
    pub hits: usize,
    pub matched_terms: Vec<String>,
    pub sections: Vec<SearchItem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TermFrequency {
    pub term: String,
    /// Sections (in the whole knowledge base, filters ignored) that contain the term.
    pub document_frequency: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SearchStats {
    pub by_type: BTreeMap<String, u64>,
    pub by_tag: BTreeMap<String, u64>,
    pub by_document: BTreeMap<String, u64>,
    pub terms: Vec<TermFrequency>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SearchItems {
    Sections(Vec<SearchItem>),
    Documents(Vec<DocumentHit>),
}

impl SearchItems {
    /// Section items (sections mode), empty otherwise.
    pub fn sections(&self) -> &[SearchItem] {
        match self {
            SearchItems::Sections(v) => v,
            SearchItems::Documents(_) => &[],
        }
    }
    pub fn len(&self) -> usize {
        match self {
            SearchItems::Sections(v) => v.len(),
            SearchItems::Documents(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The paged envelope.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SearchResponse {
    pub items: SearchItems,
    pub total: u64,
    pub offset: usize,
    pub limit: usize,
    pub has_more: bool,
    pub relaxed: bool,
    pub mode: String,
    pub search_mode: String,
    pub retrieval_method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<SearchStats>,
    /// Why the result is empty (or relaxed), in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The vector index is of another model: the search fell back to lexical (run `kbdb
    /// rebuild`). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub vector_index_stale: bool,
    /// Query words that matched nothing and were searched for as the nearest indexed word
    /// (typed → searched), with a `fuzzy_match` warning. Absent when nothing was corrected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrected: Option<BTreeMap<String, String>>,
}

/// The retrieval path a request asks for: `search_mode`, or a retrieval value given in
/// `mode` (the two specs share the name; their values do not overlap). Both set and
/// different is an error.
pub fn requested_retrieval(req: &SearchRequest) -> Result<Retrieval> {
    match (req.mode.and_then(SearchMode::retrieval), req.search_mode) {
        (Some(a), Some(b)) if a != b => Err(KbError::invalid(
            "search_mode",
            format!(
                "is '{}' but mode is '{}': set the retrieval path once (search_mode), or make them agree",
                b.as_str(),
                a.as_str()
            ),
        )),
        (a, b) => Ok(b.or(a).unwrap_or(Retrieval::Lexical)),
    }
}

/// The vector side of a `vector` or `hybrid` search: the nearest sections (at most
/// `FUSION_DEPTH`, filters applied), best first.
pub(crate) struct VectorHits<'a> {
    /// The ranked vector list, or the work that computes it (it runs beside the lexical
    /// query and is joined at fusion time).
    hits: std::cell::RefCell<VectorList<'a>>,
    /// `vector`: these alone; `hybrid`: fused with the lexical list by RRF.
    pub only: bool,
    pub rrf_k: u32,
}

type Ranked = Vec<(String, f32)>;

enum VectorList<'a> {
    Ready(Ranked),
    Pending(Box<dyn FnOnce() -> Result<Ranked> + 'a>),
    /// The work returned an error (already reported to the first caller).
    Failed,
}

impl<'a> VectorHits<'a> {
    /// Hits computed later by `pending` (e.g. joining a thread), at most once.
    pub fn pending(pending: impl FnOnce() -> Result<Ranked> + 'a, only: bool, rrf_k: u32) -> Self {
        VectorHits {
            hits: std::cell::RefCell::new(VectorList::Pending(Box::new(pending))),
            only,
            rrf_k,
        }
    }

    /// The ranked list, best first (waits for it when it is still being computed).
    fn ranked(&self) -> Result<std::cell::Ref<'_, Ranked>> {
        {
            let mut list = self.hits.borrow_mut();
            if matches!(&*list, VectorList::Pending(_))
                && let VectorList::Pending(work) = std::mem::replace(&mut *list, VectorList::Failed)
            {
                *list = VectorList::Ready(work()?);
            }
        }
        std::cell::Ref::filter_map(self.hits.borrow(), |l| match l {
            VectorList::Ready(r) => Some(r),
            _ => None,
        })
        .map_err(|_| KbError::Storage("vector search: the ranked list failed earlier".into()))
    }
}

/// The filters of a request, for the vector path (the lexical path filters in the index).
pub(crate) struct Filters {
    pub tags: Vec<String>,
    pub section_type: Option<String>,
    pub docid: Option<String>,
    /// Documents allowed by `model`/`where` (None: no such filter).
    pub documents: Option<std::collections::HashSet<String>>,
}

impl Filters {
    pub fn of(req: &SearchRequest) -> Result<Filters> {
        let tags = crate::types::validate::validate_tags(&req.tags)?;
        let section_type = match &req.section_type {
            Some(t) => Some(crate::types::section_type::parse_type(Some(t))?.0),
            None => None,
        };
        let docid = match &req.docid {
            Some(d) => Some(crate::types::validate::docid(d)?.into_owned()),
            None => None,
        };
        Ok(Filters {
            tags,
            section_type,
            docid,
            documents: None,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
            && self.section_type.is_none()
            && self.docid.is_none()
            && self.documents.is_none()
    }

    /// Whether the section passes (unknown sections do not).
    pub fn accept(&self, store: &ReadTables, kbid: &str) -> Result<bool> {
        if self.is_empty() {
            return Ok(true);
        }
        let Some(rec) = store.section(kbid)? else {
            return Ok(false);
        };
        if let Some(t) = &self.section_type
            && &rec.section_type != t
        {
            return Ok(false);
        }
        if !self.tags.iter().all(|t| rec.tags.contains(t)) {
            return Ok(false);
        }
        if self.docid.is_some() || self.documents.is_some() {
            let docs = store.docs_of_section(kbid, &rec)?;
            if let Some(d) = &self.docid
                && !docs.contains(d)
            {
                return Ok(false);
            }
            if let Some(allowed) = &self.documents
                && !docs.iter().any(|d| allowed.contains(d))
            {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A filter to the sections of these documents, as the store lists them: the index holds nothing
/// of a section's documents, so that a document taking a section costs the index nothing. Each
/// candidate's `kbid_key` (a 64-bit hash of its kbid, a fast field) is looked up in the set of
/// those sections' keys: a term set of thousands of random kbids cost tantivy ~0.5 s to walk
/// (8,000 documents of a collection), the lookups cost nothing next to the search.
fn sections_of_documents<'d>(
    store: &ReadTables,
    docids: impl Iterator<Item = &'d String>,
) -> Result<Box<dyn Query>> {
    let mut keys = std::collections::HashSet::new();
    for docid in docids {
        if let Some(doc) = store.document(docid)? {
            keys.extend(doc.kbids.iter().map(|k| crate::index::lexical::kbid_key(k)));
        }
    }
    let keys = std::sync::Arc::new(keys);
    let predicate = tantivy::query::doc_predicate_query::FunctionPredicate::from(
        move |segment: &tantivy::SegmentReader| {
            let column = segment
                .fast_fields()
                .u64(crate::index::lexical::KBID_KEY_FIELD)?;
            let keys = keys.clone();
            Ok(move |doc: tantivy::DocId| column.first(doc).is_some_and(|k| keys.contains(&k)))
        },
    );
    Ok(Box::new(tantivy::query::ConstScoreQuery::new(
        Box::new(tantivy::query::doc_predicate_query::DocPredicateQuery::from(predicate)),
        0.0,
    )))
}

/// Run a search against a searcher of the lexical index and a read snapshot of the store.
pub(crate) fn run(
    req: &SearchRequest,
    searcher: &Searcher,
    fields: &Fields,
    store: &ReadTables,
    user_synonyms: &dyn Fn(&str) -> Vec<String>,
    vector: Option<&VectorHits<'_>>,
    documents: Option<&std::collections::HashSet<String>>,
) -> Result<SearchResponse> {
    let mode = req.mode.map_or(Shape::Sections, SearchMode::shape);
    let limit = req.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(KbError::invalid(
            "limit",
            format!("must be between 1 and {MAX_LIMIT} (got {limit})"),
        ));
    }
    let offset = req.offset.unwrap_or(0);
    if offset + limit > MAX_DEPTH {
        return Err(KbError::invalid(
            "offset",
            format!(
                "offset + limit must not exceed {MAX_DEPTH} (got {})",
                offset + limit
            ),
        ));
    }
    if vector.is_some() && mode == Shape::Sections && offset + limit > FUSION_DEPTH {
        return Err(KbError::invalid(
            "offset",
            format!(
                "offset + limit must not exceed {FUSION_DEPTH} in vector and hybrid searches (got {})",
                offset + limit
            ),
        ));
    }
    let Filters {
        tags,
        section_type,
        docid,
        ..
    } = Filters::of(req)?;
    let floor = min_score(req)?;

    let mut parsed = query::parse(&req.query, user_synonyms);
    let mut warnings = Vec::new();
    if parsed.truncated {
        warnings.push(format!(
            "query_truncated: only the first {} characters and {} words were used",
            query::MAX_QUERY_CHARS,
            query::MAX_QUERY_PARTS
        ));
    }
    let mut b = query::Builder {
        fields,
        norm: Normalizer::default(),
    };
    let ts = |e: tantivy::TantivyError| KbError::Storage(format!("search: {e}"));
    // Typo tolerance, only for words that match nothing (a vector-only search has no words).
    let corrections = if vector.is_some_and(|v| v.only) {
        Vec::new()
    } else {
        query::correct_typos(&mut parsed.parts, &mut b, searcher).map_err(ts)?
    };
    let part_queries: Vec<Box<dyn Query>> = parsed.parts.iter().map(|p| b.part_query(p)).collect();
    let mut filters: Vec<Box<dyn Query>> =
        tags.iter().map(|t| query::filter(fields.tags, t)).collect();
    if let Some(t) = &section_type {
        filters.push(query::filter(fields.section_type, t));
    }
    if let Some(d) = &docid {
        filters.push(sections_of_documents(store, std::iter::once(d))?);
    }
    if let Some(allowed) = documents {
        filters.push(sections_of_documents(store, allowed.iter())?);
    }
    let has_filters = !filters.is_empty();

    let proximity = b.proximity_query(&parsed.parts);
    let build = |and: bool, with_filters: bool| -> Box<dyn Query> {
        let words: Box<dyn Query> = if and {
            Box::new(BooleanQuery::new(
                part_queries
                    .iter()
                    .map(|q| (Occur::Must, q.box_clone()))
                    .collect(),
            ))
        } else {
            Box::new(BooleanQuery::new(
                part_queries
                    .iter()
                    .map(|q| (Occur::Should, q.box_clone()))
                    .collect(),
            ))
        };
        let mut clauses = vec![(Occur::Must, words)];
        if with_filters {
            clauses.extend(filters.iter().map(|f| (Occur::Must, f.box_clone())));
        }
        Box::new(BooleanQuery::new(clauses))
    };

    let depth = match mode {
        _ if vector.is_some() => FUSION_DEPTH,
        Shape::Sections if proximity.is_some() => (offset + limit).max(RERANK_WINDOW),
        Shape::Sections => offset + limit,
        _ => MAX_GROUPED_HITS,
    };
    let mut relaxed = false;
    let mut hint = None;
    let (mut hits, mut total) = (Vec::new(), 0usize);
    if !part_queries.is_empty() && !vector.is_some_and(|v| v.only) {
        (hits, total) = top_with_ties(searcher, build(true, true).as_ref(), depth)?;
        if total == 0 && part_queries.len() > 1 {
            (hits, total) = top_with_ties(searcher, build(false, true).as_ref(), depth)?;
            if total > 0 {
                relaxed = true;
                hint = Some(
                    "no section contains all the words; these contain some of them".to_string(),
                );
            }
        }
    }
    if total == 0 && vector.is_none() {
        hint = Some(if part_queries.is_empty() {
            "the query has no searchable words".to_string()
        } else {
            let unfiltered = searcher.search(&build(false, false), &Count).map_err(ts)?;
            if unfiltered > 0 && has_filters {
                format!(
                    "{unfiltered} section(s) contain the words, but the filters (tags, type, docid, model, where) exclude all of them"
                )
            } else {
                let labels: Vec<String> = parsed.parts.iter().map(|p| p.label()).collect();
                format!("no section contains any of: {}", labels.join(", "))
            }
        });
    }

    // Deterministic order: score, then kbid.
    // Deterministic order: score, then a hash of the kbid (a fast field: no document-store
    // reads for hits that are not shown).
    let mut key_columns: std::collections::HashMap<u32, tantivy::columnar::Column<u64>> =
        std::collections::HashMap::new();
    let mut keyed: Vec<(f32, u64, DocAddress)> = Vec::with_capacity(hits.len());
    for (score, addr) in hits {
        let col = match key_columns.entry(addr.segment_ord) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(
                searcher
                    .segment_reader(addr.segment_ord)
                    .fast_fields()
                    .u64("kbid_key")
                    .map_err(ts)?,
            ),
        };
        keyed.push((score, col.first(addr.doc_id).unwrap_or(0), addr));
    }
    let order = |a: &(f32, u64, DocAddress), b: &(f32, u64, DocAddress)| {
        b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1))
    };
    keyed.sort_by(order);
    // Proximity: the first RERANK_WINDOW hits earn a bonus when their words stand close
    // together. Scoring only these (not every match) keeps it cheap; the window is fixed, so
    // pages agree with each other whatever their depth.
    if let Some(p) = &proximity {
        let window = keyed.len().min(RERANK_WINDOW);
        let addrs: Vec<DocAddress> = keyed[..window].iter().map(|h| h.2).collect();
        let bonus = scores_of(searcher, p.as_ref(), &addrs)?;
        for h in keyed[..window].iter_mut() {
            h.0 += bonus.get(&h.2).copied().unwrap_or(0.0);
        }
        keyed[..window].sort_by(order);
    }
    // kbids (from the document store) only for the hits this response shows or groups.
    let kbid_of = |addr: DocAddress| -> Result<String> {
        let d: TantivyDocument = searcher.doc(addr).map_err(ts)?;
        Ok(d.get_first(fields.kbid)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string())
    };
    let mut ranked: Vec<(f32, String, Option<DocAddress>)> = Vec::with_capacity(keyed.len());
    // Hybrid: each listed section's ranks in the two lists.
    let mut fused_ranks: std::collections::HashMap<String, (Option<usize>, Option<usize>)> =
        std::collections::HashMap::new();
    if let Some(v) = vector {
        // Reciprocal rank fusion over kbid keys: 1/(k + rank) from each list a section is in.
        let k = v.rrf_k as f32;
        // kbid key → (fused score, lexical hit, kbid when the vector list has it, lexical
        // rank, vector rank)
        type Fused<'a> = (
            f32,
            Option<DocAddress>,
            Option<&'a str>,
            Option<usize>,
            Option<usize>,
        );
        let mut fused: std::collections::HashMap<u64, Fused> = std::collections::HashMap::new();
        let vector_ranked = v.ranked()?;
        // How much the lexical list's ranks count (`lexical_weight`); a list that does not
        // count lists nothing, but its ranks are still reported for the vector hits.
        let lexical_weight = lexical_weight(relaxed, total, searcher.num_docs());
        let mut lexical_ranks: std::collections::HashMap<u64, (usize, DocAddress)> =
            std::collections::HashMap::new();
        if !v.only {
            for (rank, (_, key, addr)) in keyed.iter().take(FUSION_DEPTH).enumerate() {
                lexical_ranks.insert(*key, (rank + 1, *addr));
                if lexical_weight > 0.0 {
                    fused.insert(
                        *key,
                        (
                            lexical_weight / (k + rank as f32 + 1.0),
                            Some(*addr),
                            None,
                            Some(rank + 1),
                            None,
                        ),
                    );
                }
            }
        }
        // The relevance floor ends the vector list (it is ordered by similarity, so the ranks
        // of what stays do not change).
        let above_floor = vector_ranked
            .iter()
            .take(FUSION_DEPTH)
            .take_while(|(_, similarity)| *similarity >= floor);
        let below_floor = vector_ranked.len().min(FUSION_DEPTH) - above_floor.clone().count();
        for (rank, (kbid, similarity)) in above_floor.enumerate() {
            let key = crate::index::lexical::kbid_key(kbid);
            let lexical = lexical_ranks.get(&key);
            let e = fused.entry(key).or_insert((
                0.0,
                lexical.map(|l| l.1),
                None,
                lexical.map(|l| l.0),
                None,
            ));
            // A vector search alone ranks by similarity, and says so in `score`.
            e.0 += if v.only {
                *similarity
            } else {
                1.0 / (k + rank as f32 + 1.0)
            };
            e.2 = Some(kbid.as_str());
            e.4 = Some(rank + 1);
        }
        let mut order: Vec<(u64, Fused)> = fused.into_iter().collect();
        order.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
        total = order.len();
        let needed = match mode {
            Shape::Sections => offset..offset + limit,
            _ => 0..order.len(),
        };
        for (i, (_, (score, addr, kbid, lexical_rank, vector_rank))) in
            order.into_iter().enumerate()
        {
            let kbid = match (kbid, addr) {
                (Some(k), _) => k.to_string(),
                (None, Some(a)) if needed.contains(&i) => kbid_of(a)?,
                _ => String::new(),
            };
            if !v.only && !kbid.is_empty() {
                fused_ranks.insert(kbid.clone(), (lexical_rank, vector_rank));
            }
            ranked.push((score, kbid, addr));
        }
        if total == 0 {
            hint = Some(if below_floor > 0 {
                format!(
                    "no section is close enough in meaning to the query: {below_floor} scored below the relevance floor (min_score {floor})"
                )
            } else if v.only {
                "no section has an embedding that passes the filters".to_string()
            } else {
                "neither the words nor the meaning of the query matched a section".to_string()
            });
        } else {
            hint = None;
        }
    } else {
        let needed = match mode {
            Shape::Sections => offset..offset + limit,
            _ => 0..keyed.len(),
        };
        for (i, (score, _, addr)) in keyed.into_iter().enumerate() {
            let kbid = if needed.contains(&i) {
                kbid_of(addr)?
            } else {
                String::new()
            };
            ranked.push((score, kbid, Some(addr)));
        }
    }

    // Query terms ordered by rarity (rarest first) for snippet centring.
    let ways: Vec<(String, Vec<Vec<String>>)> = parsed
        .parts
        .iter()
        .map(|p| (p.label(), b.part_terms(p)))
        .collect();
    let mut rare: Vec<(u64, String)> = Vec::new();
    for (_, w) in &ways {
        for t in w.iter().flatten() {
            let df = searcher
                .doc_freq(&tantivy::Term::from_field_text(fields.body, t))
                .unwrap_or(0);
            rare.push((df, t.clone()));
        }
    }
    rare.sort();
    let snippet_terms: Vec<String> = rare.into_iter().map(|(_, t)| t).collect();

    let addr_of: std::collections::HashMap<&str, DocAddress> = ranked
        .iter()
        .filter_map(|(_, k, a)| a.map(|a| (k.as_str(), a)))
        .collect();
    let score_of: std::collections::HashMap<&str, f32> =
        ranked.iter().map(|(s, k, _)| (k.as_str(), *s)).collect();
    let mut describe = |kbid: &str| -> Result<Option<SearchItem>> {
        let present = Presence {
            searcher,
            fields,
            addr: addr_of.get(kbid).copied(),
        };
        let mut item = describe_hit(
            kbid,
            store,
            &ways,
            &snippet_terms,
            &mut b.norm,
            &present,
            req.content,
        )?;
        if let Some(item) = item.as_mut() {
            item.score = score_of.get(kbid).copied().unwrap_or(0.0);
            if let Some((lexical, vector)) = fused_ranks.get(kbid) {
                item.lexical_rank = Some(*lexical);
                item.vector_rank = Some(*vector);
            }
        }
        Ok(item)
    };

    let (items, total_out, stats) = match mode {
        Shape::Sections => {
            let mut items = Vec::new();
            for (_, kbid, _) in ranked.iter().skip(offset).take(limit) {
                if let Some(item) = describe(kbid)? {
                    items.push(item);
                }
            }
            (SearchItems::Sections(items), total, None)
        }
        Shape::Documents => {
            // Group by document in rank order; a section in several documents counts in each.
            let mut order: Vec<Option<String>> = Vec::new();
            let mut groups: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
            for (_, kbid, _) in &ranked {
                let docs = store.docs_of(kbid)?;
                let keys: Vec<Option<String>> = if docs.is_empty() {
                    vec![None]
                } else {
                    docs.into_iter().map(Some).collect()
                };
                for k in keys {
                    let g = groups.entry(k.clone()).or_default();
                    if g.is_empty() {
                        order.push(k);
                    }
                    g.push(kbid.clone());
                }
            }
            let total_docs = order.len();
            let mut out = Vec::new();
            for key in order.into_iter().skip(offset).take(limit) {
                let kbids = &groups[&key];
                let mut sections = Vec::new();
                let mut matched: Vec<String> = Vec::new();
                for kbid in kbids.iter().take(SECTIONS_PER_DOCUMENT) {
                    if let Some(item) = describe(kbid)? {
                        for t in &item.matched_terms {
                            if !matched.contains(t) {
                                matched.push(t.clone());
                            }
                        }
                        sections.push(item);
                    }
                }
                let title = match &key {
                    Some(d) => store.document(d)?.and_then(|doc| doc.title),
                    None => None,
                };
                out.push(DocumentHit {
                    docid: key,
                    title,
                    hits: kbids.len(),
                    matched_terms: matched,
                    sections,
                });
            }
            (SearchItems::Documents(out), total_docs, None)
        }
        Shape::Stats => {
            let mut stats = SearchStats::default();
            for (_, kbid, _) in &ranked {
                // The record read once: it holds the section's first document too.
                let docs = match store.section(kbid)? {
                    Some(rec) => {
                        let docs = store.docs_of_section(kbid, &rec)?;
                        *stats.by_type.entry(rec.section_type).or_default() += 1;
                        for t in rec.tags {
                            *stats.by_tag.entry(t).or_default() += 1;
                        }
                        docs
                    }
                    None => store.docs_of(kbid)?,
                };
                for d in docs {
                    *stats.by_document.entry(d).or_default() += 1;
                }
            }
            for (p, q) in parsed.parts.iter().zip(&part_queries) {
                stats.terms.push(TermFrequency {
                    term: p.label(),
                    document_frequency: searcher.search(q.as_ref(), &Count).map_err(ts)? as u64,
                });
            }
            (SearchItems::Sections(Vec::new()), total, Some(stats))
        }
    };
    let has_more = match mode {
        Shape::Stats => false,
        _ => offset + items.len() < total_out,
    };
    // Each correction as a word: the form the best hit holding the term has, else the term.
    let mut corrected = BTreeMap::new();
    if !corrections.is_empty() {
        let best = ranked
            .first()
            .map(|(_, k, _)| k.clone())
            .unwrap_or_default();
        let text = match store.section(&best)? {
            Some(rec) if !rec.section_type.starts_with("image/") => store
                .content_of(&rec)?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
            _ => String::new(),
        };
        for (typed, term) in &corrections {
            let shown = crate::index::analyzer::chunks(&text)
                .into_iter()
                .flat_map(|c| std::iter::once(c.whole).chain(c.parts))
                .find(|w| &b.norm.norm(w) == term)
                .map(|w| w.to_lowercase())
                .unwrap_or_else(|| term.clone());
            warnings.push(format!(
                "fuzzy_match: no section contains '{typed}'; searched for '{shown}' instead"
            ));
            corrected.insert(typed.clone(), shown);
        }
    }
    Ok(SearchResponse {
        items,
        total: total_out as u64,
        offset,
        limit,
        has_more,
        relaxed,
        mode: mode.as_str().to_string(),
        search_mode: "lexical".to_string(),
        retrieval_method: "lexical".to_string(),
        stats,
        hint,
        warnings,
        vector_index_stale: false,
        corrected: (!corrected.is_empty()).then_some(corrected),
    })
}

/// The top `depth` hits plus every hit tied with the last of them, so that ordering by
/// (score, kbid) is the same whatever the page depth: paging never repeats or skips a hit.
fn top_with_ties(
    searcher: &Searcher,
    q: &dyn Query,
    depth: usize,
) -> Result<(Vec<(f32, DocAddress)>, usize)> {
    let ts = |e: tantivy::TantivyError| KbError::Storage(format!("search: {e}"));
    let mut want = depth;
    loop {
        let (hits, total): (Vec<(f32, DocAddress)>, usize) = searcher
            .search(q, &(TopDocs::with_limit(want).order_by_score(), Count))
            .map_err(ts)?;
        let exhausted = hits.len() < want || want >= MAX_GROUPED_HITS;
        // More hits may share the score of the last one we must return.
        if exhausted || hits[depth - 1].0 != hits[want - 1].0 {
            return Ok((hits, total));
        }
        want = (want * 2).min(MAX_GROUPED_HITS);
    }
}

/// Scores of `q` for the given documents only (seeking each segment's scorer to them).
fn scores_of(
    searcher: &Searcher,
    q: &dyn Query,
    addrs: &[DocAddress],
) -> Result<std::collections::HashMap<DocAddress, f32>> {
    use tantivy::DocSet;
    let ts = |e: tantivy::TantivyError| KbError::Storage(format!("search: {e}"));
    let weight = q
        .weight(tantivy::query::EnableScoring::enabled_from_searcher(
            searcher,
        ))
        .map_err(ts)?;
    let mut sorted = addrs.to_vec();
    sorted.sort();
    let mut out = std::collections::HashMap::new();
    let mut i = 0;
    while i < sorted.len() {
        let seg = sorted[i].segment_ord;
        let mut scorer = weight
            .scorer(searcher.segment_reader(seg), 1.0)
            .map_err(ts)?;
        while i < sorted.len() && sorted[i].segment_ord == seg {
            let d = sorted[i].doc_id;
            if scorer.doc() < d {
                scorer.seek(d);
            }
            if scorer.doc() == d {
                out.insert(sorted[i], scorer.score());
            }
            i += 1;
        }
    }
    Ok(out)
}

/// Whether a hit contains terms, answered from the index's postings (no re-tokenising of the
/// section's text, which can be tens of kilobytes).
struct Presence<'a> {
    searcher: &'a Searcher,
    fields: &'a Fields,
    addr: Option<DocAddress>,
}

impl Presence<'_> {
    fn has_all(&self, field: tantivy::schema::Field, terms: &[String]) -> bool {
        let Some(addr) = self.addr else { return false };
        let seg = self.searcher.segment_reader(addr.segment_ord);
        let Ok(inv) = seg.inverted_index(field) else {
            return false;
        };
        terms.iter().all(|t| {
            let term = tantivy::Term::from_field_text(field, t);
            match inv.read_postings(&term, tantivy::schema::IndexRecordOption::Basic) {
                Ok(Some(mut p)) => {
                    use tantivy::DocSet;
                    // seek() requires the cursor not to be past the target already.
                    p.doc() == addr.doc_id
                        || (p.doc() < addr.doc_id && p.seek(addr.doc_id) == addr.doc_id)
                }
                _ => false,
            }
        })
    }
}

fn describe_hit(
    kbid: &str,
    store: &ReadTables,
    ways: &[(String, Vec<Vec<String>>)],
    snippet_terms: &[String],
    norm: &mut Normalizer,
    present: &Presence<'_>,
    with_content: bool,
) -> Result<Option<SearchItem>> {
    let Some(rec) = store.section(kbid)? else {
        return Ok(None); // removed after the index snapshot
    };
    let is_image = rec.section_type.starts_with("image/");
    let bytes = store.content_of(&rec)?.unwrap_or_default();
    let text = if is_image {
        String::new()
    } else {
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let f = present.fields;
    let named = [("heading", f.heading), ("body", f.body), ("code", f.code)];
    let other = [f.description, f.tags_text];
    let mut matched_terms = Vec::new();
    let mut matched_fields = Vec::new();
    for (label, alternatives) in ways {
        let mut hit = false;
        for (name, field) in named {
            if alternatives.iter().any(|w| present.has_all(field, w)) {
                hit = true;
                if !matched_fields.contains(&name.to_string()) {
                    matched_fields.push(name.to_string());
                }
            }
        }
        if hit
            || other
                .iter()
                .any(|&field| alternatives.iter().any(|w| present.has_all(field, w)))
        {
            matched_terms.push(label.clone());
        }
    }
    matched_fields.sort_by_key(|f| ["heading", "body", "code"].iter().position(|x| x == f));
    let snippet = if is_image {
        String::new()
    } else {
        // Only terms this section's text contains (known from the index) are looked for.
        let in_text: Vec<String> = snippet_terms
            .iter()
            .filter(|t| {
                let one = std::slice::from_ref(*t);
                present.has_all(f.body, one) || present.has_all(f.code, one)
            })
            .cloned()
            .collect();
        snippet::snippet(&text, &in_text, norm)
    };
    Ok(Some(SearchItem {
        kbid: kbid.to_string(),
        docids: store.docs_of_section(kbid, &rec)?,
        heading: rec.title,
        snippet,
        matched_terms,
        matched_fields,
        created_at: rec.created_at,
        content: with_content.then(|| crate::learn::content_as_text(&rec.section_type, &bytes)),
        section_type: rec.section_type,
        score: 0.0,
        lexical_rank: None,
        vector_rank: None,
    }))
}
