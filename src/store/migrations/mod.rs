//! Numbered schema migrations. Each file `mNNNN_name.rs` has a note at its top saying what it
//! changes; the runner (src/store/migrate.rs) applies every migration newer than the database's
//! schema version, in order, each in one durable transaction. Never edit a released migration:
//! add a new one.

mod m0001_initial;
mod m0002_synonyms;
mod m0003_minhash_oph;
mod m0004_references;
mod m0005_minhash_sigs;
mod m0006_vectors;
mod m0007_collection;
mod m0008_sync;
mod m0009_section_bands;
mod m0010_content_seq;
mod m0011_source_keys_in_memory;
mod m0012_journal;
mod m0013_collect_detached;
mod m0014_nfc_docids;
mod m0015_record_checksums;
mod m0016_compressed_content;
mod m0017_compact_records;
mod m0018_section_docs_changes;
mod m0019_manifests_hold_doc_sections;
mod m0020_checksums_after_kbid;
mod m0021_content_dictionary;
mod m0022_first_doc_in_record;

use redb::WriteTransaction;

use crate::error::Result;

pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub apply: fn(&WriteTransaction) -> Result<()>,
}

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        apply: m0001_initial::apply,
    },
    Migration {
        version: 2,
        name: "synonyms",
        apply: m0002_synonyms::apply,
    },
    Migration {
        version: 3,
        name: "minhash_oph",
        apply: m0003_minhash_oph::apply,
    },
    Migration {
        version: 4,
        name: "references",
        apply: m0004_references::apply,
    },
    Migration {
        version: 5,
        name: "minhash_sigs",
        apply: m0005_minhash_sigs::apply,
    },
    Migration {
        version: 6,
        name: "vectors",
        apply: m0006_vectors::apply,
    },
    Migration {
        version: 7,
        name: "collection",
        apply: m0007_collection::apply,
    },
    Migration {
        version: 8,
        name: "sync",
        apply: m0008_sync::apply,
    },
    Migration {
        version: 9,
        name: "section_bands",
        apply: m0009_section_bands::apply,
    },
    Migration {
        version: 10,
        name: "content_seq",
        apply: m0010_content_seq::apply,
    },
    Migration {
        version: 11,
        name: "source_keys_in_memory",
        apply: m0011_source_keys_in_memory::apply,
    },
    Migration {
        version: 12,
        name: "journal",
        apply: m0012_journal::apply,
    },
    Migration {
        version: 13,
        name: "collect_detached",
        apply: m0013_collect_detached::apply,
    },
    Migration {
        version: 14,
        name: "nfc_docids",
        apply: m0014_nfc_docids::apply,
    },
    Migration {
        version: 15,
        name: "record_checksums",
        apply: m0015_record_checksums::apply,
    },
    Migration {
        version: 16,
        name: "compressed_content",
        apply: m0016_compressed_content::apply,
    },
    Migration {
        version: 17,
        name: "compact_records",
        apply: m0017_compact_records::apply,
    },
    Migration {
        version: 18,
        name: "section_docs_changes",
        apply: m0018_section_docs_changes::apply,
    },
    Migration {
        version: 19,
        name: "manifests_hold_doc_sections",
        apply: m0019_manifests_hold_doc_sections::apply,
    },
    Migration {
        version: 20,
        name: "checksums_after_kbid",
        apply: m0020_checksums_after_kbid::apply,
    },
    Migration {
        version: 21,
        name: "content_dictionary",
        apply: m0021_content_dictionary::apply,
    },
    Migration {
        version: 22,
        name: "first_doc_in_record",
        apply: m0022_first_doc_in_record::apply,
    },
];
