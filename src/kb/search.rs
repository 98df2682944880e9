//! Search: the lexical leg (tantivy, committed read-your-writes), the vector leg (the in-memory
//! matrix) and their fusion (`search::run`).

use redb::ReadableDatabase;

use super::Kb;
use crate::error::{KbError, Result};
use crate::index::lexical::LexicalIndex;
use crate::search::{
    self, FUSION_DEPTH, Filters, Retrieval, SearchRequest, SearchResponse, VectorHits,
};
use crate::store;
use crate::store::txn::ReadTables;
use crate::vectors::embedder::Freshness;
use crate::vectors::embedder::{self};
use crate::vectors::matrix::RESCORE_MARGIN;
use crate::vectors::state::{SEARCH_CATCH_UP, poisoned};

impl Kb {
    /// The lexical search, fused with `vector` hits when given; `retrieval` is what was asked.
    /// `documents`: what the request's `model`/`where` allow (`collection_filter`), computed
    /// once by the caller for both retrieval paths.
    pub(super) fn search_lexical(
        &self,
        req: &SearchRequest,
        vector: Option<&search::VectorHits>,
        retrieval: search::Retrieval,
        documents: Option<&std::collections::HashSet<String>>,
    ) -> Result<SearchResponse> {
        let (searcher, fields) = {
            let mut lex = self.lexical()?;
            let db = self.db()?;
            // Read-your-writes: commit what learn added since the last search. The index is
            // derived: when it cannot commit (the disk is full…), search its last commit rather
            // than fail; the changes stay in the change log and the next commit holds them.
            if let Err(e) = self.commit_lexical(&mut lex, &db) {
                tracing::warn!("lexical index not updated, searching its last commit: {e}");
            }
            (lex.searcher(), lex.fields)
        };
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let syn = store::synonyms::Reader::open(&txn)?;
        let mut r = search::run(
            req,
            &searcher,
            &fields,
            &t,
            &|w| syn.get(w),
            vector,
            documents,
        )?;
        r.search_mode = retrieval.as_str().to_string();
        r.retrieval_method = match vector {
            Some(v) if v.only => "vector",
            Some(_) => "hybrid",
            None => "lexical",
        }
        .to_string();
        Ok(r)
    }

    /// Commit the lexical index now (learn leaves index commits to the next search, so bulk
    /// learning does not commit per section). Durability does not depend on it.
    pub fn flush_index(&self) -> Result<()> {
        self.commit_lexical(&mut *self.lexical()?, &*self.db()?)
    }

    /// Feed the store's new changes to the lexical index and commit it. When the commit fails
    /// because the index folder was deleted under this process (to force a rebuild, or by
    /// mistake), every later commit would fail too and searches would miss new writes until a
    /// restart: build the index again from the store instead (that catches up and commits).
    pub(super) fn commit_lexical(&self, lex: &mut LexicalIndex, db: &redb::Database) -> Result<()> {
        match lex.catch_up(db).and_then(|()| lex.commit()) {
            Err(e) if lex.folder_missing() => {
                tracing::warn!(
                    "the lexical index folder {} is gone ({e}); rebuilding it from the store",
                    lex.path().display()
                );
                *lex = LexicalIndex::open_with(&self.dir, db, self.plan.as_ref())?;
                Ok(())
            }
            r => r,
        }
    }

    /// Search (docs/search.md): lexical, or vector/hybrid through the embedding provider.
    pub fn search(&self, req: &SearchRequest) -> Result<SearchResponse> {
        let retrieval = crate::search::requested_retrieval(req)?;
        if retrieval == Retrieval::Lexical {
            let documents = self.collection_filter(req)?;
            return self.search_lexical(req, None, Retrieval::Lexical, documents.as_ref());
        }
        // A provider that is down (an unreachable API, a missing model) degrades the search to
        // lexical with a warning; only a missing configuration is an error (the spec's
        // EMBEDDING_PROVIDER_NOT_CONFIGURED).
        let query = self
            .active_provider()
            .and_then(|p| p.ok_or(KbError::EmbeddingNotConfigured))
            .and_then(|p| self.embed_query(p.as_ref(), &req.query));
        match query {
            Ok(query) => self.search_with_query_vector(req, query.as_deref()),
            Err(KbError::Embedding(why)) => {
                let documents = self.collection_filter(req)?;
                let mut r = self.search_lexical(req, None, retrieval, documents.as_ref())?;
                r.warnings.push(format!(
                    "embedding_unavailable: {why} (lexical results shown)"
                ));
                Ok(r)
            }
            Err(e) => Err(e),
        }
    }

