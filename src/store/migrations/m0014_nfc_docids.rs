//! 0014 nfc_docids: from this version on, every docid is stored in Unicode Normalization Form C
//! (`types::validate::docid`), so `café` typed with a combining accent and with a precomposed
//! `é` name one document. Older versions stored a docid as the user typed it. This migration
//! renames each stored non-NFC docid to its NFC form: the manifest, both membership tables, the
//! folder-sync record and the references that name it. If the NFC name is already taken by
//! another document, the renamed one becomes `<nfc>-2` (or the first free `-N`) and a warning
//! says so: both documents stay, neither is merged into the other. Each moved section is logged
//! as changed, so the lexical index re-reads its docids on the next replay.

use std::collections::BTreeSet;

use redb::{ReadableTable, WriteTransaction};

use crate::error::Result;
use crate::store::tables::{DOCUMENTS, REFS_OUT, SYNC_FILES};
use crate::store::txn::WriteTables;
use crate::text::markers::{Marker, Target};
use crate::types::records::{self, ChangeKind};
use crate::types::validate::nfc;

pub fn apply(txn: &WriteTransaction) -> Result<()> {
    let renames = plan(txn)?;
    let stale_refs = stale_references(txn)?;
    if renames.is_empty() && stale_refs.is_empty() {
        return Ok(());
    }
    let mut t = WriteTables::open(txn, crate::now())?;
    for (old, new) in &renames {
        rename_document(&mut t, old, new)?;
    }
    for (kbid, n, mut marker) in stale_refs {
        t.refs_in
            .remove(marker.target.key().as_str(), kbid.as_str())?;
        if let Target::Document { docid, .. } = &mut marker.target {
            *docid = nfc(docid).into_owned();
        }
        t.refs_out
            .insert((kbid.as_str(), n), records::encode(&marker).as_slice())?;
        t.refs_in
            .insert(marker.target.key().as_str(), kbid.as_str())?;
    }
    t.flush()?;
    drop(t);
    move_sync_records(txn, &renames)?;
    Ok(())
}

/// Each non-NFC docid with the name it gets: its NFC form, or `<nfc>-N` when that is taken.
fn plan(txn: &WriteTransaction) -> Result<Vec<(String, String)>> {
    let docs = txn.open_table(DOCUMENTS)?;
    let mut taken = BTreeSet::new();
    let mut odd = Vec::new();
    for row in docs.iter()? {
        let (k, _) = row?;
        let docid = k.value();
        if nfc(docid) == docid {
            taken.insert(docid.to_string());
        } else {
            odd.push(docid.to_string());
        }
    }
    let mut renames = Vec::with_capacity(odd.len());
    for old in odd {
        let want = nfc(&old).into_owned();
        let mut new = want.clone();
        let mut n = 2;
        while taken.contains(&new) {
            new = format!("{want}-{n}");
            n += 1;
        }
        if new != want {
            tracing::warn!(
                docid = %old, renamed = %new,
                "a document already has this docid in NFC; the other one is renamed"
            );
        }
        taken.insert(new.clone());
        renames.push((old, new));
    }
    Ok(renames)
}

/// References (`refs_out` rows) whose target names a document by a non-NFC docid.
fn stale_references(txn: &WriteTransaction) -> Result<Vec<(String, u32, Marker)>> {
    let refs = txn.open_table(REFS_OUT)?;
    let mut out = Vec::new();
    for row in refs.iter()? {
        let (k, v) = row?;
        let (kbid, n) = k.value();
        let marker: Marker = records::decode("refs_out", kbid, v.value())?;
        if let Target::Document { docid, .. } = &marker.target
            && nfc(docid) != docid.as_str()
        {
            out.push((kbid.to_string(), n, marker));
        }
    }
    Ok(out)
}

fn rename_document(t: &mut WriteTables<'_>, old: &str, new: &str) -> Result<()> {
    let Some(doc) = t.document(old)? else {
        return Ok(());
    };
    let mut seen = BTreeSet::new();
    for kbid in &doc.kbids {
        if seen.insert(kbid.clone()) {
            t.remove_membership(old, kbid)?;
            t.add_membership(new, kbid)?;
        }
    }
    // Nothing was detached: every section moved to the new name.
    t.take_maybe_detached();
    t.put_document(new, &doc)?;
    t.remove_document(old)?;
    t.log(ChangeKind::DocumentRemoved, old)?;
    t.log(ChangeKind::DocumentChanged, new)?;
    tracing::info!(docid = %old, renamed = %new, "docid stored in NFC");
    Ok(())
}

fn move_sync_records(txn: &WriteTransaction, renames: &[(String, String)]) -> Result<()> {
    let mut files = txn.open_table(SYNC_FILES)?;
    for (old, new) in renames {
        let record = files.remove(old.as_str())?.map(|v| v.value().to_vec());
        if let Some(bytes) = record {
            files.insert(new.as_str(), bytes.as_slice())?;
        }
    }
    Ok(())
}
