//! What the order of keys costs redb during a group-commit bulk ingest, to decide whether a
//! store keyed by sequence numbers would make ingest faster.
//!
//! Keys that are content hashes land in random B-tree leaves, so nearly every insert
//! copies-on-write a different leaf (and its path to the root) and a commit rewrites many
//! pages; a sequence key always appends to the last leaf, so a commit rewrites only the right
//! edge of the tree. Each layout below gets a fresh database and the same rows, inserted in
//! transactions of `--batch` rows, all committed with `Durability::None` except the last
//! (default durability):
//!
//! 1. `random &str`: 26-character base32 ids derived from a hash of the row number, in row order;
//! 2. `random &str, sorted per batch`: the same ids, each batch sorted before inserting (the
//!    sort is timed);
//! 3. `sequential u64`: the row number;
//! 4. `random u128-as-[u8;16]`: 16 random raw bytes, in row order;
//! 5. `random &str multimap`: the ids of 1. mapped to a document id (`docs/file{row/50}.md`),
//!    like a membership table.
//!
//! Values are `--value-bytes` pseudo-random bytes (the multimap has none). Prints the time,
//! rows/s, the file's size after the final commit and the time relative to `sequential u64`.
//!
//! ```text
//! cargo bench --bench store_keys -- [--rows 300000] [--batch 1024] [--value-bytes 70]
//! ```

mod common;
use common::arg;

use std::ops::Range;
use std::path::Path;
use std::time::Instant;

use redb::{Database, Durability, MultimapTableDefinition, TableDefinition, WriteTransaction};

const STR_KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("str_keys");
const U64_KEYS: TableDefinition<u64, &[u8]> = TableDefinition::new("u64_keys");
const BYTE_KEYS: TableDefinition<[u8; 16], &[u8]> = TableDefinition::new("byte_keys");
const MEMBERS: MultimapTableDefinition<&str, &str> = MultimapTableDefinition::new("members");

/// splitmix64: a 64-bit hash of `x`.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 26-character base32 id derived from a hash of `row` (like a content-hash id).
fn str_key(row: usize) -> String {
    const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let mut h = mix(row as u64);
    (0..26)
        .map(|i| {
            if i > 0 && i % 12 == 0 {
                h = mix(h);
            }
            let c = ALPHABET[(h & 31) as usize] as char;
            h >>= 5;
            c
        })
        .collect()
}

/// 16 random bytes derived from a hash of `row`.
fn byte_key(row: usize) -> [u8; 16] {
    let a = mix(row as u64 ^ 0x5555_5555_5555_5555);
    let mut key = [0; 16];
    key[..8].copy_from_slice(&a.to_le_bytes());
    key[8..].copy_from_slice(&mix(a).to_le_bytes());
    key
}

/// `len` bytes from a xorshift64 generator.
fn random_bytes(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Inserts `rows` rows in transactions of `batch` rows (`fill` inserts one batch); all but the
/// last commit are non-durable.
fn ingest(
    db: &Database,
    rows: usize,
    batch: usize,
    mut fill: impl FnMut(&WriteTransaction, Range<usize>),
) {
    let mut start = 0;
    while start < rows {
        let end = (start + batch).min(rows);
        let mut txn = db.begin_write().expect("begin write");
        if end < rows {
            txn.set_durability(Durability::None)
                .expect("set durability");
        }
        fill(&txn, start..end);
        txn.commit().expect("commit");
        start = end;
    }
}

/// One layout's ingest time and final file size.
struct Measured {
    name: &'static str,
    secs: f64,
    mb: f64,
}

fn run(
    dir: &Path,
    name: &'static str,
    rows: usize,
    batch: usize,
    fill: impl FnMut(&WriteTransaction, Range<usize>),
) -> Measured {
    let path = dir.join(format!(
        "{}.redb",
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    ));
    let db = Database::builder()
        .set_cache_size(32 * 1024 * 1024)
        .create(&path)
        .expect("create database");
    let start = Instant::now();
    ingest(&db, rows, batch, fill);
    let secs = start.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path).expect("database size").len();
    drop(db);
    Measured {
        name,
        secs,
        mb: bytes as f64 / 1e6,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = arg(&args, "--rows", 300_000);
    let batch = arg(&args, "--batch", 1024).max(1);
    let value_bytes = arg(&args, "--value-bytes", 70);

    let str_keys: Vec<String> = (0..rows).map(str_key).collect();
    let byte_keys: Vec<[u8; 16]> = (0..rows).map(byte_key).collect();
    let docs: Vec<String> = (0..rows)
        .map(|r| format!("docs/file{}.md", r / 50))
        .collect();
    let values = random_bytes(rows * value_bytes);
    let value = |row: usize| &values[row * value_bytes..(row + 1) * value_bytes];
    let dir = tempfile::tempdir().expect("temporary directory");
    let dir = dir.path();

    let results = [
        run(dir, "random &str", rows, batch, |txn, range| {
            let mut table = txn.open_table(STR_KEYS).expect("open table");
            for row in range {
                table
                    .insert(str_keys[row].as_str(), value(row))
                    .expect("insert");
            }
        }),
        run(
            dir,
            "random &str, sorted per batch",
            rows,
            batch,
            |txn, range| {
                let mut order: Vec<usize> = range.collect();
                order.sort_unstable_by(|&a, &b| str_keys[a].cmp(&str_keys[b]));
                let mut table = txn.open_table(STR_KEYS).expect("open table");
                for row in order {
                    table
                        .insert(str_keys[row].as_str(), value(row))
                        .expect("insert");
                }
            },
        ),
        run(dir, "sequential u64", rows, batch, |txn, range| {
            let mut table = txn.open_table(U64_KEYS).expect("open table");
            for row in range {
                table.insert(row as u64, value(row)).expect("insert");
            }
        }),
        run(dir, "random u128-as-[u8;16]", rows, batch, |txn, range| {
            let mut table = txn.open_table(BYTE_KEYS).expect("open table");
            for row in range {
                table.insert(byte_keys[row], value(row)).expect("insert");
            }
        }),
        run(dir, "random &str multimap", rows, batch, |txn, range| {
            let mut table = txn.open_multimap_table(MEMBERS).expect("open table");
            for row in range {
                table
                    .insert(str_keys[row].as_str(), docs[row].as_str())
                    .expect("insert");
            }
        }),
    ];

    let sequential = results
        .iter()
        .find(|r| r.name == "sequential u64")
        .map_or(1.0, |r| r.secs);
    println!("rows N = {rows}, batch B = {batch}, value bytes V = {value_bytes}\n");
    println!("| layout | seconds | rows/s | file MB | vs sequential u64 |");
    println!("|---|---:|---:|---:|---:|");
    for r in &results {
        println!(
            "| {} | {:.2} | {:.0} | {:.1} | {:.1}× |",
            r.name,
            r.secs,
            rows as f64 / r.secs,
            r.mb,
            r.secs / sequential
        );
    }
}
