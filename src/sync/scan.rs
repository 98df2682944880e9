//! Which files of a synced folder are documents, and reading them.
//!
//! A file is synced when its name ends in `.md` or `.mdx` (any case), no component of its path
//! below the folder starts with `.` (hidden files and folders, `.git` among them), and the
//! `.gitignore` and `.ignore` files inside the folder do not exclude it or a folder above it
//! (git's rules: the deepest file that has a matching pattern decides, `!pattern` re-includes,
//! nothing inside an excluded folder can be re-included; `.ignore` wins over `.gitignore` in the
//! same folder). Patterns are matched by the `ignore` crate (ripgrep's). Ignore files above the
//! synced folder, `.git/info/exclude` and the global git excludes are not read: what is synced
//! depends only on the folder itself. Symbolic links are not followed.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::records::FileStat;

/// Ignore-file names read in every folder (later ones win).
pub const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];

/// Whether `path` names a markdown file (`.md` / `.mdx`, any case).
pub fn is_markdown(path: &Path) -> bool {
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("mdx"))
}

/// Whether a file or folder name is hidden (starts with `.`).
pub fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

/// Whether a file name is one of the ignore files (a change to it changes what is synced).
pub fn is_ignore_file(path: &Path) -> bool {
    path.file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| IGNORE_FILES.contains(&n))
}

/// The docid of a file: `prefix` + its relative path without the extension, in Unicode NFC.
/// File names may be in either form (macOS writes NFD, most Linux tools NFC, and a Linux
/// folder can hold both spellings of `é.md`): both are one docid, so one document.
pub fn docid_of(prefix: &str, rel: &str) -> String {
    let stem = match rel.rfind('.') {
        Some(i) if !rel[i..].contains('/') => &rel[..i],
        _ => rel,
    };
    nfc(&format!("{prefix}{stem}"))
}

/// `s` in Unicode Normalization Form C.
pub fn nfc(s: &str) -> String {
    crate::types::validate::nfc(s).into_owned()
}

/// The ignore rules of one synced folder; ignore files are read once per folder and cached.
pub struct Rules {
    root: PathBuf,
    /// Paths never synced (the database folder when it lies inside the synced one).
    exclude: Vec<PathBuf>,
    matchers: HashMap<PathBuf, Option<Arc<Gitignore>>>,
    /// Ignore files that could not be read or parsed: (path, why).
    pub problems: Vec<(PathBuf, String)>,
    /// Patterns read from ignore files so far (at most [`MAX_IGNORE_PATTERNS_TOTAL`]).
    patterns: usize,
}

