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
    return_freed_memory_sooner();
    std::process::exit(cli::run());
}

/// mimalloc 3 keeps the memory a program frees for a second (its purge delay) before giving it
/// back to the system. A bulk load frees each batch's memory while it allocates the next, so
/// its peak held the freed memory of many batches: 341 MB at 300k sections, 279 MB with the
/// 10 ms of mimalloc 2 at the same speed (docs/performance.md). Set before any thread starts.
fn return_freed_memory_sooner() {
    /// `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (libmimalloc-sys names no constant
    /// for it; `purge_delay_is_mimalloc_3s_option_15` checks the number).
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    const PURGE_DELAY_MS: std::ffi::c_long = 10;
    // SAFETY: sets a global option; mimalloc reads options atomically.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

#[cfg(test)]
mod tests {
    /// Option 15 is the purge delay: its default (1,000 ms in mimalloc 3) and no other option's.
    /// A mimalloc whose options are numbered otherwise fails here rather than silently setting
    /// another option.
    #[test]
    fn purge_delay_is_mimalloc_3s_option_15() {
        // SAFETY: reads a global option.
        let before = unsafe { libmimalloc_sys::mi_option_get(15) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(before, 1000, "option 15 is not the purge delay");
        }
        super::return_freed_memory_sooner();
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(15) }, 10);
    }
}
