//! User synonyms in the `synonyms` table: lowercase term ⇒ synonym, stored both ways.

use redb::{ReadOnlyMultimapTable, ReadTransaction, ReadableMultimapTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use super::tables::SYNONYMS;
use crate::error::{KbError, Result};

const MAX_SYNONYM_CHARS: usize = 128;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SynonymEntry {
    pub term: String,
    pub synonyms: Vec<String>,
}

fn clean(field: &str, s: &str) -> Result<String> {
    let v = crate::types::validate::validate_line(field, Some(s), MAX_SYNONYM_CHARS)?
        .ok_or_else(|| KbError::invalid(field, "must not be empty"))?;
    Ok(v.to_lowercase())
}

pub fn add(txn: &WriteTransaction, term: &str, synonyms: &[String]) -> Result<()> {
    let term = clean("term", term)?;
    if synonyms.is_empty() {
        return Err(KbError::invalid("synonyms", "give at least one synonym"));
    }
    let mut t = txn.open_multimap_table(SYNONYMS)?;
    for s in synonyms {
        let s = clean("synonyms", s)?;
        if s == term {
            continue;
        }
        t.insert(term.as_str(), s.as_str())?;
        t.insert(s.as_str(), term.as_str())?;
    }
    Ok(())
}

pub fn remove(txn: &WriteTransaction, term: &str, synonyms: &[String]) -> Result<u64> {
    let term = clean("term", term)?;
    let mut t = txn.open_multimap_table(SYNONYMS)?;
    let targets: Vec<String> = if synonyms.is_empty() {
        let mut v = Vec::new();
        for s in t.get(term.as_str())? {
            v.push(s?.value().to_string());
        }
        v
    } else {
        synonyms
            .iter()
            .map(|s| clean("synonyms", s))
            .collect::<Result<_>>()?
    };
    let mut n = 0;
    for s in targets {
        if t.remove(term.as_str(), s.as_str())? {
            n += 1;
        }
        t.remove(s.as_str(), term.as_str())?;
    }
    Ok(n)
}

pub fn list(txn: &ReadTransaction) -> Result<Vec<SynonymEntry>> {
    let t = txn.open_multimap_table(SYNONYMS)?;
    let mut out = Vec::new();
    for row in t.iter()? {
        let (k, vs) = row?;
        let mut synonyms = Vec::new();
        for v in vs {
            synonyms.push(v?.value().to_string());
        }
        out.push(SynonymEntry {
            term: k.value().to_string(),
            synonyms,
        });
    }
    Ok(out)
}

/// Query-time lookups within one read snapshot.
pub struct Reader(ReadOnlyMultimapTable<&'static str, &'static str>);

impl Reader {
    pub fn open(txn: &ReadTransaction) -> Result<Reader> {
        Ok(Reader(txn.open_multimap_table(SYNONYMS)?))
    }

    pub fn get(&self, word: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(values) = self.0.get(word) {
            for v in values.flatten() {
                out.push(v.value().to_string());
            }
        }
        out
    }
}
