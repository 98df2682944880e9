//! `kbdb learn`: one section from an argument, a file or stdin; or `--jsonl`, a stream of learn
//! objects batched into transactions, each result printed as soon as it is durable.

use std::io::{BufRead, IsTerminal, Read};
use std::path::Path;
use std::sync::mpsc;

use base64::Engine;
use kbdb::daemon::operations::op;
use kbdb::daemon::params::LearnDocumentParams;
use kbdb::{KbError, LearnRequest, LearnResult};

use super::backend::Backend;

use super::args::{Format, LearnArgs};
use super::maintenance::counter_bar;
use super::output::{
    EXIT_OK, EXIT_PARTIAL, error_json, json_text, print_bytes, print_json, print_text,
};

/// Most lines grouped into one transaction by `--jsonl --embedded`. Each commit rewrites every
/// B-tree leaf its rows landed in, and rows keyed by content hashes land all over the tree, so
/// fewer, larger commits write less: at 100k sections 2,048 loads ~10 % faster than 1,024.
/// Larger batches gain little more and cost memory and disk: 4,096 held ~10 MB more at its peak
/// and left the file ~3 MB larger (pages copied while a commit's old ones were still in use;
/// docs/performance.md, *Larger batches*).
const JSONL_BATCH_EMBEDDED: usize = 2048;
/// The same through the daemon, whose writer other clients share: a batch is how long one
/// client holds it. With 2,048 lines, a durable writer's p99 during a bulk load went from
/// 55–59 ms to 87–100 ms.
const JSONL_BATCH_DAEMON: usize = 1024;
/// Most bytes of lines grouped into one batch (a batch is one daemon message, at most 64 MiB).
const JSONL_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Longest `--jsonl` line: a batch (under 16 MiB, plus one line) always fits one daemon message.
const JSONL_MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

pub fn run(db: &Path, format: Format, embedded: bool, args: LearnArgs) -> Result<i32, KbError> {
    let kb = open_creating(db, embedded)?;
    if args.jsonl {
        return jsonl(&kb, format);
    }
    if args.split {
        return split(&kb, format, args);
    }
    let req = request_from_args(args)?;
    let r = kb.run(op::LEARN, &req)?;
    match format {
        Format::Json => print_json(&r, false),
        Format::Text => print_text(&result_text(&r)),
    }
    Ok(EXIT_OK)
}

/// `--split`: the content is a markdown document stored section by section.
fn split(kb: &Backend, format: Format, args: LearnArgs) -> Result<i32, KbError> {
    let docid = args
        .docid
        .clone()
        .ok_or_else(|| KbError::invalid("docid", "is required with --split"))?;
    let req = request_from_args(args)?;
    let r = kb.run(
        op::LEARN_DOCUMENT,
        &LearnDocumentParams {
            docid: docid.clone(),
            markdown: req.content,
            title: req.title,
            metadata: None,
            tags: req.tags,
        },
    )?;
    match format {
        Format::Json => print_json(&r, false),
        Format::Text => {
            let mut out = format!(
                "{} {}: {} section(s), {} new, {} unchanged, {} detached",
                if r.changed { "learned" } else { "unchanged" },
                r.docid,
                r.sections.len(),
                r.added,
                r.unchanged,
                r.detached.len()
            );
            for s in &r.sections {
                out.push_str(&format!(
                    "\n  {} {}  {}",
                    if s.new { "+" } else { " " },
                    s.kbid,
                    s.heading.as_deref().unwrap_or("(preamble)")
                ));
            }
            print_text(&out);
        }
    }
    Ok(EXIT_OK)
}

/// `learn` creates the database on first use, and says so on stderr.
fn open_creating(db: &Path, embedded: bool) -> Result<Backend, KbError> {
    let (kb, created) = Backend::open(db, embedded, true)?;
    if created {
        super::output::print_stderr(&format!(
            "created a new knowledge base in {}",
            kb.dir().display()
        ));
    }
    Ok(kb)
}

