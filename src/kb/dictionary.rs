//! The content dictionary: a zstd dictionary trained once on a database's own sections and
//! stored in `meta`, with which their content is compressed from then on (docs/storage.md,
//! src/store/content_codec.rs). Sections are short — a few hundred bytes of Markdown — and
//! compressed one by one, so most of what they share (headings, phrasing, markup, code idioms)
//! is only found with a dictionary: on the devdocs corpus it stores the content in ~25 % fewer
//! bytes, and compressing with it is faster than without.
//!
//! When: once a write group has left `TRAIN_AT` contents in the database, the thread that
//! indexes behind the writer trains it, once (~0.1 s; `Kb::train_content_dictionary_when_due`);
//! or an import that brings that many, before it is
//! applied, on the import's own sections. A training that finds nothing to train on is tried
//! again once the contents have doubled.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use redb::{ReadTransaction, ReadableDatabase, ReadableTable};

use super::Kb;
use crate::error::{KbError, Result};
use crate::snapshot::import::ReadySection;
use crate::store::content_codec::{self, Dictionary};
use crate::store::tables::META;
use crate::store::txn::ReadTables;
use crate::types::records::{self, SectionRecord};

/// The `meta` key of the dictionary's bytes.
const META_KEY: &str = "content_dictionary";
/// Contents stored before a database trains its dictionary: enough sections for a sample of
/// what it holds; a smaller database gains little from one.
pub(crate) const TRAIN_AT: u64 = 4_096;
/// The most sections a training reads (in kbid order, which is random with respect to when
/// and where they were learned).
const SAMPLES: usize = 4_096;

/// The dictionary stored in the database, made known to this process (None: it has none yet).
pub(crate) fn stored(db: &redb::Database) -> Result<Option<&'static Dictionary>> {
    stored_in(&db.begin_read()?)
}

fn stored_in(txn: &ReadTransaction) -> Result<Option<&'static Dictionary>> {
    let meta = match txn.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(bytes) = meta.get(META_KEY)? else {
        return Ok(None);
    };
    content_codec::install(bytes.value())
        .map(Some)
        .map_err(|why| KbError::Corrupt {
            table: "meta",
            key: META_KEY.into(),
            detail: format!("the content dictionary cannot be used: {why}"),
        })
}

