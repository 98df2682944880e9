//! The embedder: replays the change log into `vectors` (new and retitled sections get an
//! embedding, removed ones lose theirs), and `rebuild` re-embeds everything. Provider calls
//! happen outside any write transaction; each round's vectors and its new `applied_seq` are
//! committed together, so a crash at any point leaves the unembedded changes pending.

use std::collections::BTreeMap;
use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata};

use super::matrix::VectorMatrix;
use super::store::{VectorState, decode_vector, encode_vector};
use super::{embedding_input, input_fingerprint};
use crate::embedding::{EmbedError, EmbeddingProvider};
use crate::error::{KbError, Result};
use crate::store::tables::{CHANGES, CONTENT, SECTIONS, VECTOR_FAILURES, VECTOR_STATE, VECTORS};
use crate::types::records::{ChangeKind, ChangeRecord, SectionRecord, decode};

/// Changes read per round (a round is one provider pass and one commit).
pub const CHANGES_PER_ROUND: usize = 256;
/// Sections per provider call during `rebuild` (the spec's batches of 64).
pub const REBUILD_BATCH: usize = 64;

/// Whether the stored vectors can serve the configured provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Same model and dimensions (or nothing stored yet and nothing to embed).
    Fresh,
    /// The vectors are of another model (or dimensions): `rebuild` is needed.
    Stale,
}

/// What one round of [`embed_pending`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Round {
    pub embedded: usize,
    pub removed: usize,
    /// Sections whose text the provider refused (recorded in `vector_failures`).
    pub failed: Vec<String>,
    /// Changes still waiting after this round.
    pub more: bool,
}

/// Whether the stored vectors serve `provider`. A database that never embedded anything
/// adopts the provider's model here, with `applied_seq` 0: the embedder then replays the whole
/// change log, so configuring a provider embeds the sections already stored, in the background.
pub fn freshness(db: &Database, provider: &dyn EmbeddingProvider) -> Result<Freshness> {
    let txn = db.begin_read()?;
    let state = VectorState::read(&txn.open_table(VECTOR_STATE)?)?;
    if state.matches(provider.model_name(), provider.dimensions()) {
        return Ok(Freshness::Fresh);
    }
    if state.model.is_none() {
        drop(txn);
        let mut w = db.begin_write()?;
        w.set_durability(Durability::Immediate)?;
        {
            let mut t = w.open_table(VECTOR_STATE)?;
            let mut s = VectorState::read(&t)?;
            if s.model.is_none() {
                s.model = Some(provider.model_name().to_string());
                s.dimensions = Some(provider.dimensions());
                s.applied_seq = 0;
                s.write(&mut t)?;
            }
        }
        w.commit()?;
        return freshness_of(db, provider);
    }
    Ok(Freshness::Stale)
}

fn freshness_of(db: &Database, provider: &dyn EmbeddingProvider) -> Result<Freshness> {
    let txn = db.begin_read()?;
    let state = VectorState::read(&txn.open_table(VECTOR_STATE)?)?;
    Ok(
        if state.matches(provider.model_name(), provider.dimensions()) {
            Freshness::Fresh
        } else {
            Freshness::Stale
        },
    )
}

/// Section changes after `applied_seq` (what waits for the embedder).
pub fn pending_changes(db: &Database) -> Result<u64> {
    let txn = db.begin_read()?;
    let state = VectorState::read(&txn.open_table(VECTOR_STATE)?)?;
    let changes = txn.open_table(CHANGES)?;
    let mut n = 0;
    for row in changes.range(state.applied_seq + 1..)? {
        let (k, v) = row?;
        let c: ChangeRecord = decode("changes", &k.value().to_string(), v.value())?;
        if !matches!(
            c.kind,
            ChangeKind::DocumentChanged | ChangeKind::DocumentRemoved
        ) {
            n += 1;
        }
    }
    Ok(n)
}