fn request_from_args(a: LearnArgs) -> Result<LearnRequest, KbError> {
    let mut section_type = a.section_type;
    // `-` stands for standard input, like `--file -` (`kbdb learn - < note.md`).
    let content = a.content.filter(|c| c != "-");
    let content = match (content, a.file) {
        (Some(c), _) => c,
        (None, Some(path)) if path.as_os_str() != "-" => {
            if section_type.is_none() {
                section_type = type_from_extension(&path);
            }
            let bytes = std::fs::read(&path).map_err(|e| {
                KbError::invalid("file", format!("cannot read {}: {e}", path.display()))
            })?;
            content_from_bytes(section_type.as_deref(), bytes)?
        }
        (None, _) => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(KbError::invalid(
                    "content",
                    "is missing: give it as an argument, with --file PATH, or on standard input",
                ));
            }
            let mut bytes = Vec::new();
            stdin.lock().read_to_end(&mut bytes).map_err(|e| {
                KbError::invalid("content", format!("cannot read standard input: {e}"))
            })?;
            content_from_bytes(section_type.as_deref(), bytes)?
        }
    };
    Ok(LearnRequest {
        content,
        section_type,
        title: a.title,
        description: a.description,
        docid: a.docid,
        tags: a.tags,
        replace: a.replace,
        source: a.source,
    })
}

/// Images are read as bytes and sent as base64; everything else must be UTF-8 text.
fn content_from_bytes(section_type: Option<&str>, bytes: Vec<u8>) -> Result<String, KbError> {
    if section_type.is_some_and(|t| t.trim().to_ascii_lowercase().starts_with("image/")) {
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        kbdb::text::preprocess::decode_utf8("content", bytes)
    }
}

fn type_from_extension(path: &Path) -> Option<String> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let t = match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "json" => "application/json",
        "md" | "markdown" => "text/markdown",
        "txt" => "text/plain",
        _ => return None,
    };
    Some(t.to_string())
}

fn result_text(r: &LearnResult) -> String {
    let what = if r.skipped {
        "already known"
    } else if r.attached {
        "attached"
    } else {
        "learned"
    };
    let mut out = format!(
        "{what} {} ({}, {} terms)",
        r.kbid, r.section_type, r.indexed_terms_count
    );
    if let Some(t) = &r.title {
        out.push_str(&format!(" \"{t}\""));
    }
    if let Some(d) = &r.docid {
        out.push_str(&format!(" in {d}"));
    }
    for s in r.superseded.kbids() {
        out.push_str(&format!("\n  superseded {s}"));
    }
    for w in &r.warnings {
        out.push_str(&format!("\n  warning: {w}"));
    }
    for n in &r.near_duplicates {
        out.push_str(&format!(
            "\n  near duplicate of {} (similarity {:.2})",
            n.kbid, n.similarity
        ));
    }
    out
}

/// Group the stdin lines already waiting (up to `JSONL_BATCH_EMBEDDED` lines, or
/// `JSONL_BATCH_DAEMON` through the daemon) into one transaction, so a fast
/// pipe gets large batches and a slow stream gets low latency. Lines are read and batches
/// parsed on the thread that draws them (`Backend::learn_stream`: the one preparing the next
/// batch while one is written); results are printed in input order as each batch becomes
/// durable.
fn jsonl(kb: &Backend, format: Format) -> Result<i32, KbError> {
    let most = match kb {
        Backend::Embedded(_) => JSONL_BATCH_EMBEDDED,
        Backend::Daemon(_) => JSONL_BATCH_DAEMON,
    };
    let mut lines = StdinLines::new(most);
    // Each batch's lines: its line number and either its index among the batch's requests or
    // why it could not be parsed. Sent before the batch is handed on, so it is here when the
    // batch's results are.
    let (slots_tx, slots_rx) = mpsc::channel::<Vec<(usize, Result<usize, KbError>)>>();
    let batches = std::iter::from_fn(move || {
        let (slots, reqs) = parse_batch(lines.next_batch()?);
        slots_tx.send(slots).ok()?;
        Some(reqs)
    });
    let bar = counter_bar("learn", "sections");
    let mut failed = 0usize;
    // Results are printed on a thread of the stream's own: the closure takes what it uses.
    let (failed_lines, progress) = (&mut failed, &bar);
    kb.learn_stream(batches, move |r| {
        let Ok(slots) = slots_rx.recv() else {
            return;
        };
        // A failure of the whole batch (a storage error: one transaction, none of it stored;
        // or a daemon lost mid-call) is each of its lines' result, and the stream goes on.
        let (mut results, batch_error): (Vec<Option<Result<LearnResult, KbError>>>, _) = match r {
            Ok(r) => (r.into_iter().map(Some).collect(), None),
            Err(e) => (Vec::new(), Some(e)),
        };
        progress.inc(slots.len() as u64);
        let mut out = LineChunks::default();
        for (line_no, slot) in slots {
            let outcome = match (slot, &batch_error) {
                (Ok(_), Some(e)) => Err(KbError::Remote {
                    code: e.code().to_string(),
                    message: e.to_string(),
                    field: e.field().map(str::to_string),
                }),
                (Ok(i), None) => results
                    .get_mut(i)
                    .and_then(Option::take)
                    .unwrap_or_else(|| Err(KbError::Storage("no result for this line".into()))),
                (Err(e), _) => Err(e),
            };
            if outcome.is_err() {
                *failed_lines += 1;
            }
            let line = result_line(format, line_no, outcome);
            if let Some(chunk) = out.push(&line) {
                progress.suspend(|| print_bytes(chunk.as_bytes()));
            }
        }
        let rest = out.rest();
        progress.suspend(|| print_bytes(rest.as_bytes()));
    });
    bar.finish_and_clear();
    Ok(if failed > 0 { EXIT_PARTIAL } else { EXIT_OK })
}

