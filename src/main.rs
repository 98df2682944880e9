mod cli;

/// mimalloc instead of the system allocator: a write allocates many small strings and JSON
/// values, and glibc's malloc took ~15 % of the daemon's CPU under concurrent writers
/// (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // Every command, not only the daemon: a bulk `learn --jsonl --embedded` spent a quarter of
    // its time in the kernel zeroing fresh 2 MiB pages for the allocator (docs/performance.md).
    kbdb::disable_transparent_huge_pages();
    std::process::exit(cli::run());
}
