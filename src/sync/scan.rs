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

/// The docid of a file: `prefix` + its relative path without the extension.
pub fn docid_of(prefix: &str, rel: &str) -> String {
    let stem = match rel.rfind('.') {
        Some(i) if !rel[i..].contains('/') => &rel[..i],
        _ => rel,
    };
    format!("{prefix}{stem}")
}

/// The ignore rules of one synced folder; ignore files are read once per folder and cached.
pub struct Rules {
    root: PathBuf,
    /// Paths never synced (the database folder when it lies inside the synced one).
    exclude: Vec<PathBuf>,
    matchers: HashMap<PathBuf, Option<Gitignore>>,
    /// Ignore files that could not be read or parsed: (path, why).
    pub problems: Vec<(PathBuf, String)>,
}

impl Rules {
    pub fn new(root: &Path, exclude: Vec<PathBuf>) -> Rules {
        Rules {
            root: root.to_path_buf(),
            exclude,
            matchers: HashMap::new(),
            problems: Vec::new(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Forget the cached ignore files (one of them changed).
    pub fn invalidate(&mut self) {
        self.matchers.clear();
    }

    fn matcher(&mut self, dir: &Path) -> Option<&Gitignore> {
        if !self.matchers.contains_key(dir) {
            let mut builder = GitignoreBuilder::new(dir);
            let mut any = false;
            for name in IGNORE_FILES {
                let file = dir.join(name);
                if file.is_file() {
                    any = true;
                    if let Some(e) = builder.add(&file) {
                        self.problems.push((file, e.to_string()));
                    }
                }
            }
            let gi = if any {
                match builder.build() {
                    Ok(g) => Some(g),
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
        self.matchers.get(dir).and_then(Option::as_ref)
    }

    /// Whether the entry `path` (a folder when `is_dir`) is excluded, given that the folders
    /// above it are not.
    pub fn excluded_entry(&mut self, path: &Path, is_dir: bool) -> bool {
        if path.file_name().is_some_and(is_hidden) {
            return true;
        }
        if self.exclude.iter().any(|e| e == path) {
            return true;
        }
        match path.parent() {
            Some(p) => self.excluded_from(path, is_dir, p.to_path_buf()),
            None => false,
        }
    }

    /// The ignore files from `dir` up to the synced folder decide (the deepest that matches).
    fn excluded_from(&mut self, path: &Path, is_dir: bool, mut dir: PathBuf) -> bool {
        loop {
            if !dir.starts_with(&self.root) {
                return false;
            }
            if let Some(gi) = self.matcher(&dir) {
                match gi.matched(path, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            if dir == self.root || !dir.pop() {
                return false;
            }
        }
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
        let mut cur = self.root.clone();
        for (i, part) in parts.iter().enumerate() {
            cur.push(part);
            let dir = i + 1 < parts.len() || is_dir;
            if self.excluded_entry(&cur.clone(), dir) {
                return true;
            }
        }
        false
    }
}

/// One entry met by [`walk`].
pub enum Entry<'a> {
    /// A folder that is synced (its content follows).
    Dir(&'a Path),
    /// A markdown file that is synced, with its status.
    File(&'a Path, FileStat),
    /// A markdown file that is left alone, and why.
    Skipped(&'a Path, String),
    /// A folder that could not be read (files recorded below it must not count as removed).
    Unreadable(&'a Path, String),
}

/// Walk `dir` (inside the synced folder, not excluded itself) in name order, depth first:
/// every synced folder below it and every markdown file that is synced.
pub fn walk(rules: &mut Rules, dir: &Path, visit: &mut dyn FnMut(Entry<'_>)) {
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
            if !rules.excluded_entry(&path, true) {
                visit(Entry::Dir(&path));
                walk(rules, &path, visit);
            }
        } else if is_markdown(&path) && !rules.excluded_entry(&path, false) {
            if t.is_symlink() {
                visit(Entry::Skipped(
                    &path,
                    "is a symbolic link (links are not followed)".into(),
                ));
            } else if t.is_file() {
                match std::fs::symlink_metadata(&path) {
                    Ok(m) => visit(Entry::File(&path, FileStat::of(&m))),
                    // Gone since the folder was listed: as if never there.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => visit(Entry::Skipped(&path, format!("cannot be read: {e}"))),
                }
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

/// Read a file of at most `max_bytes`. The status comes from the open file before and after
/// reading; when they differ (the file is being written) it is read again after a pause, and
/// given up on (an error) if it is still changing.
pub fn read_file(path: &Path, max_bytes: u64) -> Result<FileRead, ReadError> {
    for attempt in 0..3 {
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing),
            Err(e) => return Err(ReadError::Other(format!("cannot be read: {e}"))),
        };
        let before = f
            .metadata()
            .map(|m| FileStat::of(&m))
            .map_err(|e| ReadError::Other(format!("cannot be read: {e}")))?;
        if before.size > max_bytes {
            return Err(ReadError::Other(format!(
                "is {} bytes; the limit is {max_bytes} (limits.max_content_bytes)",
                before.size
            )));
        }
        let mut bytes = Vec::with_capacity(before.size as usize);
        f.by_ref()
            .take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ReadError::Other(format!("cannot be read: {e}")))?;
        let after = f
            .metadata()
            .map(|m| FileStat::of(&m))
            .map_err(|e| ReadError::Other(format!("cannot be read: {e}")))?;
        if after == before && bytes.len() as u64 == before.size {
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
            if let Entry::File(p, _) = e {
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
        let r = read_file(&p, 100).ok().unwrap();
        assert_eq!(r.bytes, b"hello");
        assert_eq!(r.stat.size, 5);
        assert!(matches!(read_file(&p, 4), Err(ReadError::Other(m)) if m.contains("limit")));
        assert!(matches!(
            read_file(&tmp.path().join("nope.md"), 4),
            Err(ReadError::Missing)
        ));
    }
}