/// Result lines gathered into writes of at most `PIPE_BUF` bytes (a longer line goes alone). A
/// pipe takes such a write whole or not at all, so a reader never sees part of a line from a
/// process killed while writing; a write per line cost a system call per section.
#[derive(Default)]
struct LineChunks {
    buf: String,
}

const PIPE_BUF: usize = libc::PIPE_BUF;

impl LineChunks {
    /// Add `line`; the lines gathered before it, to write first, when it does not fit with them.
    fn push(&mut self, line: &str) -> Option<String> {
        let full = !self.buf.is_empty() && self.buf.len() + line.len() + 1 > PIPE_BUF;
        let out = full.then(|| std::mem::take(&mut self.buf));
        self.buf.push_str(line);
        self.buf.push('\n');
        out
    }

    /// The lines gathered and not yet handed out.
    fn rest(self) -> String {
        self.buf
    }
}

type Line = (usize, Result<String, KbError>);

/// Descriptor 0, read without the standard library's own buffer in front of it.
struct RawStdin(std::mem::ManuallyDrop<std::fs::File>);

impl Read for RawStdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// Standard input's lines, numbered from 1, read straight from its descriptor through a buffer
/// of our own, so that whether another line is waiting can be known without blocking.
struct StdinLines {
    reader: std::io::BufReader<RawStdin>,
    next_no: usize,
    ended: bool,
    /// Most lines of a batch.
    most: usize,
}

impl StdinLines {
    fn new(most: usize) -> StdinLines {
        use std::os::fd::FromRawFd;
        // SAFETY: descriptor 0 stays open for the process's life; ManuallyDrop never closes it,
        // and nothing else reads standard input while a stream is learned.
        let stdin = RawStdin(std::mem::ManuallyDrop::new(unsafe {
            std::fs::File::from_raw_fd(0)
        }));
        StdinLines {
            reader: std::io::BufReader::with_capacity(1 << 16, stdin),
            next_no: 1,
            ended: false,
            most,
        }
    }

    /// The next line (waiting for it); None at the end of the input, or after a read error
    /// (reported as that line's result).
    fn next_line(&mut self) -> Option<Line> {
        if self.ended {
            return None;
        }
        let line = match read_jsonl_line(&mut self.reader) {
            Ok(None) => {
                self.ended = true;
                return None;
            }
            Ok(Some(line)) => line,
            Err(e) => {
                self.ended = true;
                Err(KbError::invalid(
                    "line",
                    format!("cannot read standard input: {e}"),
                ))
            }
        };
        let no = self.next_no;
        self.next_no += 1;
        Some((no, line))
    }

    /// Whether the next line (or the end) can be read without waiting: a whole line is in the
    /// buffer, or standard input has bytes (or its end) to read. A line of which only a part
    /// has come is read whole: the rest of a line being written follows at once.
    fn waiting(&self) -> bool {
        if self.reader.buffer().contains(&b'\n') {
            return true;
        }
        let mut fd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call; a zero timeout never blocks.
        unsafe { libc::poll(&mut fd, 1, 0) > 0 }
    }

