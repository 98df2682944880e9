//! This process and the others on this machine.

/// The cores this process may use, asked once: the standard library reads the cgroup's files
/// each time it is asked, which a daemon preparing every write paid for on each request.
pub(crate) fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How much nicer than its process a thread that prepares a large batch is
/// (`lower_this_thread_priority`).
pub(crate) const PREPARING_NICE: i32 = 10;

/// Give the calling thread a lower scheduling priority (`PREPARING_NICE` more, at most 19), for work that feeds
/// the one writer and must not take its core: preparing a large batch while the writer commits
/// the one before it. The writer is what bounds a bulk load; with the preparing threads at the
/// same priority, the scheduler shared the cores evenly and the writer waited (a 300k-section
/// sync: 11.3 s median against 12.2 s, docs/performance.md, *A pipelined sync*). The threads
/// still take any core the writer leaves idle. Linux only: there each thread has a nice value
/// of its own, where elsewhere `setpriority` would lower the whole process. Best effort.
pub(crate) fn lower_this_thread_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority on this thread's own id changes only its scheduling priority.
    unsafe {
        let me = libc::gettid() as libc::id_t;
        let nice = libc::getpriority(libc::PRIO_PROCESS, me);
        libc::setpriority(libc::PRIO_PROCESS, me, (nice + PREPARING_NICE).min(19));
    }
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice_of(tid: libc::id_t) -> i32 {
        // SAFETY: getpriority only reads a thread's nice value.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
    }

    fn this_thread() -> libc::id_t {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() as libc::id_t }
    }

    /// A preparing thread yields to the others; the process (the writer) keeps its priority.
    #[test]
    fn a_lowered_thread_is_nicer_and_the_rest_of_the_process_is_not() {
        let main = this_thread();
        let before = nice_of(main);
        let (lowered, main_meanwhile) = std::thread::spawn(move || {
            lower_this_thread_priority();
            (nice_of(this_thread()), nice_of(main))
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (before + PREPARING_NICE).min(19));
        assert_eq!(main_meanwhile, before);
        assert_eq!(nice_of(main), before);
    }
}
