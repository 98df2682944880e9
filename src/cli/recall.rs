//! `kbdb recall`: the spec JSON, or a readable outline for people.

use kbdb::{KbError, RecallItem, RecallRequest, Recalled, Reference};

use super::backend::Backend;

use super::args::Format;
use super::output::{EXIT_OK, print_json, print_text};

pub fn run(
    kb: &Backend,
    format: Format,
    kbids: Vec<String>,
    depth: i64,
    max_chars: Option<i64>,
) -> Result<i32, KbError> {
    // One kbid → one object (the MCP `kbid` form); several → an array (`kbids`).
    let req = if kbids.len() == 1 {
        RecallRequest::new(kbids.into_iter().next(), None, Some(depth), max_chars)?
    } else {
        RecallRequest::new(None, Some(kbids), Some(depth), max_chars)?
    };
    let r = kb.recall(&req)?;
    match format {
        Format::Json => print_json(&r, true),
        Format::Text => {
            let items: Vec<&RecallItem> = match &r {
                Recalled::One(item) => vec![item.as_ref()],
                Recalled::Many(items) => items.iter().collect(),
            };
            let text: Vec<String> = items.into_iter().map(item_text).collect();
            print_text(text.join("\n\n").trim_end());
        }
    }
    Ok(EXIT_OK)
}

fn heading(h: &Option<String>) -> &str {
    h.as_deref().unwrap_or("(untitled)")
}

fn item_text(item: &RecallItem) -> String {
    let mut out = format!(
        "== {} [{}] {}\n",
        heading(&item.heading),
        item.section_type,
        item.kbid
    );
    if !item.docids.is_empty() {
        out.push_str(&format!("in: {}\n", item.docids.join(", ")));
    }
    out.push('\n');
    out.push_str(item.content.trim_end());
    out.push('\n');
    if let Some(docs) = &item.documents {
        for d in docs {
            out.push_str(&format!(
                "\n-- document {} — {}\n",
                d.docid,
                heading(&d.title)
            ));
            for (n, s) in d.sections.iter().enumerate() {
                let here = if s.kbid == item.kbid {
                    "  ← this"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "   {:>2}. {} {}{here}\n",
                    n + 1,
                    s.kbid,
                    heading(&s.heading)
                ));
            }
            refs_text(&mut out, "   referenced by", &d.back_references);
        }
    }
    if let Some(back) = &item.back_references {
        refs_text(&mut out, "-- referenced by", back);
    }
    if let Some(refs) = &item.references {
        refs_text(&mut out, "-- references", refs);
        for r in refs {
            if let Some(content) = &r.content {
                out.push_str(&format!(
                    "\n-- {} ({})\n{}\n",
                    heading(&r.heading),
                    r.target.as_deref().unwrap_or(""),
                    content.trim_end()
                ));
                if let Some(b) = &r.back_references {
                    refs_text(&mut out, "   referenced by", b);
                }
            }
        }
    }
    if let Some(siblings) = &item.siblings {
        for s in siblings {
            out.push_str(&format!(
                "\n-- sibling in {}: {} [{}] {}\n{}\n",
                s.docid,
                heading(&s.heading),
                s.section_type,
                s.kbid,
                s.content.trim_end()
            ));
        }
    }
    if item.truncated {
        out.push_str("\n(truncated: the --max-chars budget stopped the expansion)\n");
    }
    out
}

fn refs_text(out: &mut String, label: &str, refs: &[Reference]) {
    if refs.is_empty() {
        return;
    }
    out.push_str(&format!("\n{label}:\n"));
    for r in refs {
        let who = match (&r.kbid, &r.docid) {
            (Some(k), _) => k.clone(),
            (None, Some(d)) => format!("document {d}"),
            (None, None) => String::new(),
        };
        let state = match r.resolved {
            Some(false) => " (not learned yet)",
            _ => "",
        };
        out.push_str(&format!(
            "   {} {who} {}{state} [{}]: {}\n",
            if r.direction == "back" { "←" } else { "→" },
            heading(&r.heading),
            r.marker_type,
            r.context_snippet
        ));
    }
}