impl Kb {
    /// The dictionary new content is compressed with (None: the database has none yet).
    pub(crate) fn content_dictionary(&self) -> Option<&'static Dictionary> {
        self.content_dictionary.get().copied()
    }

    /// Whether a write group that left `stored` contents in the database should train the
    /// dictionary now.
    pub(super) fn dictionary_due(&self, stored: u64) -> bool {
        self.content_dictionary.get().is_none()
            && stored >= TRAIN_AT
            && stored >= self.dictionary_tried_at.load(Ordering::Relaxed) * 2
    }

    /// Train the database's content dictionary on its sections and store it (durably, before
    /// any content is compressed with it), unless it has one. Returns the dictionary's id, or
    /// None when its sections give nothing to train on (too few, too short). A failure is the
    /// caller's to report; the database goes on without one.
    pub fn train_content_dictionary(&self) -> Result<Option<u32>> {
        if let Some(d) = self.content_dictionary() {
            return Ok(Some(d.id));
        }
        let db = self.db()?;
        let txn = db.begin_read()?;
        let contents = txn
            .open_table(crate::store::tables::CONTENT)?
            .last()?
            .map_or(0, |(k, _)| k.value());
        let samples = samples(&ReadTables::open(&txn)?)?;
        drop(txn);
        let trained = self.store_trained(samples.iter().map(Vec::as_slice))?;
        if trained.is_none() {
            self.dictionary_tried_at
                .store(contents.max(1), Ordering::Relaxed);
        }
        Ok(trained)
    }

    /// Before an import (one transaction, which no dictionary would otherwise help): when the
    /// database has none and the import brings at least `TRAIN_AT` text sections, train it on
    /// those, so that the import's own content is compressed with it. A failure only logs: the
    /// import goes on, and the database trains later.
    pub(super) fn train_content_dictionary_for_import(&self, sections: &[ReadySection]) {
        if self.content_dictionary().is_some() {
            return;
        }
        let texts: Vec<&[u8]> = sections
            .iter()
            .filter(|s| !s.record.section_type.starts_with("image/"))
            .map(|s| s.bytes.as_slice())
            .collect();
        if (texts.len() as u64) < TRAIN_AT {
            return;
        }
        // Spread over the whole import (its order is the layout's, by kbid).
        let step = texts.len().div_ceil(SAMPLES);
        if let Err(e) = self.store_trained(texts.iter().step_by(step).copied()) {
            tracing::warn!("content dictionary not trained before the import: {e}");
        }
    }

    /// Train a dictionary on `samples` and store it (durably, before any content is
    /// compressed with it), unless the database has one by then. The id of the database's
    /// dictionary, or None when the samples give nothing to train on.
    fn store_trained<'a>(&self, samples: impl Iterator<Item = &'a [u8]>) -> Result<Option<u32>> {
        let samples: Vec<&[u8]> = samples.collect();
        let Some(bytes) = content_codec::train(samples.iter().copied()) else {
            tracing::debug!(
                samples = samples.len(),
                "no content dictionary: nothing to train on"
            );
            return Ok(None);
        };
        let dictionary = content_codec::install(&bytes).map_err(KbError::Storage)?;
        // A durable commit of its own, as a journal checkpoint is: the dictionary is on disk
        // before any row compressed with it can be.
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let txn = self.begin_write()?;
        {
            let mut meta = txn.open_table(META)?;
            if meta.get(META_KEY)?.is_some() {
                // Stored since this process opened the database (another `Kb` of it).
                drop(meta);
                txn.abort()?;
                drop(journal);
                let have = stored(&*self.db()?)?;
                if let Some(d) = have {
                    let _ = self.content_dictionary.set(d);
                }
                return Ok(have.map(|d| d.id));
            }
            meta.insert(META_KEY, bytes.as_slice())?;
        }
        if let Some(j) = journal.as_mut() {
            j.before_durable(&txn)?;
        }
        txn.commit()?;
        if let Some(j) = journal.as_mut() {
            j.after_durable();
        }
        drop(journal);
        let _ = self.content_dictionary.set(dictionary);
        tracing::debug!(
            id = dictionary.id,
            bytes = bytes.len(),
            samples = samples.len(),
            "content dictionary trained"
        );
        Ok(Some(dictionary.id))
    }

    /// `train_content_dictionary` once the write groups of this process have left enough
    /// contents in the database. Called by `follow_commits`, off the writer's way: training
    /// takes ~0.1 s, which on the writer would hold every write waiting behind it. A failure is
    /// logged, never a write's.
    pub fn train_content_dictionary_when_due(&self) {
        let stored = self.contents_stored.load(Ordering::Relaxed);
        if !self.dictionary_due(stored) {
            return;
        }
        // Nothing here, not even a panic (a bug), may fail the caller.
        let trained = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.train_content_dictionary()
        }));
        let why = match trained {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "internal error while training".to_string(),
        };
        self.dictionary_tried_at.store(stored, Ordering::Relaxed);
        tracing::warn!("content dictionary not trained: {why}");
    }
}

/// The contents of up to `SAMPLES` text sections, in kbid order.
fn samples(t: &ReadTables) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(SAMPLES);
    for row in t.sections.iter()? {
        let (k, v) = row?;
        let rec: SectionRecord = records::decode("sections", k.value(), v.value())?;
        if rec.section_type.starts_with("image/") {
            continue;
        }
        if let Some(bytes) = t.content_unverified_of(&rec)? {
            out.push(bytes);
            if out.len() == SAMPLES {
                break;
            }
        }
    }
    Ok(out)
}
