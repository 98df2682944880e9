//! The reference graph: edges written when a section is stored (`refs_out` in marker order,
//! `refs_in` by target name) and removed with it; read helpers for `recall` and `check`.
//! Targets are names (`Target::key`), resolved at read time, so a reference learned before its
//! target resolves as soon as the target exists.

use redb::{ReadableMultimapTable, ReadableTable};

use crate::error::Result;
use crate::text::markers::{self, Marker, Target};
use crate::types::records::{self, DocumentRecord};

pub(crate) type RefsOut<'t> = crate::store::journal::Logged<'t, (&'static str, u32), &'static [u8]>;
pub(crate) type RefsIn<'t> = crate::store::journal::LoggedMultimap<'t, &'static str, &'static str>;

/// The markers of a stored section (none for images). `base` is the document the section is
/// learned into, for relative links.
pub(crate) fn markers_of(section_type: &str, bytes: &[u8], base: Option<&str>) -> Vec<Marker> {
    if section_type.starts_with("image/") {
        return Vec::new();
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => markers::extract(text, base),
        Err(_) => Vec::new(),
    }
}

pub(crate) fn insert_edges(
    refs_out: &mut RefsOut<'_>,
    refs_in: &mut RefsIn<'_>,
    kbid: &str,
    markers: &[Marker],
) -> Result<()> {
    for (n, m) in markers.iter().enumerate() {
        refs_out.insert((kbid, n as u32), records::encode(m).as_slice())?;
        refs_in.insert(m.target.key().as_str(), kbid)?;
    }
    Ok(())
}

/// Remove every outgoing edge of `kbid` (its references to others; references *to* it stay:
/// they are other sections' content and become dangling).
pub(crate) fn remove_edges(
    refs_out: &mut RefsOut<'_>,
    refs_in: &mut RefsIn<'_>,
    kbid: &str,
) -> Result<()> {
    let markers = forward(&**refs_out, kbid)?;
    for (n, m) in markers.iter().enumerate() {
        refs_in.remove(m.target.key().as_str(), kbid)?;
        refs_out.remove((kbid, n as u32))?;
    }
    Ok(())
}

/// A section's references, in the order they appear in its text.
pub(crate) fn forward(
    refs_out: &impl ReadableTable<(&'static str, u32), &'static [u8]>,
    kbid: &str,
) -> Result<Vec<Marker>> {
    let mut out = Vec::new();
    for row in refs_out.range((kbid, 0u32)..=(kbid, u32::MAX))? {
        let (_, v) = row?;
        out.push(records::decode("refs_out", kbid, v.value())?);
    }
    Ok(out)
}

/// The sections whose text references `target` (sorted by kbid).
pub(crate) fn sources(
    refs_in: &impl ReadableMultimapTable<&'static str, &'static str>,
    target: &Target,
) -> Result<Vec<String>> {
    crate::store::txn::multimap_values(refs_in, &target.key())
}

/// The section of `doc` whose heading has the slug `anchor`, if any.
pub(crate) fn section_for_anchor(
    doc: &DocumentRecord,
    anchor: &str,
    heading_of: impl Fn(&str) -> Result<Option<String>>,
) -> Result<Option<String>> {
    for kbid in &doc.kbids {
        if let Some(h) = heading_of(kbid)?
            && markers::slug(&h) == anchor
        {
            return Ok(Some(kbid.clone()));
        }
    }
    Ok(None)
}
