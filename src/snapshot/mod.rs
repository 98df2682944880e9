//! The plain-file layout: a snapshot of the database as files (export), read back (import,
//! migrate), with its index files (docs/file-layout.md, docs/index-files.md).

pub mod export;
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
        let m: Marker = crate::types::records::decode("refs_out", source, v.value())?;
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

/// Write `indexes/vectors.idx` and `vectors-meta.toml` from the stored vectors (nothing when no
/// vector was ever embedded). Keys are the first 16 characters of each kbid (hybrid-search
/// spec); the meta records the model of the vectors.
pub(crate) fn write_export_vectors(
    txn: &redb::ReadTransaction,
    root: &Path,
    now: &str,
) -> Result<()> {
    let state = crate::vectors::store::read_state(txn)?;
    let (Some(model), Some(dims)) = (state.model, state.dimensions) else {
        return Ok(());
    };
    let Ok(dims16) = u16::try_from(dims) else {
        return Ok(());
    };
    let vt = txn.open_table(crate::store::tables::VECTORS)?;
    let mut idx = vectors_idx::VectorsIdx::new(dims16);
    for row in vt.iter()? {
        let (k, v) = row?;
        if let Some((_, v)) = crate::vectors::store::decode_vector(v.value())
            && v.len() == dims
        {
            idx.push(k.value(), v);
        }
    }
    if idx.records.is_empty() {
        return Ok(());
    }
    let meta = vectors_idx::VectorsMeta {
        model_name: model,
        dimensions: dims16,
        version: vectors_idx::VERSION as u32,
        last_built: state.built_at.unwrap_or_else(|| now.to_string()),
        section_count: idx.records.len() as u64,
    };
    let bytes = idx
        .encode()
        .map_err(|e| KbError::Storage(format!("cannot encode vectors.idx: {e}")))?;
    let dir = root.join(layout::INDEXES_DIR);
    let write = |name: &str, data: &[u8]| {
        std::fs::write(dir.join(name), data)
            .map_err(|e| KbError::io(format!("cannot write {}", dir.join(name).display()), e))
    };
    write(vectors_idx::VECTORS_FILE, &bytes)?;
    write(vectors_idx::META_FILE, meta.to_toml().as_bytes())?;
    Ok(())
}