/// Stored vectors and recorded failures.
pub fn counts(db: &Database) -> Result<(u64, u64)> {
    let txn = db.begin_read()?;
    Ok((
        txn.open_table(VECTORS)?.len()?,
        txn.open_table(VECTOR_FAILURES)?.len()?,
    ))
}

struct Work {
    kbid: String,
    input: String,
    fingerprint: [u8; 8],
}

/// Embed one round of pending changes (the caller holds the embedder lock and checked that
/// the vectors are fresh). An error leaves everything pending.
pub fn embed_pending(
    db: &Database,
    provider: &dyn EmbeddingProvider,
    matrix: &std::sync::RwLock<Option<VectorMatrix>>,
) -> Result<Round> {
    // 1. Read what changed, in a snapshot.
    let (work, removed, upto, more) = {
        let txn = db.begin_read()?;
        let state = VectorState::read(&txn.open_table(VECTOR_STATE)?)?;
        let changes = txn.open_table(CHANGES)?;
        let sections = txn.open_table(SECTIONS)?;
        let content = txn.open_table(CONTENT)?;
        let vectors = txn.open_table(VECTORS)?;
        let mut touched: BTreeMap<String, ()> = BTreeMap::new();
        let mut upto = state.applied_seq;
        let mut more = false;
        for (read, row) in changes.range(state.applied_seq + 1..)?.enumerate() {
            if read == CHANGES_PER_ROUND {
                more = true;
                break;
            }
            let (k, v) = row?;
            upto = k.value();
            let c: ChangeRecord = decode("changes", &upto.to_string(), v.value())?;
            if matches!(
                c.kind,
                ChangeKind::SectionAdded | ChangeKind::SectionChanged | ChangeKind::SectionRemoved
            ) {
                touched.insert(c.id, ());
            }
        }
        let mut work = Vec::new();
        let mut removed = Vec::new();
        for kbid in touched.into_keys() {
            let Some(rec) = sections.get(kbid.as_str())? else {
                if vectors.get(kbid.as_str())?.is_some() {
                    removed.push(kbid);
                }
                continue;
            };
            let rec: SectionRecord = decode("sections", &kbid, rec.value())?;
            let bytes =
                crate::store::txn::record_content_unverified(&content, &rec)?.unwrap_or_default();
            let Some(input) = embedding_input(&rec, &bytes) else {
                continue;
            };
            let fingerprint = input_fingerprint(&input);
            let current = vectors
                .get(kbid.as_str())?
                .and_then(|g| decode_vector(g.value()));
            if current.is_some_and(|(fp, v)| fp == fingerprint && v.len() == provider.dimensions())
            {
                continue;
            }
            work.push(Work {
                kbid,
                input,
                fingerprint,
            });
        }
        (work, removed, upto, more)
    };

    // 2. Embed, outside any transaction.
    let (vectors, failed) = embed_all(provider, &work)?;

    // 3. Commit the vectors and the new cursor together.
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    let mut applied = Vec::new();
    {
        let mut state_t = txn.open_table(VECTOR_STATE)?;
        let mut state = VectorState::read(&state_t)?;
        if !state.matches(provider.model_name(), provider.dimensions()) {
            return Err(KbError::Storage(
                "the vector model changed during embedding; run `kbdb rebuild`".into(),
            ));
        }
        let sections = txn.open_table(SECTIONS)?;
        let mut vt = txn.open_table(VECTORS)?;
        let mut ft = txn.open_table(VECTOR_FAILURES)?;
        for (w, v) in work.iter().zip(&vectors) {
            let Some(v) = v else { continue };
            if sections.get(w.kbid.as_str())?.is_none() {
                continue; // removed since the snapshot: its removal is a later change
            }
            vt.insert(w.kbid.as_str(), encode_vector(&w.fingerprint, v).as_slice())?;
            ft.remove(w.kbid.as_str())?;
            applied.push((w.kbid.as_str(), v));
        }
        for (kbid, why) in &failed {
            ft.insert(kbid.as_str(), why.as_str())?;
        }
        for kbid in &removed {
            if sections.get(kbid.as_str())?.is_none() {
                vt.remove(kbid.as_str())?;
                ft.remove(kbid.as_str())?;
            }
        }
        state.applied_seq = state.applied_seq.max(upto);
        state.write(&mut state_t)?;
    }
    txn.commit()?;
    if let Ok(mut guard) = matrix.write()
        && let Some(m) = guard.as_mut()
    {
        for (kbid, v) in &applied {
            m.upsert(kbid, v);
        }
        for kbid in &removed {
            m.remove(kbid);
        }
    }
    Ok(Round {
        embedded: applied.len(),
        removed: removed.len(),
        failed: failed.into_iter().map(|(k, _)| k).collect(),
        more,
    })
}

