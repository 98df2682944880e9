mod cli;

/// mimalloc instead of the system allocator: a write allocates many small strings and JSON
/// values, and glibc's malloc took ~15 % of the daemon's CPU under concurrent writers
/// (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::run());
}
