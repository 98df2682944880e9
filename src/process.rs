//! This process and the others on this machine.

/// The cores this process may use, asked once: the standard library reads the cgroup's files
/// each time it is asked, which a daemon preparing every write paid for on each request.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Whether any thread of `pid` still runs. A zombie has released everything (files, the
/// database lock) — but the group leader turns zombie before its other threads finish
/// exiting, so every thread is looked at.
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        // No /proc: ask the kernel (a zombie then counts as alive until reaped).
        // SAFETY: signal 0 only checks that the process exists.
        return unsafe { libc::kill(pid as libc::pid_t, 0) == 0 };
    };
    tasks.flatten().any(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
            // "tid (comm) S …": the state follows the last ')'.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
        })
    })
}

/// Turn transparent huge pages off for this process (Linux; elsewhere nothing). The allocator
/// asks for huge pages for its arenas, and each first touch of one zeroes 2 MiB on the faulting
/// thread: in the daemon that stalled whichever request hit it, doubling the p99 latency of
/// writes (docs/decisions.md). Best effort: a kernel that refuses leaves things as they were.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes one integer argument and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
