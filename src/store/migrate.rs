//! The migration runner: the schema version lives in `meta`; on open every migration in
//! `src/store/migrations/` with a higher number runs, each in its own durable transaction.

use redb::{Database, Durability, ReadableDatabase, ReadableTable};

use super::tables::{META, META_SCHEMA_VERSION};
use crate::error::{KbError, Result};

pub use super::migrations::MIGRATIONS;

/// The schema version this build writes.
pub fn current_version() -> u32 {
    MIGRATIONS.last().map(|m| m.version).unwrap_or(0)
}

pub fn read_version(txn: &impl MetaReader) -> Result<u32> {
    txn.schema_version()
}

/// Something that can read the schema version (a read or a write transaction).
pub trait MetaReader {
    fn schema_version(&self) -> Result<u32>;
}

fn version_from(bytes: Option<&[u8]>) -> Result<u32> {
    match bytes {
        None => Ok(0),
        Some(b) => Ok(u32::from_le_bytes(b.try_into().map_err(|_| {
            KbError::Corrupt {
                table: "meta",
                key: META_SCHEMA_VERSION.into(),
                detail: "schema version is not 4 bytes".into(),
            }
        })?)),
    }
}

impl MetaReader for redb::ReadTransaction {
    fn schema_version(&self) -> Result<u32> {
        match self.open_table(META) {
            Ok(t) => version_from(t.get(META_SCHEMA_VERSION)?.as_ref().map(|g| g.value())),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

impl MetaReader for redb::WriteTransaction {
    fn schema_version(&self) -> Result<u32> {
        let t = self.open_table(META)?;
        version_from(t.get(META_SCHEMA_VERSION)?.as_ref().map(|g| g.value()))
    }
}

pub fn run(db: &mut Database) -> Result<()> {
    let have = read_version(&db.begin_read()?)?;
    let newest = current_version();
    if have > newest {
        return Err(KbError::Storage(format!(
            "the database has schema version {have}, newer than this kbdb supports ({newest}); upgrade kbdb"
        )));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > have) {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        (m.apply)(&txn)?;
        {
            let mut meta = txn.open_table(META)?;
            meta.insert(META_SCHEMA_VERSION, m.version.to_le_bytes().as_slice())?;
        }
        txn.commit()?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied schema migration"
        );
    }
    if have > 0 && have < newest {
        // Migrations that rewrite every record (0009, 0010) leave the file up to twice its
        // size: the old pages are free, but redb does not give space back by itself.
        match db.compact() {
            Ok(_) => tracing::info!("compacted the database file after the migrations"),
            Err(e) => tracing::warn!("cannot compact the database file after migrating: {e}"),
        }
    }
    Ok(())
}