    /// The query's embedding (None: the vectors are stale, the search falls back).
    pub(super) fn embed_query(
        &self,
        provider: &dyn crate::embedding::EmbeddingProvider,
        query: &str,
    ) -> Result<Option<Vec<f32>>> {
        if embedder::freshness(&*self.db()?, provider)? == Freshness::Stale {
            return Ok(None);
        }
        let text = query.trim();
        if text.is_empty() {
            return Ok(Some(vec![0.0; provider.dimensions()]));
        }
        let (model, dims) = (provider.model_name(), provider.dimensions());
        if let Some(v) = self.vectors.queries.get(model, dims, text) {
            return Ok(Some(v.to_vec()));
        }
        let mut v = provider
            .embed(&[text.to_string()])
            .map_err(|e| KbError::Embedding(format!("cannot embed the query: {e}")))?;
        match v.pop() {
            Some(v) if v.len() == dims => {
                self.vectors
                    .queries
                    .put(model, dims, text, std::sync::Arc::new(v.clone()));
                Ok(Some(v))
            }
            _ => Err(KbError::Embedding(
                "the provider returned no vector of the configured dimensions for the query".into(),
            )),
        }
    }

    /// Embed a query text with the configured provider (benchmarks time this apart).
    pub fn query_embedding(&self, query: &str) -> Result<Vec<f32>> {
        let provider = self
            .active_provider()?
            .ok_or(KbError::EmbeddingNotConfigured)?;
        self.embed_query(provider.as_ref(), query)?.ok_or_else(|| {
            KbError::Embedding("the vector index is stale; run `kbdb rebuild`".into())
        })
    }

    /// A `vector` or `hybrid` search with the query already embedded (None: stale vectors,
    /// lexical fallback with `vector_index_stale`).
    pub fn search_with_query_vector(
        &self,
        req: &SearchRequest,
        query: Option<&[f32]>,
    ) -> Result<SearchResponse> {
        let retrieval = crate::search::requested_retrieval(req)?;
        let documents = self.collection_filter(req)?;
        let Some(query) = query.filter(|_| retrieval != Retrieval::Lexical) else {
            let mut r = self.search_lexical(req, None, retrieval, documents.as_ref())?;
            if retrieval != Retrieval::Lexical {
                r.vector_index_stale = true;
                r.warnings.push(
                    "vector_index_stale: the stored vectors are of another model; run `kbdb rebuild` (lexical results shown)".into(),
                );
            }
            return Ok(r);
        };
        let mut warnings = Vec::new();
        // Read-your-writes for a few fresh sections; more are left to the embedder.
        let pending = embedder::pending_changes(&*self.db()?)?;
        if pending > 0 {
            if pending <= SEARCH_CATCH_UP {
                if let Err(e) = self.embed_rounds(SEARCH_CATCH_UP) {
                    warnings.push(format!(
                        "vectors_pending: {pending} section change(s) could not be embedded yet ({e})"
                    ));
                }
            } else {
                warnings.push(format!(
                    "vectors_pending: {pending} section change(s) are still being embedded; they are missing from the vector results"
                ));
            }
        }
        // The vector scan runs on its own thread while this one runs the lexical query; the
        // fusion waits for it. Without a thread to be had (a process limit), it runs here.
        let mut r = std::thread::scope(|scope| {
            let scan = std::thread::Builder::new()
                .spawn_scoped(scope, || self.vector_hits(req, query, documents.clone()));
            let v = VectorHits::pending(
                || match scan {
                    Ok(scan) => scan.join().map_err(|_| {
                        KbError::Storage("vector search: the scan thread panicked".into())
                    })?,
                    Err(_) => self.vector_hits(req, query, documents.clone()),
                },
                retrieval == Retrieval::Vector,
                self.config.embedding.rrf_k,
            );
            self.search_lexical(req, Some(&v), retrieval, documents.as_ref())
        })?;
        r.warnings.extend(warnings);
        Ok(r)
    }

    /// The nearest sections to `query` that pass the request's filters, best first.
    pub(super) fn vector_hits(
        &self,
        req: &SearchRequest,
        query: &[f32],
        documents: Option<std::collections::HashSet<String>>,
    ) -> Result<Vec<(String, f32)>> {
        let mut filters = Filters::of(req)?;
        filters.documents = documents;
        self.ensure_matrix(query.len())?;
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let candidates = {
            let guard = self.vectors.matrix.read().map_err(poisoned)?;
            let Some(m) = guard.as_ref() else {
                return Ok(Vec::new());
            };
            let mut failure = None;
            let top = m.top(
                query,
                FUSION_DEPTH,
                &mut |kbid| match filters.accept(&t, kbid) {
                    Ok(ok) => ok,
                    Err(e) => {
                        failure.get_or_insert(e);
                        false
                    }
                },
            );
            if let Some(e) = failure {
                return Err(e);
            }
            top
        };
        // Exact scores for the page asked for and a margin (reading a stored f32 vector costs
        // more than scanning thousands of quantized rows); the tail keeps its quantized order,
        // which only feeds RRF ranks, where a swap of close neighbours changes nothing visible.
        let asked = req.offset.unwrap_or(0) + req.limit.unwrap_or(crate::search::DEFAULT_LIMIT);
        let head = candidates.len().min(asked + RESCORE_MARGIN);
        let head_kbids: Vec<String> = candidates[..head].iter().map(|(k, _)| k.clone()).collect();
        let mut out = embedder::rescore(&*self.db()?, query, &head_kbids)?;
        out.extend(candidates.into_iter().skip(head));
        Ok(out)
    }
}
