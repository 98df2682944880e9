//! File-system operations shared by the parts that replace a user's or an export's files.

use std::path::Path;

/// Exchange the entries at `a` and `b` atomically (both must exist): each path then names what
/// the other named, with no moment where either is missing. Linux `renameat2(RENAME_EXCHANGE)`;
/// elsewhere, or on a file system without it, an error that [`exchange_unsupported`] recognises.
#[cfg(target_os = "linux")]
pub(crate) fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other("a path holds a NUL byte"))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: two valid NUL-terminated paths; the call reads them and nothing else.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn exchange(_: &Path, _: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Whether `e` says the file system (or kernel) cannot exchange two entries.
pub(crate) fn exchange_unsupported(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::Unsupported
        || matches!(
            e.raw_os_error(),
            Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP)
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_swaps_two_files() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "first").unwrap();
        std::fs::write(&b, "second").unwrap();
        match exchange(&a, &b) {
            Ok(()) => {
                assert_eq!(std::fs::read_to_string(&a).unwrap(), "second");
                assert_eq!(std::fs::read_to_string(&b).unwrap(), "first");
            }
            Err(e) => assert!(exchange_unsupported(&e), "{e}"),
        }
        let missing = dir.path().join("missing");
        assert!(exchange(&a, &missing).is_err());
    }
}
