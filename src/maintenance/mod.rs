//! Maintenance: integrity check, garbage collection, and the plain-file layout (export,
//! import, migrate) with its index files (docs/file-layout.md, docs/index-files.md).

pub(crate) mod check;
pub mod export;
pub(crate) mod gc;
pub mod import;
pub mod index_files;
pub mod layout;
pub mod vectors_idx;

use std::path::Path;

use redb::ReadableTable;

use crate::error::{KbError, Result};
use crate::store::txn::ReadTables;
use crate::text::markers::Marker;

/// Write `indexes/` of an export: the lexical files from the sections' text (images have
/// none) and the references from the graph.
pub(crate) fn write_export_indexes(
    t: &ReadTables,
    root: &Path,
    sections: &[(String, String, Vec<u8>)],
    now: &str,
) -> Result<()> {
    let indexed: Vec<index_files::IndexedSection> = sections
        .iter()
        .map(|(kbid, section_type, bytes)| index_files::IndexedSection {
            kbid: kbid.clone(),
            section_type: section_type.clone(),
            terms: if section_type.starts_with("image/") {
                Vec::new()
            } else {
                index_files::analyze(&String::from_utf8_lossy(bytes))
            },
        })
        .collect();
    let mut refs = Vec::new();
    for row in t.refs_out.iter()? {
        let (k, v) = row?;
        let (source, ordinal) = k.value();
        let m: Marker = crate::model::records::decode("refs_out", source, v.value())?;
        refs.push(index_files::ReferenceEntry {
            source: source.to_string(),
            ordinal,
            marker_type: index_files::marker_type_code(m.marker_type),
            target: m.target.uri(),
            snippet: m.context_snippet,
        });
    }
    let dir = root.join(layout::INDEXES_DIR);
    index_files::write_indexes(&dir, &indexed, &refs, now)
        .map_err(|e| KbError::io(format!("cannot write {}", dir.display()), e))?;
    Ok(())
}