/// Embed every work item in provider-sized batches. A batch that fails is retried one text at
/// a time: texts that fail alone are returned as failures; when every one fails, the provider
/// itself is down and the whole call fails (nothing is recorded, all stays pending).
/// One vector per work item (None: it failed), and the failures as (kbid, why).
type Embedded = (Vec<Option<Vec<f32>>>, Vec<(String, String)>);

fn embed_all(provider: &dyn EmbeddingProvider, work: &[Work]) -> Result<Embedded> {
    let mut out: Vec<Option<Vec<f32>>> = Vec::with_capacity(work.len());
    let mut failed = Vec::new();
    for chunk in work.chunks(provider.max_batch().max(1)) {
        let texts: Vec<String> = chunk.iter().map(|w| w.input.clone()).collect();
        match provider.embed(&texts) {
            Ok(vs) => out.extend(
                check_vectors(provider, vs, texts.len())?
                    .into_iter()
                    .map(Some),
            ),
            Err(EmbedError::Unavailable(m)) => return Err(embedding_error(m)),
            Err(EmbedError::Failed(batch_error)) => {
                let mut ok = 0;
                let mut singles = Vec::with_capacity(chunk.len());
                for w in chunk {
                    match provider.embed(std::slice::from_ref(&w.input)) {
                        Ok(mut v) if v.len() == 1 && v[0].len() == provider.dimensions() => {
                            ok += 1;
                            singles.push(Some(v.remove(0)));
                        }
                        Ok(_) => {
                            failed.push((w.kbid.clone(), "malformed vector".to_string()));
                            singles.push(None);
                        }
                        Err(e) => {
                            failed.push((w.kbid.clone(), e.to_string()));
                            singles.push(None);
                        }
                    }
                }
                if ok == 0 {
                    return Err(embedding_error(batch_error));
                }
                out.extend(singles);
            }
        }
    }
    Ok((out, failed))
}

fn check_vectors(
    provider: &dyn EmbeddingProvider,
    vs: Vec<Vec<f32>>,
    want: usize,
) -> Result<Vec<Vec<f32>>> {
    if vs.len() != want || vs.iter().any(|v| v.len() != provider.dimensions()) {
        return Err(embedding_error(format!(
            "the provider returned {} vectors for {want} texts, or vectors not of {} dimensions",
            vs.len(),
            provider.dimensions()
        )));
    }
    Ok(vs)
}

/// Query embeddings a process keeps: the daemon answers a repeated query (an agent that
/// searches again, a paging client) without asking the model. At this many entries the least
/// recently used is dropped (384 floats each with all-MiniLM-L6-v2: about 0.4 MB in all).
pub const QUERY_CACHE_ENTRIES: usize = 256;

/// A small least-recently-used cache of query embeddings, keyed by model, dimensions and the
/// query text (a model change never answers with another model's vector).
/// (model, dimensions, query text, embedding)
type CachedQuery = (String, usize, String, Arc<Vec<f32>>);

