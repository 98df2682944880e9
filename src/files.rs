//! File-system operations shared by the parts that replace a user's or an export's files, and
//! the bounded, non-blocking opens and reads of kbdb's own files.

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

/// Read a small file kbdb keeps or is pointed at (its configuration, the daemon's endpoint,
/// the web tokens): `read_bounded` without open flags.
pub(crate) fn read_small(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    read_bounded(path, max, 0)
}

/// A file's bytes, at most `max` of them: its size is checked before anything is read (a
/// sparse file can claim any size) and the read stops past `max` should it grow meanwhile
/// (`TooLarge` either way); opened by `open_regular` with `flags`, so a FIFO never blocks.
pub(crate) fn read_bounded(path: &Path, max: u64, flags: i32) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path, false, flags)?;
    let too_large = |len| std::io::Error::other(TooLarge { len, max });
    let len = file.metadata()?.len();
    if len > max {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// What `read_bounded` answers for a file over its bound.
#[derive(Debug)]
pub struct TooLarge {
    pub len: u64,
    pub max: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes, larger than {} bytes: more than kbdb reads from it",
            self.len, self.max
        )
    }
}

impl std::error::Error for TooLarge {}

/// `read_bounded`'s `TooLarge`, when that is what `e` is.
pub(crate) fn too_large(e: &std::io::Error) -> Option<&TooLarge> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<TooLarge>())
}

/// `read_small` of a text file (invalid UTF-8 is an error).
/// The errors name no path: the caller's message does.
pub(crate) fn read_small_text(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_small(path, max)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {e}"),
        )
    })
}

/// The last `max` bytes of a file after byte `from` (all of them when it is shorter than
/// `from`: a log started anew), opened as `read_small` opens.
pub(crate) fn read_tail(path: &Path, from: u64, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = open_regular(path, false, 0)?;
    let len = file.metadata()?.len();
    let from = if from > len { 0 } else { from };
    file.seek(SeekFrom::Start(from.max(len.saturating_sub(max))))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Open a file of kbdb's (to read; `write`: also to write, creating it when missing) with the
/// open flags `flags` (e.g. `O_NOFOLLOW`), without waiting on a FIFO (`O_NONBLOCK`), refusing
/// anything but a regular file (`NotRegular`); reads and writes then block as usual.
pub(crate) fn open_regular(path: &Path, write: bool, flags: i32) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    // A FIFO or a device already there is never opened (opening some devices acts on them).
    let existing = if flags & libc::O_NOFOLLOW != 0 {
        std::fs::symlink_metadata(path)
    } else {
        std::fs::metadata(path)
    };
    if existing.is_ok_and(|m| !m.file_type().is_file() && !m.file_type().is_symlink()) {
        return Err(std::io::Error::other(NotRegular));
    }
    let mut options = std::fs::OpenOptions::new();
    // One swapped in meanwhile opens without waiting for a writer, and a terminal does not
    // become this process's.
    options
        .read(true)
        .custom_flags(flags | libc::O_NONBLOCK | libc::O_NOCTTY);
    if write {
        options.write(true).create(true).truncate(false);
    }
    let file = options.open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other(NotRegular));
    }
    // SAFETY: fcntl on a descriptor this function owns, with flags it read from it.
    unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok(file)
}

/// What `open_regular` answers for a FIFO, a device or a folder.
#[derive(Debug)]
pub struct NotRegular;

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a regular file (a FIFO, a device or a folder)")
    }
}

impl std::error::Error for NotRegular {}

/// Whether an I/O error is `open_regular`'s `NotRegular`.
pub(crate) fn is_not_regular(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<NotRegular>())
}