impl Rules {
    pub fn new(root: &Path, exclude: Vec<PathBuf>) -> Rules {
        Rules {
            root: root.to_path_buf(),
            exclude,
            matchers: HashMap::new(),
            problems: Vec::new(),
            patterns: 0,
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Forget the cached ignore files (one of them changed).
    pub fn invalidate(&mut self) {
        self.matchers.clear();
        self.patterns = 0;
    }

    /// The ignore rules of the folder `dir` itself (its own ignore files), if it has any.
    fn matcher(&mut self, dir: &Path) -> Option<Arc<Gitignore>> {
        if !self.matchers.contains_key(dir) {
            let mut builder = GitignoreBuilder::new(dir);
            let mut any = false;
            for name in IGNORE_FILES {
                let file = dir.join(name);
                match read_ignore_file(&file) {
                    Ok(None) => {}
                    Ok(Some((_, n))) if self.patterns + n > MAX_IGNORE_PATTERNS_TOTAL => {
                        self.problems.push((
                            file,
                            format!(
                                "the folder's ignore files have more than {MAX_IGNORE_PATTERNS_TOTAL} patterns together, the most kbdb uses"
                            ),
                        ));
                    }
                    Ok(Some((text, n))) => {
                        any = true;
                        self.patterns += n;
                        for (i, line) in text.lines().enumerate() {
                            // As git: a byte-order mark at the start is not part of a pattern.
                            let line = if i == 0 {
                                line.trim_start_matches('\u{feff}')
                            } else {
                                line
                            };
                            if let Err(e) = builder.add_line(Some(file.clone()), line) {
                                self.problems
                                    .push((file.clone(), format!("line {}: {e}", i + 1)));
                            }
                        }
                    }
                    Err(why) => self.problems.push((file, why)),
                }
            }
            let gi = if any {
                match builder.build() {
                    Ok(g) => Some(Arc::new(g)),
                    Err(e) => {
                        self.problems.push((dir.to_path_buf(), e.to_string()));
                        None
                    }
                }
            } else {
                None
            };
            self.matchers.insert(dir.to_path_buf(), gi);
        }
        self.matchers.get(dir).cloned().flatten()
    }

    /// The rules in force inside the folder `dir` (inside the synced folder): the matchers of
    /// the folders from the synced folder down to `dir`, the deepest last.
    fn stack_for(&mut self, dir: &Path) -> Vec<Arc<Gitignore>> {
        let mut stack = Vec::new();
        let Ok(rel) = dir.strip_prefix(&self.root) else {
            return stack;
        };
        let mut cur = self.root.clone();
        stack.extend(self.matcher(&cur));
        for c in rel.components() {
            if let Component::Normal(n) = c {
                cur.push(n);
                stack.extend(self.matcher(&cur));
            }
        }
        stack
    }

    /// Whether the entry `path` (a folder when `is_dir`) is excluded, given the rules in force
    /// in its folder (`stack`, from [`Rules::stack_for`]) and that the folders above it are not
    /// excluded. The deepest ignore file with a matching pattern decides.
    fn excluded_by(&self, stack: &[Arc<Gitignore>], path: &Path, is_dir: bool) -> bool {
        if path.file_name().is_some_and(is_hidden) || self.exclude.iter().any(|e| e == path) {
            return true;
        }
        for gi in stack.iter().rev() {
            match gi.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }

    /// Whether `path` (inside the folder) or a folder between it and the synced folder is
    /// excluded. A path outside the synced folder is excluded.
    pub fn excluded(&mut self, path: &Path, is_dir: bool) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return true;
        };
        let parts: Vec<&OsStr> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        // The rules are gathered on the way down (one look-up per folder), so a deep path
        // costs its depth, not its depth squared.
        let mut cur = self.root.clone();
        let mut stack: Vec<Arc<Gitignore>> = self.matcher(&cur).into_iter().collect();
        for (i, part) in parts.iter().enumerate() {
            cur.push(part);
            let dir = i + 1 < parts.len() || is_dir;
            if self.excluded_by(&stack, &cur, dir) {
                return true;
            }
            if dir {
                stack.extend(self.matcher(&cur));
            }
        }
        false
    }
}

/// Largest ignore file read (bytes). The matcher's memory and build time grow with the
/// patterns (10,000 patterns: 155 MB; 100,000: 1.25 GB), so a larger file is not used
/// (reported, as a file that does not parse is); real ones are a few kilobytes.
pub const MAX_IGNORE_BYTES: u64 = 64 * 1024;
/// Most patterns (non-blank, non-comment lines) of one ignore file.
pub const MAX_IGNORE_PATTERNS: usize = 2_000;
/// Most patterns of all the ignore files of one folder tree together (one [`Rules`]).
pub const MAX_IGNORE_PATTERNS_TOTAL: usize = 20_000;

/// The text of the ignore file `file` (None: there is none) and its pattern count, read
/// within the bounds above.
fn read_ignore_file(file: &Path) -> Result<Option<(String, usize)>, String> {
    let (mut f, m) = match open_regular(file) {
        Ok(x) => x,
        Err(OpenError::Missing) => return Ok(None),
        // A folder named `.gitignore` is no ignore file; anything else odd is reported.
        Err(OpenError::NotRegular("a folder")) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let too_big = || {
        format!("is larger than {MAX_IGNORE_BYTES} bytes, the most kbdb reads of an ignore file")
    };
    if m.len() > MAX_IGNORE_BYTES {
        return Err(too_big());
    }
    let bytes = read_bounded(&mut f, MAX_IGNORE_BYTES)
        .map_err(|e| format!("cannot be read: {e}"))?
        .ok_or_else(too_big)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let patterns = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    if patterns > MAX_IGNORE_PATTERNS {
        return Err(format!(
            "has {patterns} patterns; the most kbdb uses from one ignore file is {MAX_IGNORE_PATTERNS}"
        ));
    }
    Ok(Some((text, patterns)))
}

/// One entry met by [`walk`].
pub enum Entry<'a> {
    /// A folder that is synced (its content follows).
    Dir(&'a Path),
    /// A markdown file that is synced, with its status and (device, inode).
    File(&'a Path, FileStat, (u64, u64)),
    /// A markdown file that is left alone, and why.
    Skipped(&'a Path, String),
    /// A folder that could not be read (files recorded below it must not count as removed).
    Unreadable(&'a Path, String),
}

/// Deepest folder a walk descends into, below the synced folder. Far deeper than any
/// real tree; a chain deeper than this is reported (`Entry::Unreadable`, naming the folder
/// where the walk stopped) and the records below it are kept.
pub const MAX_DEPTH: usize = 256;

/// Walk `dir` (inside the synced folder, not excluded itself) in name order, depth first:
/// every synced folder below it and every markdown file that is synced.
pub fn walk(rules: &mut Rules, dir: &Path, visit: &mut dyn FnMut(Entry<'_>)) {
    let mut stack = rules.stack_for(dir);
    let depth = dir
        .strip_prefix(&rules.root)
        .map_or(0, |r| r.components().count());
    walk_in(rules, dir, &mut stack, depth, visit);
}

/// [`walk`] inside `dir`, `depth` folders below the synced folder, with the rules in force in
/// `dir` (`stack`, its own included): each entry is checked against the stack, never by
/// looking the folders above it up again.
fn walk_in(
    rules: &mut Rules,
    dir: &Path,
    stack: &mut Vec<Arc<Gitignore>>,
    depth: usize,
    visit: &mut dyn FnMut(Entry<'_>),
) {
    let read = match std::fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) => {
            visit(Entry::Unreadable(dir, e.to_string()));
            return;
        }
    };
    let mut entries: Vec<(PathBuf, std::fs::FileType)> = Vec::new();
    for e in read {
        match e {
            Ok(e) => match e.file_type() {
                Ok(t) => entries.push((e.path(), t)),
                Err(err) => visit(Entry::Unreadable(&e.path(), err.to_string())),
            },
            Err(err) => {
                visit(Entry::Unreadable(dir, err.to_string()));
                return;
            }
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, t) in entries {
        if t.is_dir() {
            if rules.excluded_by(stack, &path, true) {
                continue;
            }
            if depth + 1 > MAX_DEPTH {
                visit(Entry::Unreadable(
                    &path,
                    format!(
                        "is more than {MAX_DEPTH} folders deep; kbdb does not sync below that depth"
                    ),
                ));
                continue;
            }
            visit(Entry::Dir(&path));
            let pushed = match rules.matcher(&path) {
                Some(gi) => {
                    stack.push(gi);
                    true
                }
                None => false,
            };
            walk_in(rules, &path, stack, depth + 1, visit);
            if pushed {
                stack.pop();
            }
        } else if is_markdown(&path) && !rules.excluded_by(stack, &path, false) {
            if t.is_symlink() {
                visit(Entry::Skipped(
                    &path,
                    "is a symbolic link (links are not followed)".into(),
                ));
            } else if t.is_file() {
                match std::fs::symlink_metadata(&path) {
                    Ok(m) => visit(Entry::File(&path, FileStat::of(&m), identity(&m))),
                    // Gone since the folder was listed: as if never there.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => visit(Entry::Skipped(&path, format!("cannot be read: {e}"))),
                }
            } else if let Some(what) = kind_of(t) {
                visit(Entry::Skipped(
                    &path,
                    OpenError::NotRegular(what).to_string(),
                ));
            }
        }
    }
}

/// The synced folders at and below `dir` (for a watcher).
pub fn synced_dirs(rules: &mut Rules, dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    walk(rules, dir, &mut |e| {
        if let Entry::Dir(d) = e {
            out.push(d.to_path_buf());
        }
    });
    out
}

/// A file's bytes with the status they were read under.
pub struct FileRead {
    pub bytes: Vec<u8>,
    pub stat: FileStat,
}

/// Why a file could not be read.
pub enum ReadError {
    /// It does not exist (any more).
    Missing,
    /// Anything else, as a reason for the report.
    Other(String),
}

/// Why [`open_regular`] refused a path.
#[derive(Debug)]
pub enum OpenError {
    /// Nothing is there.
    Missing,
    /// Something that is not a regular file is there (a symbolic link, a FIFO, a socket, a
    /// device, a folder): what it is.
    NotRegular(&'static str),
    Io(std::io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Missing => write!(f, "does not exist"),
            OpenError::NotRegular(what) => write!(
                f,
                "is {what}, not a regular file (kbdb reads and writes regular files only)"
            ),
            OpenError::Io(e) => write!(f, "cannot be read: {e}"),
        }
    }
}

/// What a file-system entry is, in words, when it is not a regular file.
fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        None
    } else if t.is_symlink() {
        Some("a symbolic link")
    } else if t.is_dir() {
        Some("a folder")
    } else if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_block_device() || t.is_char_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

/// Open a file of a synced folder for reading, refusing anything but a regular file, without
/// ever blocking or following a link (`files::open_regular` with `O_NOFOLLOW`: the entry is
/// looked at first, so a FIFO or device is never opened; one swapped in meanwhile opens without
/// waiting for a writer and is refused), saying what the entry is when it is refused.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), OpenError> {
    // What the entry is, in words, when it is not a regular file (after the refusal, without
    // opening anything).
    let not_regular = || {
        std::fs::symlink_metadata(path)
            .ok()
            .and_then(|m| kind_of(m.file_type()))
            .unwrap_or("not a regular file")
    };
    let f =
        crate::files::open_regular(path, false, libc::O_NOFOLLOW).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => OpenError::Missing,
            _ if e.raw_os_error() == Some(libc::ELOOP) => OpenError::NotRegular("a symbolic link"),
            _ if crate::files::is_not_regular(&e) => OpenError::NotRegular(not_regular()),
            _ => OpenError::Io(e),
        })?;
    let m = f.metadata().map_err(OpenError::Io)?;
    Ok((f, m))
}

/// Read at most `max_bytes` of `f` (from where it is): `Ok(None)` when there is more.
pub fn read_bounded(f: &mut std::fs::File, max_bytes: u64) -> std::io::Result<Option<Vec<u8>>> {
    let hint = f.metadata().map(|m| m.len()).unwrap_or(0).min(max_bytes);
    let mut bytes = Vec::with_capacity(hint as usize);
    f.by_ref().take(max_bytes + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max_bytes).then_some(bytes))
}

/// The device and inode of a file: which file it is, whatever its path.
pub fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// Read a file of at most `max_bytes`. The status comes from the open file before and after
/// reading; when they differ (the file is being written) it is read again after a pause, and
/// given up on (an error) if it is still changing. Only a regular file is read (never through a
/// link, never blocking on a FIFO); `expect`, the (device, inode) a walk saw at `path`, must be
/// the file opened — else something was swapped in after the walk, and it is not read.
pub fn read_file(
    path: &Path,
    max_bytes: u64,
    expect: Option<(u64, u64)>,
) -> Result<FileRead, ReadError> {
    for attempt in 0..3 {
        let (mut f, m) = match open_regular(path) {
            Ok(x) => x,
            Err(OpenError::Missing) => return Err(ReadError::Missing),
            Err(e) => return Err(ReadError::Other(e.to_string())),
        };
        if let Some(want) = expect
            && identity(&m) != want
        {
            return Err(ReadError::Other(
                "was replaced by another file while the folder was being synced; it is synced on its next change"
                    .into(),
            ));
        }
        // O_NOFOLLOW guards the file's own name only: a folder on the way swapped for a link
        // (before the walk listed it, so the walk saw the link's target too) would lead out of
        // the synced folder. Its folder must resolve to itself.
        if let Some(dir) = path.parent()
            && dir.canonicalize().ok().as_deref() != Some(dir)
        {
            return Err(ReadError::Other(
                "is reached through a symbolic link (a folder on its path was replaced by one); links are not followed"
                    .into(),
            ));
        }
        let before = FileStat::of(&m);
        if before.size > max_bytes {
            return Err(ReadError::Other(format!(
                "is {} bytes; the limit is {max_bytes} (limits.max_content_bytes)",
                before.size
            )));
        }
        let bytes = read_bounded(&mut f, max_bytes)
            .map_err(|e| ReadError::Other(format!("cannot be read: {e}")))?;
        let after = f
            .metadata()
            .map(|m| FileStat::of(&m))
            .map_err(|e| ReadError::Other(format!("cannot be read: {e}")))?;
        if let Some(bytes) = bytes
            && after == before
            && bytes.len() as u64 == before.size
        {
            return Ok(FileRead {
                bytes,
                stat: before,
            });
        }
        if attempt < 2 {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Err(ReadError::Other(
        "was being written while read; it is synced on its next change".into(),
    ))
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn hash(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The `/`-separated path of `path` relative to `root`, or why it has none (outside the
/// folder, or a name that is not UTF-8).
pub fn relative(root: &Path, path: &Path) -> Result<String, String> {
    let rel = path
        .strip_prefix(root)
        .map_err(|_| format!("{} is outside {}", path.display(), root.display()))?;
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(
                n.to_str()
                    .ok_or_else(|| "its name is not valid UTF-8 (docids are text)".to_string())?,
            ),
            _ => return Err(format!("{} is not a plain path", rel.display())),
        }
    }
    Ok(parts.join("/"))
}

/// Docids already taken in one scan (so `a.md` and `a.mdx` do not both become `a`).
#[derive(Default)]
pub struct Taken(HashSet<String>);

impl Taken {
    /// True when `docid` was free (and is now taken).
    pub fn take(&mut self, docid: &str) -> bool {
        self.0.insert(docid.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn synced(root: &Path) -> Vec<String> {
        let mut rules = Rules::new(root, vec![root.join("kb")]);
        let mut out = Vec::new();
        walk(&mut rules, root, &mut |e| {
            if let Entry::File(p, _, _) = e {
                out.push(relative(root, p).unwrap());
            }
        });
        out
    }

    #[test]
    fn docids_drop_the_extension_only() {
        assert_eq!(docid_of("notes/", "a/b.md"), "notes/a/b");
        assert_eq!(docid_of("", "v1.2/readme.MDX"), "v1.2/readme");
        assert_eq!(docid_of("", "x"), "x");
        // Both spellings of é (precomposed, e + combining acute) are one docid.
        assert_eq!(docid_of("n/", "caf\u{65}\u{301}.md"), "n/caf\u{e9}");
        assert_eq!(docid_of("n/", "caf\u{e9}.md"), "n/caf\u{e9}");
    }

    #[test]
    fn hidden_gitignored_and_non_markdown_files_are_not_synced() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().canonicalize().unwrap();
        for f in [
            "a.md",
            "B.MD",
            "c.mdx",
            "d.txt",
            ".hidden.md",
            ".git/x.md",
            "sub/e.md",
            "sub/.f.md",
            "build/g.md",
            "sub/keep.md",
            "sub/drop.md",
            "sub/deep/h.md",
            "kb/inside-the-database.md",
            "logs/x.md",
        ] {
            touch(&r.join(f), "# x\n");
        }
        touch(
            &r.join(".gitignore"),
            "build/\n/logs\n*.md\n!a.md\n!B.MD\n!c.mdx\n!sub/**\n",
        );
        touch(&r.join("sub/.gitignore"), "drop.md\n");
        touch(&r.join("sub/deep/.ignore"), "h.md\n");
        assert_eq!(
            synced(&r),
            ["B.MD", "a.md", "c.mdx", "sub/e.md", "sub/keep.md"]
        );
        let mut rules = Rules::new(&r, vec![]);
        assert!(rules.excluded(&r.join("sub/drop.md"), false));
        assert!(
            rules.excluded(&r.join("build/new/x.md"), false),
            "inside an excluded folder"
        );
        assert!(rules.excluded(&r.join("sub/.x/y.md"), false));
        assert!(!rules.excluded(&r.join("sub/new.md"), false));
        assert!(rules.excluded(Path::new("/elsewhere/a.md"), false));
    }

    #[test]
    fn a_growing_file_is_read_whole_with_its_status() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a.md");
        std::fs::write(&p, "hello").unwrap();
        let r = read_file(&p, 100, None).ok().unwrap();
        assert_eq!(r.bytes, b"hello");
        assert_eq!(r.stat.size, 5);
        assert!(matches!(read_file(&p, 4, None), Err(ReadError::Other(m)) if m.contains("limit")));
        assert!(matches!(
            read_file(&tmp.path().join("nope.md"), 4, None),
            Err(ReadError::Missing)
        ));
    }

    #[test]
    fn a_link_fifo_or_other_file_swapped_in_after_the_walk_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().canonicalize().unwrap();
        touch(&r.join("a.md"), "# A\n");
        touch(&r.join("outside/secret.md"), "# Secret\n");
        let mut walked = None;
        let mut rules = Rules::new(&r, vec![]);
        walk(&mut rules, &r, &mut |e| {
            if let Entry::File(p, _, ident) = e
                && p.ends_with("a.md")
            {
                walked = Some(ident);
            }
        });
        let p = r.join("a.md");
        let walked = walked.unwrap();
        assert!(read_file(&p, 100, Some(walked)).is_ok());
        // Kept alive elsewhere, so that its inode is not reused by the files made below.
        std::fs::hard_link(&p, r.join("outside/kept")).unwrap();
        // Read on a thread: a FIFO that blocked would hang the test, not fail it.
        let read = |p: PathBuf| {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let r = read_file(&p, 100, Some(walked));
                let _ = tx.send(match r {
                    Ok(_) => "read".to_string(),
                    Err(ReadError::Missing) => "missing".to_string(),
                    Err(ReadError::Other(m)) => m,
                });
            });
            rx.recv_timeout(std::time::Duration::from_secs(5))
                .unwrap_or_else(|_| "blocked".into())
        };
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(r.join("outside/secret.md"), &p).unwrap();
        assert!(read(p.clone()).contains("symbolic link"));
        std::fs::remove_file(&p).unwrap();
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        assert!(read(p.clone()).contains("FIFO"));
        std::fs::remove_file(&p).unwrap();
        // A folder swapped for a link before the walk listed it: the walk saw the target's file
        // (its identity matches), but the path leads out of the synced folder.
        let out = r.join("outside/secret.md");
        let out_ident = identity(&std::fs::metadata(&out).unwrap());
        std::fs::rename(r.join("outside"), r.join("moved")).unwrap();
        std::os::unix::fs::symlink(r.join("moved"), r.join("sub")).unwrap();
        let via = r.join("sub/secret.md");
        assert!(matches!(
            read_file(&via, 100, Some(out_ident)),
            Err(ReadError::Other(m)) if m.contains("symbolic link")
        ));
        std::fs::remove_file(r.join("sub")).unwrap();
        std::fs::rename(r.join("moved"), r.join("outside")).unwrap();
        // Another file at the same path: not read.
        touch(&p, "# A again\n");
        assert!(read(p.clone()).contains("replaced"));
        // The walk reports a FIFO where a markdown file would be.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let mut skipped = Vec::new();
        walk(&mut rules, &r, &mut |e| {
            if let Entry::Skipped(p, why) = e {
                skipped.push((relative(&r, p).unwrap(), why));
            }
        });
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].1.contains("FIFO"));
    }

    #[test]
    fn a_huge_ignore_file_is_not_read_and_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().canonicalize().unwrap();
        touch(&r.join("a.md"), "# A\n");
        touch(&r.join("b.md"), "# B\n");
        let many: String = (0..MAX_IGNORE_PATTERNS + 1)
            .map(|n| format!("p{n}.md\n"))
            .collect();
        touch(&r.join(".gitignore"), &format!("b.md\n{many}"));
        let mut rules = Rules::new(&r, vec![]);
        assert!(!rules.excluded(&r.join("b.md"), false), "not used");
        assert!(
            rules.problems[0].1.contains("patterns"),
            "{:?}",
            rules.problems
        );
        let big = "#".repeat(MAX_IGNORE_BYTES as usize + 1);
        touch(&r.join(".gitignore"), &format!("b.md\n{big}"));
        let mut rules = Rules::new(&r, vec![]);
        assert!(!rules.excluded(&r.join("b.md"), false));
        assert!(
            rules.problems[0].1.contains("bytes"),
            "{:?}",
            rules.problems
        );
        touch(&r.join(".gitignore"), "\u{feff}b.md\r\n");
        let mut rules = Rules::new(&r, vec![]);
        assert!(
            rules.excluded(&r.join("b.md"), false),
            "BOM and CRLF as git"
        );
        assert!(rules.problems.is_empty());
    }

    #[test]
    fn a_deep_chain_of_folders_is_walked_in_linear_time_and_cut_at_max_depth() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path().canonicalize().unwrap();
        let mut d = r.clone();
        for _ in 0..MAX_DEPTH + 20 {
            d.push("d");
        }
        touch(&d.join("deep.md"), "# deep\n");
        let mut top = r.clone();
        for _ in 0..MAX_DEPTH {
            top.push("d");
        }
        touch(&top.join("last.md"), "# last\n");
        touch(&r.join(".gitignore"), "*.tmp\n");
        let start = std::time::Instant::now();
        let (mut files, mut cut) = (Vec::new(), Vec::new());
        let mut rules = Rules::new(&r, vec![]);
        walk(&mut rules, &r, &mut |e| match e {
            Entry::File(p, _, _) => files.push(p.to_path_buf()),
            Entry::Unreadable(p, why) => cut.push((p.to_path_buf(), why)),
            _ => {}
        });
        assert_eq!(files, [top.join("last.md")]);
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].0, top.join("d"), "names where it stopped");
        assert!(cut[0].1.contains("deep"));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        // A path inside the chain is checked against each folder's rules once.
        assert!(!rules.excluded(&top.join("last.md"), false));
        assert!(rules.excluded(&top.join("x.tmp"), false));
    }
}