#[derive(Default)]
pub struct QueryCache {
    /// Most recently used last; a linear scan of a few hundred keys costs well under the
    /// microseconds a model takes to embed.
    entries: std::sync::Mutex<std::collections::VecDeque<CachedQuery>>,
}

impl QueryCache {
    pub fn get(&self, model: &str, dims: usize, query: &str) -> Option<Arc<Vec<f32>>> {
        let mut e = self.entries.lock().ok()?;
        let i = e
            .iter()
            .position(|(m, d, q, _)| m == model && *d == dims && q == query)?;
        let hit = e.remove(i)?;
        let v = hit.3.clone();
        e.push_back(hit);
        Some(v)
    }

    pub fn put(&self, model: &str, dims: usize, query: &str, vector: Arc<Vec<f32>>) {
        let Ok(mut e) = self.entries.lock() else {
            return;
        };
        if let Some(i) = e
            .iter()
            .position(|(m, d, q, _)| m == model && *d == dims && q == query)
        {
            e.remove(i);
        }
        while e.len() >= QUERY_CACHE_ENTRIES {
            e.pop_front();
        }
        e.push_back((model.to_string(), dims, query.to_string(), vector));
    }

    pub fn clear(&self) {
        if let Ok(mut e) = self.entries.lock() {
            e.clear();
        }
    }
}

pub fn embedding_error(message: impl Into<String>) -> KbError {
    KbError::Embedding(message.into())
}

/// Re-embed every section in batches of [`REBUILD_BATCH`] with `provider`, then record its
/// model. Vectors of sections that no longer exist are dropped. `progress(done, total)`.
pub fn rebuild(
    db: &Database,
    provider: &dyn EmbeddingProvider,
    progress: &dyn Fn(u64, u64),
    now: &str,
) -> Result<(u64, u64)> {
    let (kbids, start_seq) = {
        let txn = db.begin_read()?;
        let sections = txn.open_table(SECTIONS)?;
        let mut kbids = Vec::new();
        for row in sections.iter()? {
            kbids.push(row?.0.value().to_string());
        }
        let seq = txn
            .open_table(CHANGES)?
            .last()?
            .map(|(k, _)| k.value())
            .unwrap_or(0);
        (kbids, seq)
    };
    let total = kbids.len() as u64;
    let mut done = 0u64;
    let mut embedded = 0u64;
    let mut failures = 0u64;
    {
        // Failures of an earlier model are void; this pass records its own.
        let mut txn = db.begin_write()?;
        txn.open_table(VECTOR_FAILURES)?.retain(|_, _| false)?;
        txn.set_durability(Durability::Immediate)?;
        txn.commit()?;
    }
    progress(0, total);
    for batch in kbids.chunks(REBUILD_BATCH) {
        let work: Vec<Work> = {
            let txn = db.begin_read()?;
            let sections = txn.open_table(SECTIONS)?;
            let content = txn.open_table(CONTENT)?;
            let mut work = Vec::new();
            for kbid in batch {
                let Some(rec) = sections.get(kbid.as_str())? else {
                    continue;
                };
                let rec: SectionRecord = decode("sections", kbid, rec.value())?;
                let bytes = crate::store::txn::record_content_unverified(&content, &rec)?
                    .unwrap_or_default();
                if let Some(input) = embedding_input(&rec, &bytes) {
                    work.push(Work {
                        kbid: kbid.clone(),
                        fingerprint: input_fingerprint(&input),
                        input,
                    });
                }
            }
            work
        };
        let (vectors, failed) = embed_all(provider, &work)?;
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        {
            let sections = txn.open_table(SECTIONS)?;
            let mut vt = txn.open_table(VECTORS)?;
            let mut ft = txn.open_table(VECTOR_FAILURES)?;
            for (w, v) in work.iter().zip(&vectors) {
                if let Some(v) = v
                    && sections.get(w.kbid.as_str())?.is_some()
                {
                    vt.insert(w.kbid.as_str(), encode_vector(&w.fingerprint, v).as_slice())?;
                    embedded += 1;
                }
            }
            for (kbid, why) in &failed {
                ft.insert(kbid.as_str(), why.as_str())?;
            }
            failures += failed.len() as u64;
        }
        txn.commit()?;
        done += batch.len() as u64;
        progress(done, total);
    }
    // Drop vectors of sections gone (or not embeddable), then record the model.
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    {
        let sections = txn.open_table(SECTIONS)?;
        let mut stale = Vec::new();
        {
            let vt = txn.open_table(VECTORS)?;
            for row in vt.iter()? {
                let (k, v) = row?;
                let dims_ok =
                    decode_vector(v.value()).is_some_and(|(_, v)| v.len() == provider.dimensions());
                if !dims_ok || sections.get(k.value())?.is_none() {
                    stale.push(k.value().to_string());
                }
            }
        }
        let mut vt = txn.open_table(VECTORS)?;
        for k in &stale {
            vt.remove(k.as_str())?;
        }
        let mut st = txn.open_table(VECTOR_STATE)?;
        let mut state = VectorState::read(&st)?;
        state.model = Some(provider.model_name().to_string());
        state.dimensions = Some(provider.dimensions());
        state.applied_seq = start_seq;
        state.built_at = Some(now.to_string());
        state.write(&mut st)?;
    }
    txn.commit()?;
    Ok((embedded, failures))
}

