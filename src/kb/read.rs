//! Reads: sections and documents by id, recall with context, composed content, the document
//! list, the change log and the database's status.

use std::sync::atomic::Ordering;

use redb::{ReadableDatabase, ReadableTableMetadata};

use super::{Kb, folder_bytes};
use crate::error::{KbError, Result};
use crate::store::txn::ReadTables;
use crate::types::*;
use crate::{compose, index, learn, recall, store, types};

impl Kb {
    /// `retrieve`: sections by kbid, or the document record by docid.
    pub fn retrieve(&self, kbid: Option<&str>, docid: Option<&str>) -> Result<Retrieved> {
        match (kbid, docid) {
            (Some(k), _) => self.read_sections(&[k]).map(Retrieved::Sections),
            (None, Some(d)) => self.retrieve_document(d).map(Retrieved::Document),
            (None, None) => Err(KbError::InvalidInput {
                field: "kbid".into(),
                message: "Provide kbid or docid".into(),
            }),
        }
    }

    /// Read sections' content by kbid, in the order asked. An unknown kbid is an error.
    pub fn read_sections(&self, kbids: &[&str]) -> Result<Vec<RetrievedSection>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::with_capacity(kbids.len());
        for &kbid in kbids {
            types::kbid::validate_kbid("kbid", kbid)?;
            let rec = t
                .section(kbid)?
                .ok_or_else(|| KbError::NotFound(format!("Section not found: {kbid}")))?;
            let bytes = t.content_of(&rec)?.ok_or_else(|| KbError::Corrupt {
                table: "content",
                key: kbid.to_string(),
                detail: "section has no content".into(),
            })?;
            out.push(RetrievedSection {
                kbid: kbid.to_string(),
                content: learn::content_as_text(&rec.section_type, &bytes),
                size: bytes.len() as u64,
                section_type: rec.section_type,
            });
        }
        Ok(out)
    }

    /// The document record with its ordered sections.
    pub fn retrieve_document(&self, docid: &str) -> Result<DocumentView> {
        let docid = &*types::validate::docid(docid)?;
        self.with_document(docid, |t, doc| Self::document_view(t, docid, doc))
    }

    /// Read the document `docid` (validated; an unknown one is `NotFound`) and pass it on.
    fn with_document<T>(
        &self,
        docid: &str,
        then: impl FnOnce(&ReadTables, types::records::DocumentRecord) -> Result<T>,
    ) -> Result<T> {
        let docid = &*types::validate::docid(docid)?;
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let doc = t
            .document(docid)?
            .ok_or_else(|| KbError::NotFound(format!("Document not found: {docid}")))?;
        then(&t, doc)
    }

    fn document_view(
        t: &ReadTables,
        docid: &str,
        doc: types::records::DocumentRecord,
    ) -> Result<DocumentView> {
        let mut sections = Vec::with_capacity(doc.kbids.len());
        for kbid in &doc.kbids {
            if let Some(rec) = t.section(kbid)? {
                sections.push(DocumentSection {
                    kbid: kbid.clone(),
                    heading: rec.title,
                    section_type: rec.section_type,
                    size: rec.size,
                });
            }
        }
        Ok(DocumentView {
            docid: docid.to_string(),
            metadata: doc.metadata_value(),
            title: doc.title,
            doc_type: doc.doc_type,
            kbids: doc.kbids,
            sections,
            created_at: doc.created_at,
            updated_at: doc.updated_at,
        })
    }

    /// `recall`: sections with their context to `depth` (docs/references.md). Unknown kbids
    /// are an error naming them.
    pub fn recall(&self, req: &RecallRequest) -> Result<Recalled> {
        if req.kbids.len() > self.config.limits.max_batch {
            return Err(KbError::invalid(
                "kbids",
                format!(
                    "has {} kbids; the limit is {} (limits.max_batch)",
                    req.kbids.len(),
                    self.config.limits.max_batch
                ),
            ));
        }
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        recall::recall(&t, req)
    }

    /// Compose rendered markdown from kbids and docids (`content`). Unknown ids are an error
    /// that names them.
    pub fn content(&self, ids: &[String]) -> Result<ComposedContent> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let data = compose::compose(&t, ids)?;
        Ok(ComposedContent {
            content_type: "text/markdown".to_string(),
            total: data.chars().count(),
            data,
        })
    }

    /// How many sections carry each tag, most used first (ties by tag), at most `limit` tags.
    pub fn tag_counts(&self, limit: usize) -> Result<Vec<TagCount>> {
        let txn = self.db()?.begin_read()?;
        let table = txn.open_multimap_table(store::tables::TAGS)?;
        let mut out = Vec::new();
        for row in redb::ReadableMultimapTable::iter(&table)? {
            let (k, values) = row?;
            out.push(TagCount {
                tag: k.value().to_string(),
                sections: values.len(),
            });
        }
        out.sort_by(|a, b| b.sections.cmp(&a.sections).then_with(|| a.tag.cmp(&b.tag)));
        out.truncate(limit);
        Ok(out)
    }

    /// Every document, by docid.
    pub fn list_documents(&self) -> Result<Vec<DocumentSummary>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::iter(&t.documents)? {
            let (k, v) = row?;
            let docid = k.value().to_string();
            let doc: types::records::DocumentRecord =
                types::records::decode("documents", &docid, v.value())?;
            out.push(DocumentSummary {
                docid,
                title: doc.title,
                sections: doc.kbids.len(),
                updated_at: doc.updated_at,
            });
        }
        Ok(out)
    }

    /// One page of the documents, most recently updated first (ties by docid): the `limit`
    /// documents from the `offset`-th on, and how many there are. Read from the document index
    /// (kept up to date by the change log), so a page costs its own documents, not a listing of
    /// every document.
    pub fn documents_page(&self, offset: usize, limit: usize) -> Result<DocumentPage> {
        let (guard, _) = self.doc_index()?;
        let ix = guard.as_ref().expect("loaded by doc_index");
        let documents = ix
            .newest_first(offset)
            .take(limit)
            .map(|e| DocumentSummary {
                docid: e.id_str().to_string(),
                title: e.title_str().map(str::to_string),
                sections: e.sections,
                updated_at: e.updated_at.clone(),
            })
            .collect();
        Ok(DocumentPage {
            total: ix.docs.len(),
            offset,
            documents,
        })
    }

    /// The first `limit` kbids starting with `prefix`, in order (completion of `kbdb://`
    /// section URIs).
    pub fn kbids_with_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::range(&t.sections, prefix..)? {
            let (k, _) = row?;
            if !k.value().starts_with(prefix) || out.len() >= limit {
                break;
            }
            out.push(k.value().to_string());
        }
        Ok(out)
    }

    /// kbids under every source key starting with `prefix`, in key order, as of the last
    /// commit.
    pub(crate) fn source_key_range(&self, prefix: &str) -> Result<Vec<String>> {
        let collect = |index: &index::memory::SectionIndexes| -> Vec<String> {
            index
                .source_keys
                .with_prefix(prefix)
                .map(str::to_string)
                .collect()
        };
        // Loaded for the store as it is: read it without waiting for a write in progress.
        if self.indexes_generation.load(Ordering::Acquire) == self.store.generation()
            && let Some(guard) = self.indexes.read()
            && let Some(index) = guard.as_ref()
        {
            return Ok(collect(index));
        }
        // Not loaded yet, or the store was reopened since: load it, in the writers' turn.
        let turn = self.loaded_index_turn()?;
        Ok(turn.get().map(collect).unwrap_or_default())
    }

    /// A document's record and ordered kbids.
    pub(crate) fn document_record(
        &self,
        docid: &str,
    ) -> Result<(types::records::DocumentRecord, Vec<String>)> {
        let doc = self.with_document(docid, |_, doc| Ok(doc))?;
        let kbids = doc.kbids.clone();
        Ok((doc, kbids))
    }

    /// Changes committed after `seq`, oldest first (at most 10 000): what subscribers are told.
    pub fn changes_since(&self, seq: u64) -> Result<Vec<ChangeEvent>> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let mut out = Vec::new();
        for row in redb::ReadableTable::range(&t.changes, seq + 1..)?.take(10_000) {
            let (k, v) = row?;
            let seq = k.value();
            let c: types::records::ChangeRecord =
                types::records::decode("changes", &seq.to_string(), v.value())?;
            use types::records::ChangeKind::*;
            let kind = match c.kind {
                SectionAdded => "section_added",
                SectionChanged | SectionDocsChanged => "section_changed",
                SectionRemoved => "section_removed",
                DocumentChanged => "document_changed",
                DocumentRemoved => "document_removed",
                ModelsChanged => "models_changed",
            };
            let section_type = match c.kind {
                SectionAdded | SectionChanged | SectionDocsChanged => {
                    t.section(&c.id)?.map(|r| r.section_type)
                }
                _ => None,
            };
            out.push(ChangeEvent {
                seq,
                kind: kind.to_string(),
                id: c.id,
                section_type,
            });
        }
        Ok(out)
    }

    /// Database status: counts, path and the change sequence.
    pub fn status(&self) -> Result<Status> {
        let txn = self.db()?.begin_read()?;
        let t = ReadTables::open(&txn)?;
        let sections = t.sections.len()?;
        let last_change_seq = t.last_seq()?;
        let (index_count, index_applied_seq, index_path) = {
            let mut lex = self.lexical()?;
            // As a search does: commit what the index applied since its last commit, so that
            // its count is what a search sees (and agrees with the store).
            if let Err(e) = self.commit_lexical(&mut lex, &*self.db()?) {
                tracing::warn!("lexical index not updated, counting its last commit: {e}");
            }
            (
                lex.searcher().num_docs(),
                lex.applied_seq(),
                lex.path().to_path_buf(),
            )
        };
        Ok(Status {
            initialized: true,
            context_path: self.dir.display().to_string(),
            cache_stats: CacheStats {
                content_count: t.content.len()?,
                index_count,
            },
            sections,
            documents: t.documents.len()?,
            schema_version: store::migrate::read_version(&txn)?,
            last_change_seq,
            database_bytes: std::fs::metadata(self.dir.join(store::DB_FILE))
                .map(|m| m.len())
                .unwrap_or(0),
            index_bytes: folder_bytes(&index_path),
            index_applied_seq,
            index_pending_changes: last_change_seq.saturating_sub(index_applied_seq),
            content_dictionary: self.content_dictionary().map(|d| d.id),
            vectors: self.vector_status()?,
        })
    }

    /// Every user synonym, by term.
    pub fn synonyms_list(&self) -> Result<Vec<store::synonyms::SynonymEntry>> {
        let txn = self.db()?.begin_read()?;
        store::synonyms::list(&txn)
    }

    /// The sequence number of the last committed change.
    pub fn last_change_seq(&self) -> Result<u64> {
        let txn = self.db()?.begin_read()?;
        ReadTables::open(&txn)?.last_seq()
    }
}
