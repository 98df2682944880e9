//! Other processes on this machine.

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