/// Load every stored vector of `dims` dimensions into memory.
pub fn load_matrix(db: &Database, dims: usize) -> Result<VectorMatrix> {
    let txn = db.begin_read()?;
    let vt = txn.open_table(VECTORS)?;
    let mut m = VectorMatrix::new(dims);
    for row in vt.iter()? {
        let (k, v) = row?;
        if let Some((_, v)) = decode_vector(v.value()) {
            m.upsert(k.value(), &v);
        }
    }
    Ok(m)
}

/// Exact cosine similarities of `query` with the stored vectors of `kbids` (missing ones are
/// left out), best first, ties by kbid.
pub fn rescore(db: &Database, query: &[f32], kbids: &[String]) -> Result<Vec<(String, f32)>> {
    let txn = db.begin_read()?;
    let vt = txn.open_table(VECTORS)?;
    let mut out = Vec::with_capacity(kbids.len());
    for kbid in kbids {
        if let Some(g) = vt.get(kbid.as_str())?
            && let Some((_, v)) = decode_vector(g.value())
            && v.len() == query.len()
        {
            let s: f32 = v.iter().zip(query).map(|(a, b)| a * b).sum();
            out.push((kbid.clone(), s));
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

/// A shared provider handle.
pub type Provider = Arc<dyn EmbeddingProvider>;

#[cfg(test)]
mod query_cache_tests {
    use super::*;

    #[test]
    fn search_query_cache_keeps_the_most_recent_and_keys_by_model() {
        let c = QueryCache::default();
        c.put("m", 2, "q0", Arc::new(vec![0.0, 1.0]));
        assert_eq!(c.get("m", 2, "q0").as_deref(), Some(&vec![0.0, 1.0]));
        assert!(c.get("other", 2, "q0").is_none());
        assert!(c.get("m", 3, "q0").is_none());
        for i in 1..QUERY_CACHE_ENTRIES {
            c.put("m", 2, &format!("q{i}"), Arc::new(vec![i as f32, 0.0]));
        }
        // Using q0 makes q1 the least recently used.
        assert!(c.get("m", 2, "q0").is_some());
        c.put("m", 2, "new", Arc::new(vec![9.0, 9.0]));
        assert!(
            c.get("m", 2, "q1").is_none(),
            "the least recently used went"
        );
        assert!(c.get("m", 2, "q0").is_some());
        assert!(c.get("m", 2, "new").is_some());
        c.clear();
        assert!(c.get("m", 2, "new").is_none());
    }
}
