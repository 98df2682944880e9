//! Every document's validation, kept with the document index (`DocIndex::validations`) so that
//! the web page's validation view does not validate every document on each visit. A document's
//! validation depends on its own record and sections, on the models, and on whether the docids
//! its relationships name exist. So a change of the document makes it stale, the creation or
//! removal of a docid makes stale the documents whose last validation asked about that docid, and
//! a change of the models drops the whole index (and these results with it). Nothing here is
//! stored: it is derived from committed documents and the change log, and rebuilt after a
//! restart.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::schema::Validation;

/// What `Kb::validation_report` answers.
#[derive(Debug, Clone, Serialize)]
pub struct ValidationReport {
    /// Documents validated (every document).
    pub checked: usize,
    pub valid: usize,
    pub invalid: usize,
    /// Documents with errors or warnings.
    pub with_problems: usize,
    /// Documents validated by this call (the others' results were up to date).
    pub revalidated: usize,
    /// The first documents with errors or warnings, by docid (at most the limit asked for).
    pub problems: Vec<Validation>,
}

#[derive(Debug, Default)]
pub struct Validations {
    /// The last validation of each document, by docid.
    pub results: BTreeMap<String, Validation>,
    /// Documents to validate again before the results are read.
    pub stale: BTreeSet<String>,
    /// Docid → the documents whose last validation asked whether it exists.
    asked_by: HashMap<String, HashSet<String>>,
    /// Document → the docids its last validation asked about (to clear `asked_by`).
    asks: HashMap<String, Vec<String>>,
}

impl Validations {
    /// Results still to compute for every one of `docids`.
    pub fn all_stale<'a>(docids: impl Iterator<Item = &'a String>) -> Validations {
        Validations {
            stale: docids.cloned().collect(),
            ..Validations::default()
        }
    }

    /// The change log names `docid` as changed or removed; `existence_changed` when it was
    /// created or removed.
    pub fn touched(&mut self, docid: &str, existence_changed: bool) {
        self.stale.insert(docid.to_string());
        if existence_changed && let Some(askers) = self.asked_by.get(docid) {
            self.stale.extend(askers.iter().cloned());
        }
    }

    /// Record the validation of `docid` (None: it no longer exists) and the docids it asked
    /// about.
    pub fn set(&mut self, docid: &str, result: Option<Validation>, asked: Vec<String>) {
        for target in self.asks.remove(docid).unwrap_or_default() {
            if let Some(askers) = self.asked_by.get_mut(&target) {
                askers.remove(docid);
                if askers.is_empty() {
                    self.asked_by.remove(&target);
                }
            }
        }
        match result {
            Some(r) => {
                for target in &asked {
                    self.asked_by
                        .entry(target.clone())
                        .or_default()
                        .insert(docid.to_string());
                }
                if !asked.is_empty() {
                    self.asks.insert(docid.to_string(), asked);
                }
                self.results.insert(docid.to_string(), r);
            }
            None => {
                self.results.remove(docid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(docid: &str) -> Option<Validation> {
        Some(Validation {
            docid: docid.into(),
            model: "Base".into(),
            valid: true,
            errors: vec![],
            warnings: vec![],
        })
    }

    #[test]
    fn a_created_or_removed_docid_makes_its_askers_stale() {
        let names = ["a".to_string(), "b".to_string()];
        let mut v = Validations::all_stale(names.iter());
        assert_eq!(v.stale.len(), 2);
        v.stale.clear();
        v.set("a", ok("a"), vec!["x".into()]);
        v.set("b", ok("b"), vec![]);
        // An edit of x that keeps it existing (or not) touches only x.
        v.touched("x", false);
        assert_eq!(v.stale, BTreeSet::from(["x".to_string()]));
        v.stale.clear();
        v.touched("x", true);
        assert_eq!(v.stale, BTreeSet::from(["a".to_string(), "x".to_string()]));
        v.stale.clear();
        // Validated again without asking about x: x no longer makes it stale.
        v.set("a", ok("a"), vec![]);
        v.touched("x", true);
        assert_eq!(v.stale, BTreeSet::from(["x".to_string()]));
        v.set("b", None, vec![]);
        assert_eq!(v.results.keys().collect::<Vec<_>>(), ["a"]);
        assert!(v.asked_by.is_empty() && v.asks.is_empty());
    }
}
