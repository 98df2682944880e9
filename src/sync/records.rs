//! The sync records in the store (migration 0008): `sync_roots` (a synced folder → its docid
//! prefix) and `sync_files` (a docid → the file it came from). Versioned like every record
//! (one version byte, then postcard).

use std::fs::Metadata;

use redb::{ReadableTable, Table};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::types::records::{decode, encode};

/// A synced folder.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SyncRoot {
    /// The docid prefix of its documents ("" or ending with `/`).
    pub prefix: String,
    pub created_at: String,
}

/// The file a synced document came from, as kbdb last read (or wrote) it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileRecord {
    /// The synced folder (canonical path).
    pub root: String,
    /// The file's path relative to the folder, `/`-separated.
    pub path: String,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub hash: String,
    pub size: u64,
    /// Modification and status-change times, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    /// When kbdb read or wrote the file (ns since the epoch). A file changed again within the
    /// file system's timestamp granularity of that moment could keep the same times, so such a
    /// record never proves the file unchanged by its times alone (it is hashed instead).
    pub recorded_at_ns: i64,
    /// The front matter's syntax: `yaml`, `toml`, or None when the file has none.
    pub front_matter: Option<String>,
}

/// The parts of a file's status that tell whether it may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

impl FileStat {
    pub fn of(m: &Metadata) -> FileStat {
        use std::os::unix::fs::MetadataExt;
        FileStat {
            size: m.len(),
            mtime_ns: m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec(),
            ctime_ns: m.ctime().saturating_mul(1_000_000_000) + m.ctime_nsec(),
            ino: m.ino(),
        }
    }
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl FileRecord {
    pub fn stat(&self) -> FileStat {
        FileStat {
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        }
    }

    /// Whether `st` proves the file unchanged since this record: the same size, times and
    /// inode, and the record was taken long enough after the last change that a later write
    /// would have moved the times (100 ms on file systems with sub-second times, else 2 s).
    pub fn proves_unchanged(&self, st: &FileStat) -> bool {
        if self.stat() != *st {
            return false;
        }
        let last = self.mtime_ns.max(self.ctime_ns);
        let whole_seconds =
            self.mtime_ns % 1_000_000_000 == 0 && self.ctime_ns % 1_000_000_000 == 0;
        let margin = if whole_seconds {
            2_000_000_000
        } else {
            100_000_000
        };
        self.recorded_at_ns.saturating_sub(last) >= margin
    }
}

pub(crate) type RecordTable<'t> = Table<'t, &'static str, &'static [u8]>;

pub(crate) fn get_file(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    docid: &str,
) -> Result<Option<FileRecord>> {
    match t.get(docid)? {
        Some(v) => Ok(Some(decode("sync_files", docid, v.value())?)),
        None => Ok(None),
    }
}

pub(crate) fn put_file(t: &mut RecordTable<'_>, docid: &str, rec: &FileRecord) -> Result<()> {
    t.insert(docid, encode(rec).as_slice())?;
    Ok(())
}

/// The file records of docids starting with `prefix` that belong to `root` (all roots: None),
/// in docid order.
pub(crate) fn files_under(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    prefix: &str,
    root: Option<&str>,
) -> Result<Vec<(String, FileRecord)>> {
    let mut out = Vec::new();
    for row in t.range(prefix..)? {
        let (k, v) = row?;
        let docid = k.value();
        if !docid.starts_with(prefix) {
            break;
        }
        let rec: FileRecord = decode("sync_files", docid, v.value())?;
        if root.is_none_or(|r| r == rec.root) {
            out.push((docid.to_string(), rec));
        }
    }
    Ok(out)
}

/// Every synced folder: (canonical path, root).
pub(crate) fn roots(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<(String, SyncRoot)>> {
    let mut out = Vec::new();
    for row in t.iter()? {
        let (k, v) = row?;
        out.push((
            k.value().to_string(),
            decode("sync_roots", k.value(), v.value())?,
        ));
    }
    Ok(out)
}

/// The synced folder whose prefix `docid` starts with (the longest such prefix).
pub(crate) fn root_of_docid(
    t: &impl ReadableTable<&'static str, &'static [u8]>,
    docid: &str,
) -> Result<Option<(String, SyncRoot)>> {
    Ok(roots(t)?
        .into_iter()
        .filter(|(_, r)| docid.starts_with(&r.prefix))
        .max_by_key(|(_, r)| r.prefix.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(mtime_ns: i64, recorded_at_ns: i64) -> FileRecord {
        FileRecord {
            root: "/r".into(),
            path: "a.md".into(),
            hash: "h".into(),
            size: 3,
            mtime_ns,
            ctime_ns: mtime_ns,
            ino: 7,
            recorded_at_ns,
            front_matter: None,
        }
    }

    #[test]
    fn a_record_taken_right_after_a_change_does_not_prove_the_file_unchanged() {
        let t = 1_700_000_000_123_456_789;
        let r = rec(t, t + 5_000_000);
        assert!(
            !r.proves_unchanged(&r.stat()),
            "recorded 5 ms after the change"
        );
        let r = rec(t, t + 500_000_000);
        assert!(r.proves_unchanged(&r.stat()));
        let mut st = r.stat();
        st.size += 1;
        assert!(!r.proves_unchanged(&st));
        // Whole-second times (a coarse file system): 2 s of margin.
        let t = 1_700_000_000_000_000_000;
        assert!(!rec(t, t + 1_500_000_000).proves_unchanged(&rec(t, 0).stat()));
        assert!(rec(t, t + 2_500_000_000).proves_unchanged(&rec(t, 0).stat()));
    }
}
