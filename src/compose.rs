//! The content composer: rendered markdown from a mix of kbids and docids.

use crate::error::{KbError, Result};
use crate::store::txn::ReadTables;
use crate::text::markdown::atx_heading;
use crate::types::kbid::is_kbid;
use crate::types::records::SectionRecord;

/// Render one section: its text when it starts with its own heading line; otherwise a
/// `heading_prefix` heading with the title (when titled), then the text. Images become a
/// markdown image reference to `kbdb://section/<kbid>`.
fn render_section(kbid: &str, rec: &SectionRecord, bytes: &[u8], heading_prefix: &str) -> String {
    let title = rec.title.as_deref().unwrap_or("");
    if rec.section_type.starts_with("image/") {
        let alt = title.replace(['[', ']'], "");
        return format!("![{alt}](kbdb://section/{kbid})");
    }
    let text = String::from_utf8_lossy(bytes);
    let starts_with_heading = text.lines().next().and_then(atx_heading).is_some();
    let fenced = !crate::index::lexical::is_prose_type(&rec.section_type);
    let body = if fenced {
        let lang = rec
            .section_type
            .rsplit('/')
            .next()
            .unwrap_or("")
            .trim_start_matches("x-");
        format!("```{lang}\n{text}\n```")
    } else {
        text.into_owned()
    };
    if starts_with_heading && !fenced || title.is_empty() {
        body
    } else {
        format!("{heading_prefix} {title}\n\n{body}")
    }
}

/// Compose the markdown of `ids` (each a kbid or a docid), in order, separated by blank lines.
pub(crate) fn compose(t: &ReadTables, ids: &[String]) -> Result<String> {
    if ids.is_empty() {
        return Err(KbError::invalid("ids", "give at least one kbid or docid"));
    }
    let mut parts = Vec::with_capacity(ids.len());
    let mut unknown = Vec::new();
    for id in ids {
        if is_kbid(id)
            && let Some(rec) = t.section(id)?
        {
            let bytes = t.content_of(&rec)?.unwrap_or_default();
            parts.push(render_section(id, &rec, &bytes, "##"));
            continue;
        }
        let Some(doc) = t.document(id)? else {
            unknown.push(id.as_str());
            continue;
        };
        let title = doc.title.as_deref().unwrap_or(id);
        let mut rendered = Vec::with_capacity(doc.kbids.len() + 1);
        for kbid in &doc.kbids {
            if let Some(rec) = t.section(kbid)? {
                let bytes = t.content_of(&rec)?.unwrap_or_default();
                rendered.push(render_section(kbid, &rec, &bytes, "##"));
            }
        }
        // One H1: the title line only when no section of the document opens with an H1 of
        // its own (an untitled document whose first section is `# Heading` gets no second one),
        // or when the first one is that very title at another level.
        let opens_with = |r: &String| r.lines().next().and_then(atx_heading);
        let has_h1 = rendered
            .iter()
            .any(|r| opens_with(r).is_some_and(|(level, _)| level == 1));
        let opens_with_title = rendered
            .first()
            .and_then(opens_with)
            .is_some_and(|(_, h)| h == title);
        if !has_h1 && !opens_with_title {
            rendered.insert(0, format!("# {title}"));
        }
        parts.push(rendered.join("\n\n"));
    }
    if !unknown.is_empty() {
        return Err(KbError::NotFound(format!(
            "Unknown ids (neither a section nor a document): {}",
            unknown.join(", ")
        )));
    }
    Ok(parts.join("\n\n"))
}