    /// The next line and the lines already waiting after it, up to `most` lines or
    /// JSONL_BATCH_BYTES bytes; None at the end of the input.
    fn next_batch(&mut self) -> Option<Vec<Line>> {
        let line_len = |item: &Line| item.1.as_ref().map_or(0, |l| l.len());
        let first = self.next_line()?;
        let mut bytes = line_len(&first);
        let mut batch = vec![first];
        while batch.len() < self.most && bytes < JSONL_BATCH_BYTES && self.waiting() {
            match self.next_line() {
                Some(item) => {
                    bytes += line_len(&item);
                    batch.push(item);
                }
                None => break,
            }
        }
        Some(batch)
    }
}

/// Parse each line of a batch: its slots (line number, and the index of its request or why it
/// failed, so failures are reported in place, in input order) and its requests.
#[allow(clippy::type_complexity)]
fn parse_batch(batch: Vec<Line>) -> (Vec<(usize, Result<usize, KbError>)>, Vec<LearnRequest>) {
    let mut slots = Vec::with_capacity(batch.len());
    let mut reqs = Vec::with_capacity(batch.len());
    for (line_no, line) in batch {
        let parsed = match line {
            Err(e) => Err(e),
            Ok(l) if l.trim().is_empty() => continue,
            Ok(l) => serde_json::from_str::<LearnRequest>(&l)
                .map_err(|e| KbError::invalid("line", format!("is not a learn object: {e}"))),
        };
        slots.push((
            line_no,
            parsed.map(|r| {
                reqs.push(r);
                reqs.len() - 1
            }),
        ));
    }
    (slots, reqs)
}

/// One line of standard input without its line ending; None at the end. A line that is not
/// UTF-8 or longer than `JSONL_MAX_LINE_BYTES` fails alone (its rest is skipped unread into
/// memory) and the stream goes on.
fn read_jsonl_line(r: &mut impl BufRead) -> std::io::Result<Option<Result<String, KbError>>> {
    let mut buf = Vec::new();
    let n = r
        .by_ref()
        .take(JSONL_MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') && buf.len() > JSONL_MAX_LINE_BYTES {
        r.skip_until(b'\n')?;
        return Ok(Some(Err(KbError::invalid(
            "line",
            format!("is longer than {JSONL_MAX_LINE_BYTES} bytes (the limit of one --jsonl line)"),
        ))));
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    }
    Ok(Some(kbdb::text::preprocess::decode_utf8("line", buf)))
}

fn result_line(format: Format, line_no: usize, outcome: Result<LearnResult, KbError>) -> String {
    match (format, outcome) {
        (Format::Json, Ok(r)) => json_text(&r, false),
        (Format::Json, Err(e)) => {
            let mut v = error_json(&e);
            v["line"] = line_no.into();
            json_text(&v, false)
        }
        (Format::Text, Ok(r)) => format!("{line_no}: {}", result_text(&r)),
        (Format::Text, Err(e)) => format!("{line_no}: error: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_go_out_whole_in_chunks_a_pipe_writes_at_once() {
        let lines: Vec<String> = (0..400)
            .map(|i| format!("{i}:{}", "x".repeat(i * 37 % 900)))
            .chain([
                String::from("long:") + &"y".repeat(6000),
                String::from("last"),
            ])
            .collect();
        let mut chunks = LineChunks::default();
        let mut written = Vec::new();
        for line in &lines {
            written.extend(chunks.push(line));
        }
        written.push(chunks.rest());
        assert!(written.len() > 10, "several chunks: {}", written.len());
        for chunk in &written {
            assert!(chunk.ends_with('\n'), "a chunk ends with a whole line");
            assert!(
                chunk.len() <= PIPE_BUF || chunk.lines().count() == 1,
                "a chunk over PIPE_BUF is one long line alone ({} bytes)",
                chunk.len()
            );
        }
        let all: Vec<&str> = written.iter().flat_map(|c| c.lines()).collect();
        assert_eq!(all, lines, "every line once, in order");
    }
}
