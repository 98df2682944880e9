//! The views: each parses its parameters (a bad one is a 400 naming the field), calls daemon
//! operations, and renders HTML. Everything from the knowledge base is escaped or rendered by
//! `render` (sanitised).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, Uri, header};
use serde_json::{Value, json};

use super::render::{docid_path, escape, markdown, snippet, url_encode};
use super::{SessionId, WebState, query_param};
use crate::error::KbError;
use crate::search::{SearchItem, SearchItems, SearchResponse};

/// An HTML answer.
pub struct Html(pub StatusCode, pub String);

/// Results per search page.
const PAGE_SIZE: usize = 20;
/// The last search page (offset + limit ≤ 10,000).
const MAX_PAGE: usize = 10_000 / PAGE_SIZE;
/// Rows per page of the lists (documents, tags, collections).
const LIST_PAGE: usize = 100;
/// Neighbours drawn around a section per ring.
const RING1: usize = 12;
const RING2_EACH: usize = 4;

type PageResult = Result<Html, Html>;

const NAV: &[(&str, &str)] = &[
    ("/", "Search"),
    ("/docs", "Documents"),
    ("/tags", "Tags"),
    ("/collections", "Collections"),
    ("/validation", "Validation"),
    ("/status", "Status"),
];

fn layout(title: &str, active: &str, body: &str) -> String {
    let mut nav = String::new();
    for (href, label) in NAV {
        let _ = write!(
            nav,
            "<a href=\"{href}\"{}>{label}</a>",
            if *href == active { " class=\"on\"" } else { "" }
        );
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · kbdb</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\"></head><body>\
         <header><a class=\"brand\" href=\"/\">kbdb</a><nav>{nav}</nav>\
         <form class=\"signout\" method=\"post\" action=\"/signout\"><button class=\"link\" type=\"submit\">Sign out</button></form>\
         </header><main>{body}</main><script src=\"/assets/app.js\"></script></body></html>",
        escape(title)
    )
}

fn ok(title: &str, active: &str, body: &str) -> PageResult {
    Ok(Html(StatusCode::OK, layout(title, active, body)))
}

/// A page that shows no knowledge: why, and how to sign in.
pub fn sign_in_page(status: StatusCode, message: Option<&str>) -> Response {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Sign in · kbdb</title>\
         <link rel=\"stylesheet\" href=\"/assets/app.css\"><link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\"></head><body>\
         <main class=\"signin\"><h1>kbdb</h1>{}<p>Sign in with the link <code>kbdb serve</code> printed \
         when it started (<code>http://…/?token=…</code>). Each link works once; after it is used the \
         server prints the next one on its standard error.</p></main></body></html>",
        message
            .map(|m| format!("<p class=\"error\">{}</p>", escape(m)))
            .unwrap_or_default()
    );
    Html(status, body).into_response()
}

pub fn error_page(status: StatusCode, message: &str) -> Response {
    Html(
        status,
        format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} · kbdb</title>\
             <link rel=\"stylesheet\" href=\"/assets/app.css\"></head><body><main>\
             <h1>{}</h1><p class=\"error\">{}</p><p><a href=\"/\">Back to search</a></p></main></body></html>",
            status.as_u16(),
            status,
            escape(message)
        ),
    )
    .into_response()
}

/// An engine error as a page: bad input 400, unknown ids 404, the rest 500.
fn failed(e: KbError) -> Html {
    let status = match e.code() {
        "invalid_input" | "invalid_params" | "invalid_query" => StatusCode::BAD_REQUEST,
        "not_found" => StatusCode::NOT_FOUND,
        c if c.contains("not_found") => StatusCode::NOT_FOUND,
        c if c.starts_with("invalid") => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::warn!("web: {e}");
    }
    bad(status, &e.to_string())
}

fn bad(status: StatusCode, message: &str) -> Html {
    Html(
        status,
        layout(
            status.canonical_reason().unwrap_or("error"),
            "",
            &format!(
                "<h1>{}</h1><p class=\"error\">{}</p>",
                status,
                escape(message)
            ),
        ),
    )
}

fn param(uri: &Uri, name: &str) -> Option<String> {
    query_param(uri.query(), name).filter(|v| !v.trim().is_empty())
}

/// `page` as 1..=max (absent: 1), else a 400 naming it.
fn page_param(uri: &Uri, max: usize) -> Result<usize, Html> {
    match param(uri, "page") {
        None => Ok(1),
        Some(p) => match p.trim().parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(bad(
                StatusCode::BAD_REQUEST,
                &format!("page: must be a whole number from 1 to {max}, not {p:?}"),
            )),
        },
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn section_link(kbid: &str, heading: Option<&str>) -> String {
    format!(
        "<a href=\"/section/{}\">{}</a>",
        url_encode(kbid),
        escape(heading.filter(|h| !h.is_empty()).unwrap_or("(untitled)"))
    )
}

fn doc_link(docid: &str, title: Option<&str>) -> String {
    format!(
        "<a href=\"/doc/{}\">{}</a>",
        docid_path(docid),
        escape(title.filter(|t| !t.is_empty()).unwrap_or(docid))
    )
}

// ---- search ----

/// The `mode` choices, as the engine spells them.
const MODES: &[&str] = &crate::search::mode::SearchMode::NAMES;

fn search_form(uri: Option<&Uri>) -> String {
    let get = |n: &str| uri.and_then(|u| param(u, n)).unwrap_or_default();
    let mode = get("mode");
    let mut options = String::new();
    for m in MODES {
        let _ = write!(
            options,
            "<option value=\"{m}\"{}>{m}</option>",
            if mode == *m { " selected" } else { "" }
        );
    }
    format!(
        "<form id=\"search-form\" class=\"search\" method=\"get\" action=\"/search\">\
         <input id=\"q\" name=\"q\" type=\"search\" placeholder=\"Search the knowledge base\" value=\"{}\" autofocus autocomplete=\"off\">\
         <select name=\"mode\" title=\"mode\">{options}</select>\
         <input class=\"small\" name=\"tag\" placeholder=\"tag\" value=\"{}\">\
         <input class=\"small\" name=\"type\" placeholder=\"type\" value=\"{}\">\
         <input class=\"small\" name=\"docid\" placeholder=\"docid\" value=\"{}\">\
         <input class=\"small\" name=\"model\" placeholder=\"model\" value=\"{}\">\
         <button type=\"submit\">Search</button></form>",
        escape(&get("q")),
        escape(&get("tag")),
        escape(&get("type")),
        escape(&get("docid")),
        escape(&get("model")),
    )
}

pub async fn home(State(state): State<Arc<WebState>>) -> PageResult {
    let status = state.call("status", json!({})).await.map_err(failed)?;
    let last = status
        .get("last_change_seq")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let changes = state
        .call("changes_since", json!({"seq": last.saturating_sub(300)}))
        .await
        .map_err(failed)?;
    let mut seen = std::collections::HashSet::new();
    let mut recent: Vec<&Value> = Vec::new();
    for c in changes
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .rev()
    {
        let id = str_of(c, "id").unwrap_or("");
        if seen.insert(id.to_string()) {
            recent.push(c);
        }
        if recent.len() == 30 {
            break;
        }
    }
    let kbids: Vec<&str> = recent
        .iter()
        .filter(|c| {
            str_of(c, "kind").is_some_and(|k| k.starts_with("section_") && k != "section_removed")
        })
        .filter_map(|c| str_of(c, "id"))
        .collect();
    let sections = if kbids.is_empty() {
        Value::Array(vec![])
    } else {
        state
            .call("retrieve_many", json!({"kbids": kbids}))
            .await
            .map_err(failed)?
    };
    let heading_of = |kbid: &str| -> Option<String> {
        sections.as_array()?.iter().find_map(|s| {
            (str_of(s, "kbid") == Some(kbid)).then(|| {
                title_of(
                    str_of(s, "sectionType").unwrap_or(""),
                    str_of(s, "content").unwrap_or(""),
                )
            })
        })
    };
    let mut list = String::new();
    for c in &recent {
        let id = str_of(c, "id").unwrap_or("");
        let kind = str_of(c, "kind").unwrap_or("");
        let what = match kind {
            "section_added" => "learned",
            "section_changed" => "edited",
            "section_removed" => "removed",
            "document_changed" => "document changed",
            "document_removed" => "document removed",
            "models_changed" => "models changed",
            k => k,
        };
        let link = match kind {
            "section_added" | "section_changed" => match heading_of(id) {
                Some(h) => section_link(id, Some(&h)),
                None => format!("<span class=\"kbid\">{}</span> (gone)", escape(id)),
            },
            "document_changed" => doc_link(id, None),
            _ => format!("<span class=\"kbid\">{}</span>", escape(id)),
        };
        let _ = write!(
            list,
            "<li>{link} <span class=\"meta\">{what} · change {}</span></li>",
            c.get("seq").and_then(Value::as_u64).unwrap_or(0)
        );
    }
    if list.is_empty() {
        list.push_str("<li class=\"muted\">Nothing learned yet.</li>");
    }
    let body = format!(
        "<h1>Search</h1>{}<div id=\"results\"><h2>Recent changes</h2>\
         <p class=\"muted\">What was learned or edited, newest first ({} sections, {} documents in all).</p>\
         <ol class=\"results\">{list}</ol></div>",
        search_form(None),
        status.get("sections").and_then(Value::as_u64).unwrap_or(0),
        status.get("documents").and_then(Value::as_u64).unwrap_or(0),
    );
    ok("Search", "/", &body)
}

/// A short title for a section from its content: its first line without the heading marks
/// (images and empty text: the type).
fn title_of(section_type: &str, content: &str) -> String {
    if !section_type.starts_with("text/") {
        return section_type.to_string();
    }
    let line = content
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .trim_start_matches('#')
        .trim();
    let mut t: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        t.push('…');
    }
    if t.is_empty() { "(empty)".into() } else { t }
}

fn item_html(i: &SearchItem) -> String {
    let docs: Vec<String> = i.docids.iter().map(|d| doc_link(d, None)).collect();
    format!(
        "<li>{} <span class=\"meta\">{}{}</span><p class=\"snippet\">{}</p></li>",
        section_link(&i.kbid, i.heading.as_deref()),
        escape(&i.section_type),
        if docs.is_empty() {
            String::new()
        } else {
            format!(" · in {}", docs.join(", "))
        },
        snippet(&i.snippet, &i.matched_terms)
    )
}

fn results_html(r: &SearchResponse, uri: &Uri, page: usize) -> String {
    let mut out = String::new();
    if r.relaxed {
        out.push_str("<p class=\"notice\" id=\"relaxed\">No section has all the words; showing sections with some of them.</p>");
    }
    if let Some(c) = &r.corrected
        && !c.is_empty()
    {
        let list: Vec<String> = c
            .iter()
            .map(|(from, to)| format!("{} → {}", escape(from), escape(to)))
            .collect();
        let _ = write!(
            out,
            "<p class=\"notice\" id=\"fuzzy\">Searched with corrected spelling: {}.</p>",
            list.join(", ")
        );
    }
    if let Some(h) = &r.hint
        && !r.relaxed
    {
        let _ = write!(out, "<p class=\"notice\">{}</p>", escape(h));
    }
    for w in &r.warnings {
        let _ = write!(out, "<p class=\"notice\">{}</p>", escape(w));
    }
    if r.vector_index_stale {
        out.push_str("<p class=\"notice\">The stored vectors are of another model: ranked by words only.</p>");
    }
    if let Some(st) = &r.stats {
        let _ = write!(
            out,
            "<p>{} matching section(s)</p><div class=\"columns\">",
            r.total
        );
        for (title, map) in [
            ("type", &st.by_type),
            ("tag", &st.by_tag),
            ("document", &st.by_document),
        ] {
            let _ = write!(out, "<div><h2>By {title}</h2><table>");
            for (k, v) in map.iter().take(LIST_PAGE) {
                let _ = write!(out, "<tr><td>{}</td><td>{v}</td></tr>", escape(k));
            }
            out.push_str("</table></div>");
        }
        out.push_str("<div><h2>Terms</h2><table>");
        for t in &st.terms {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                escape(&t.term),
                t.document_frequency
            );
        }
        out.push_str("</table></div></div>");
        return out;
    }
    let shown = r.items.len();
    let _ = write!(
        out,
        "<p class=\"meta\">{}{} of {} result(s){}</p><ol class=\"results\">",
        if shown > 0 {
            format!("{}–", r.offset + 1)
        } else {
            String::new()
        },
        r.offset + shown,
        r.total,
        if r.retrieval_method != "lexical" {
            format!(", ranked by {}", escape(&r.retrieval_method))
        } else {
            String::new()
        }
    );
    match &r.items {
        SearchItems::Sections(items) => {
            for i in items {
                out.push_str(&item_html(i));
            }
        }
        SearchItems::Documents(docs) => {
            for d in docs {
                let _ = write!(
                    out,
                    "<li>{} <span class=\"meta\">{} matching section(s)</span><ol class=\"results\">",
                    match &d.docid {
                        Some(id) => doc_link(id, d.title.as_deref()),
                        None => "(no document)".to_string(),
                    },
                    d.hits
                );
                for i in &d.sections {
                    out.push_str(&item_html(i));
                }
                out.push_str("</ol></li>");
            }
        }
    }
    out.push_str("</ol>");
    if shown == 0 {
        out.push_str("<p class=\"muted\">No results.</p>");
    }
    // Paging links keep every parameter but the page.
    let base: String = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("page=") && !p.starts_with("fragment="))
        .collect::<Vec<_>>()
        .join("&");
    out.push_str("<div class=\"pager\">");
    if page > 1 {
        let _ = write!(
            out,
            "<a rel=\"prev\" href=\"/search?{}&amp;page={}\">← previous</a>",
            escape(&base),
            page - 1
        );
    }
    if r.has_more && page < MAX_PAGE {
        let _ = write!(
            out,
            "<a rel=\"next\" href=\"/search?{}&amp;page={}\">next →</a>",
            escape(&base),
            page + 1
        );
    }
    out.push_str("</div>");
    out
}

pub async fn search(State(state): State<Arc<WebState>>, uri: Uri) -> Response {
    match search_page(&state, &uri).await {
        Ok(r) | Err(r) => r,
    }
}

async fn search_page(state: &WebState, uri: &Uri) -> Result<Response, Response> {
    let page = page_param(uri, MAX_PAGE).map_err(IntoResponse::into_response)?;
    let fragment = param(uri, "fragment").is_some();
    let Some(q) = param(uri, "q") else {
        return Ok(Html(
            StatusCode::OK,
            layout(
                "Search",
                "/",
                &format!(
                    "<h1>Search</h1>{}<div id=\"results\"></div>",
                    search_form(Some(uri))
                ),
            ),
        )
        .into_response());
    };
    let mut params = json!({"query": q, "limit": PAGE_SIZE, "offset": (page - 1) * PAGE_SIZE});
    if let Some(mode) = param(uri, "mode") {
        if !MODES.contains(&mode.as_str()) {
            return Err(bad(
                StatusCode::BAD_REQUEST,
                &format!("mode: must be one of {}, not {mode:?}", MODES.join(", ")),
            )
            .into_response());
        }
        params["mode"] = json!(mode);
    }
    if let Some(tag) = param(uri, "tag") {
        params["tags"] = json!([tag]);
    }
    for (field, key) in [
        ("type", "section_type"),
        ("docid", "docid"),
        ("model", "model"),
    ] {
        if let Some(v) = param(uri, field) {
            params[key] = json!(v);
        }
    }
    let value = state
        .call("search", params)
        .await
        .map_err(|e| failed(e).into_response())?;
    let r: SearchResponse = serde_json::from_value(value).map_err(|e| {
        bad(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("unexpected search answer: {e}"),
        )
        .into_response()
    })?;
    let results = results_html(&r, uri, page);
    if fragment {
        return Ok(Html(StatusCode::OK, results).into_response());
    }
    Ok(Html(
        StatusCode::OK,
        layout(
            &format!("{q} — search"),
            "/",
            &format!(
                "<h1>Search</h1>{}<div id=\"results\">{results}</div>",
                search_form(Some(uri))
            ),
        ),
    )
    .into_response())
}

// ---- a section ----

/// A section's content as HTML: markdown rendered, images shown, code highlighted, anything
/// else as preformatted text.
fn content_html(kbid: &str, section_type: &str, content: &str) -> String {
    if section_type.starts_with("image/") {
        return format!("<p><img src=\"/raw/{}\" alt=\"\"></p>", url_encode(kbid));
    }
    if section_type == "text/markdown" {
        return markdown(content);
    }
    let lang = section_type
        .rsplit(['/', '-'])
        .next()
        .unwrap_or("")
        .trim_start_matches("x-");
    super::render::code_block(lang, content)
}

/// A node of the neighbourhood graph.
struct Node {
    href: String,
    label: String,
    doc: bool,
}

/// The nodes a recall answer links to: references made, back-references, documents.
fn neighbours(recall: &Value) -> Vec<Node> {
    let mut out: Vec<Node> = Vec::new();
    let mut push = |href: String, label: String, doc: bool| {
        if !out.iter().any(|n| n.href == href) {
            out.push(Node { href, label, doc });
        }
    };
    for key in ["references", "back_references"] {
        for r in recall
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            if let Some(k) = str_of(r, "kbid") {
                push(
                    format!("/section/{}", url_encode(k)),
                    str_of(r, "heading").unwrap_or(k).to_string(),
                    false,
                );
            } else if let Some(d) = str_of(r, "docid") {
                push(format!("/doc/{}", docid_path(d)), d.to_string(), true);
            }
        }
    }
    for d in recall
        .get("docids")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        if let Some(d) = d.as_str() {
            push(format!("/doc/{}", docid_path(d)), d.to_string(), true);
        }
    }
    out
}

fn short(label: &str) -> String {
    let mut s: String = label.chars().take(18).collect();
    if label.chars().count() > 18 {
        s.push('…');
    }
    s
}

/// The neighbourhood as an SVG: the section in the middle, its neighbours on a ring, theirs
/// (depth 2) on an outer ring; every node a link.
fn graph_svg(center: &str, ring1: &[Node], ring2: &[(usize, Vec<Node>)]) -> String {
    let (w, h) = (560.0f64, if ring2.is_empty() { 360.0 } else { 520.0 });
    let (cx, cy) = (w / 2.0, h / 2.0);
    let r1 = if ring2.is_empty() { 130.0 } else { 120.0 };
    let r2 = 225.0;
    let mut lines = String::new();
    let mut nodes = String::new();
    let n1 = ring1.len().max(1) as f64;
    let pos1: Vec<(f64, f64, f64)> = (0..ring1.len())
        .map(|i| {
            let a = std::f64::consts::TAU * i as f64 / n1 - std::f64::consts::FRAC_PI_2;
            (cx + r1 * a.cos(), cy + r1 * a.sin(), a)
        })
        .collect();
    let node = |out: &mut String, x: f64, y: f64, n: &Node, r: f64| {
        let _ = write!(
            out,
            "<a href=\"{}\"><title>{}</title><circle class=\"{}\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\"></circle>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></a>",
            escape(&n.href),
            escape(&n.label),
            if n.doc { "doc" } else { "sec" },
            y + r + 11.0,
            escape(&short(&n.label))
        );
    };
    for (parent, children) in ring2 {
        let Some(&(px, py, pa)) = pos1.get(*parent) else {
            continue;
        };
        let spread = (std::f64::consts::TAU / n1).min(1.0) * 0.8;
        let m = children.len().max(1) as f64;
        for (j, c) in children.iter().enumerate() {
            let a = pa - spread / 2.0 + spread * (j as f64 + 0.5) / m;
            let (x, y) = (cx + r2 * a.cos(), cy + r2 * a.sin());
            let _ = write!(
                lines,
                "<line x1=\"{px:.1}\" y1=\"{py:.1}\" x2=\"{x:.1}\" y2=\"{y:.1}\"></line>"
            );
            node(&mut nodes, x, y, c, 6.0);
        }
    }
    for (n, &(x, y, _)) in ring1.iter().zip(&pos1) {
        let _ = write!(
            lines,
            "<line x1=\"{cx:.1}\" y1=\"{cy:.1}\" x2=\"{x:.1}\" y2=\"{y:.1}\"></line>"
        );
        node(&mut nodes, x, y, n, 8.0);
    }
    let _ = write!(
        nodes,
        "<circle class=\"center\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"11\"></circle>\
         <text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        cy + 24.0,
        escape(&short(center))
    );
    format!(
        "<svg class=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"neighbourhood\">{lines}{nodes}</svg>"
    )
}

pub async fn section(
    State(state): State<Arc<WebState>>,
    Path(kbid): Path<String>,
    uri: Uri,
) -> PageResult {
    let depth = match param(&uri, "depth").as_deref() {
        None | Some("1") => 1,
        Some("2") => 2,
        Some(d) => {
            return Err(bad(
                StatusCode::BAD_REQUEST,
                &format!("depth: must be 1 or 2, not {d:?}"),
            ));
        }
    };
    let r = state
        .call(
            "recall",
            json!({"kbid": kbid, "depth": 2, "max_chars": 200_000}),
        )
        .await
        .map_err(failed)?;
    let heading = str_of(&r, "heading").unwrap_or("(untitled)").to_string();
    let section_type = str_of(&r, "type").unwrap_or("text/markdown");
    let content = str_of(&r, "content").unwrap_or("");
    let mut body = format!(
        "<h1>{}</h1><p class=\"meta\"><span class=\"kbid\">{}</span> · {}</p><div class=\"content\">{}</div>",
        escape(&heading),
        escape(&kbid),
        escape(section_type),
        content_html(&kbid, section_type, content)
    );
    // Documents, with the section's place in each.
    body.push_str("<div class=\"columns\"><div><h2>Documents</h2>");
    let docs = r
        .get("documents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if docs.is_empty() {
        body.push_str("<p class=\"muted\">In no document.</p>");
    }
    for d in docs {
        let docid = str_of(d, "docid").unwrap_or("");
        let _ = write!(body, "<p>{}</p><ol>", doc_link(docid, str_of(d, "title")));
        for s in d
            .get("sections")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .take(LIST_PAGE)
        {
            let k = str_of(s, "kbid").unwrap_or("");
            if k == kbid {
                let _ = write!(
                    body,
                    "<li><strong>{}</strong></li>",
                    escape(str_of(s, "heading").unwrap_or("(untitled)"))
                );
            } else {
                let _ = write!(body, "<li>{}</li>", section_link(k, str_of(s, "heading")));
            }
        }
        body.push_str("</ol>");
    }
    body.push_str("</div><div><h2>References</h2><ul class=\"plain\" id=\"references\">");
    let refs = r
        .get("references")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for x in refs.iter().take(LIST_PAGE) {
        let target = str_of(x, "target").unwrap_or("");
        let link = if let Some(k) = str_of(x, "kbid") {
            section_link(k, str_of(x, "heading"))
        } else if let Some(d) = str_of(x, "docid") {
            doc_link(d, str_of(x, "heading"))
        } else {
            escape(target)
        };
        let resolved = x.get("resolved").and_then(Value::as_bool).unwrap_or(true);
        let _ = write!(
            body,
            "<li>{link}{}</li>",
            if resolved {
                ""
            } else {
                " <span class=\"meta\">(not found)</span>"
            }
        );
    }
    if refs.is_empty() {
        body.push_str("<li class=\"muted\">None.</li>");
    }
    body.push_str("</ul><h2>Referenced by</h2><ul class=\"plain\" id=\"back-references\">");
    let back = r
        .get("back_references")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for x in back.iter().take(LIST_PAGE) {
        let link = match (str_of(x, "kbid"), str_of(x, "docid")) {
            (Some(k), _) => section_link(k, str_of(x, "heading")),
            (None, Some(d)) => doc_link(d, None),
            _ => continue,
        };
        let _ = write!(body, "<li>{link}</li>");
    }
    if back.is_empty() {
        body.push_str("<li class=\"muted\">None.</li>");
    }
    body.push_str("</ul></div></div>");
    // The neighbourhood.
    let ring1: Vec<Node> = neighbours(&r).into_iter().take(RING1).collect();
    let mut ring2 = Vec::new();
    if depth == 2 {
        let kbids: Vec<String> = ring1
            .iter()
            .filter_map(|n| {
                n.href
                    .strip_prefix("/section/")
                    .map(crate::text::markers::percent_decode)
            })
            .collect();
        if !kbids.is_empty() {
            let many = state
                .call(
                    "recall",
                    json!({"kbids": kbids, "depth": 2, "max_chars": 20_000}),
                )
                .await
                .map_err(failed)?;
            for (i, n) in ring1.iter().enumerate() {
                let Some(k) = n.href.strip_prefix("/section/") else {
                    continue;
                };
                let k = crate::text::markers::percent_decode(k);
                let Some(rec) = many
                    .as_array()
                    .and_then(|a| a.iter().find(|x| str_of(x, "kbid") == Some(k.as_str())))
                else {
                    continue;
                };
                let own = format!("/section/{}", url_encode(&kbid));
                let children: Vec<Node> = neighbours(rec)
                    .into_iter()
                    .filter(|c| c.href != own && !ring1.iter().any(|o| o.href == c.href))
                    .take(RING2_EACH)
                    .collect();
                if !children.is_empty() {
                    ring2.push((i, children));
                }
            }
        }
    }
    let _ = write!(
        body,
        "<h2>Neighbourhood</h2><p class=\"meta\">Depth {depth} · <a href=\"/section/{}?depth={}\">show depth {}</a></p>{}",
        url_encode(&kbid),
        3 - depth,
        3 - depth,
        graph_svg(&heading, &ring1, &ring2)
    );
    ok(&heading, "", &body)
}

/// An image section's bytes (only raster types; anything else is refused).
pub async fn raw(State(state): State<Arc<WebState>>, Path(kbid): Path<String>) -> Response {
    use base64::Engine;
    let r = match state.call("retrieve", json!({"kbid": kbid})).await {
        Ok(r) => r,
        Err(e) => return failed(e).into_response(),
    };
    let item = r.get(0).cloned().unwrap_or(Value::Null);
    let kind = str_of(&item, "sectionType").unwrap_or("");
    if !matches!(
        kind,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) {
        return error_page(StatusCode::NOT_FOUND, "not an image section");
    }
    let Ok(bytes) =
        base64::engine::general_purpose::STANDARD.decode(str_of(&item, "content").unwrap_or(""))
    else {
        return error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the image is not valid base64",
        );
    };
    let mut resp = bytes.into_response();
    if let Ok(v) = HeaderValue::from_str(kind) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=3600"),
    );
    resp
}

// ---- documents ----

pub async fn document(State(state): State<Arc<WebState>>, Path(docid): Path<String>) -> PageResult {
    let doc = state
        .call("retrieve", json!({"docid": docid}))
        .await
        .map_err(failed)?;
    let title = str_of(&doc, "title").unwrap_or(&docid).to_string();
    let kbids: Vec<String> = doc
        .get("kbids")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|k| k.as_str().map(String::from))
                .take(200)
                .collect()
        })
        .unwrap_or_default();
    let total = doc
        .get("kbids")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let sections = if kbids.is_empty() {
        Value::Array(vec![])
    } else {
        state
            .call("retrieve_many", json!({"kbids": kbids}))
            .await
            .map_err(failed)?
    };
    let mut body = format!(
        "<h1>{}</h1><p class=\"meta\">{} · {} section(s) · updated {}</p>",
        escape(&title),
        escape(&docid),
        total,
        escape(str_of(&doc, "updated_at").unwrap_or(""))
    );
    let listed = doc
        .get("sections")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for s in sections.as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let k = str_of(s, "kbid").unwrap_or("");
        let t = str_of(s, "sectionType").unwrap_or("text/markdown");
        let content = str_of(s, "content").unwrap_or("");
        let heading = listed
            .iter()
            .find(|x| str_of(x, "kbid") == Some(k))
            .and_then(|x| str_of(x, "heading"))
            .map(String::from)
            .unwrap_or_else(|| title_of(t, content));
        let _ = write!(
            body,
            "<section class=\"content\"><p class=\"meta\"><a href=\"/section/{}\">{}</a> · <span class=\"kbid\">{}</span></p>{}</section>",
            url_encode(k),
            escape(&heading),
            escape(k),
            content_html(k, t, content)
        );
    }
    if total > kbids.len() {
        let _ = write!(
            body,
            "<p class=\"muted\">The first {} of {total} sections are shown.</p>",
            kbids.len()
        );
    }
    ok(&title, "/docs", &body)
}

pub async fn docs(State(state): State<Arc<WebState>>, uri: Uri) -> PageResult {
    let page = page_param(&uri, 100_000)?;
    let r = state
        .call(
            "documents_page",
            json!({"offset": (page - 1) * LIST_PAGE, "limit": LIST_PAGE}),
        )
        .await
        .map_err(failed)?;
    let total = r.get("total").and_then(Value::as_u64).unwrap_or(0) as usize;
    let list = r
        .get("documents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut body = format!(
        "<h1>Documents</h1><p class=\"meta\">{total} document(s), newest first</p><table><tr><th>document</th><th>docid</th><th>sections</th><th>updated</th></tr>"
    );
    for d in list {
        let docid = str_of(d, "docid").unwrap_or("");
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"kbid\">{}</td><td>{}</td><td class=\"meta\">{}</td></tr>",
            doc_link(docid, str_of(d, "title")),
            escape(docid),
            d.get("sections").and_then(Value::as_u64).unwrap_or(0),
            escape(str_of(d, "updated_at").unwrap_or(""))
        );
    }
    body.push_str("</table>");
    body.push_str(&pager("/docs?", page, total > page * LIST_PAGE));
    ok("Documents", "/docs", &body)
}

fn pager(base: &str, page: usize, more: bool) -> String {
    let mut out = String::from("<div class=\"pager\">");
    if page > 1 {
        let _ = write!(
            out,
            "<a rel=\"prev\" href=\"{}page={}\">← previous</a>",
            escape(base),
            page - 1
        );
    }
    if more {
        let _ = write!(
            out,
            "<a rel=\"next\" href=\"{}page={}\">next →</a>",
            escape(base),
            page + 1
        );
    }
    out.push_str("</div>");
    out
}

pub async fn tags(State(state): State<Arc<WebState>>, uri: Uri) -> PageResult {
    let page = page_param(&uri, 100_000)?;
    let all = state.call("tag_counts", json!({})).await.map_err(failed)?;
    let list = all.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut body = format!(
        "<h1>Tags</h1><p class=\"meta\">{} tag(s), most used first</p><table><tr><th>tag</th><th>sections</th></tr>",
        list.len()
    );
    for t in list.iter().skip((page - 1) * LIST_PAGE).take(LIST_PAGE) {
        let tag = str_of(t, "tag").unwrap_or("");
        let _ = write!(
            body,
            "<tr><td>{1} <a class=\"meta\" href=\"/search?q={0}\">search the word</a></td><td>{2}</td></tr>",
            url_encode(tag),
            escape(tag),
            t.get("sections").and_then(Value::as_u64).unwrap_or(0)
        );
    }
    body.push_str("</table>");
    body.push_str(&pager("/tags?", page, list.len() > page * LIST_PAGE));
    ok("Tags", "/tags", &body)
}

// ---- collections ----

pub async fn collections(State(state): State<Arc<WebState>>, uri: Uri) -> PageResult {
    let page = page_param(&uri, 100_000)?;
    let inspect = state.call("inspect", json!({})).await.map_err(failed)?;
    let models: Vec<String> = inspect
        .get("models")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| {
                    m.as_str()
                        .map(String::from)
                        .or_else(|| str_of(m, "name").map(String::from))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut body = String::from("<h1>Collections</h1>");
    if models.is_empty() {
        body.push_str("<p class=\"muted\">No models are defined (<code>kbdb models load models.toml</code>).</p>");
        return ok("Collections", "/collections", &body);
    }
    let model = param(&uri, "model").unwrap_or_else(|| models[0].clone());
    body.push_str("<p>");
    for m in &models {
        let _ = write!(
            body,
            "<a href=\"/collections?model={}\">{}{}{}</a> ",
            url_encode(m),
            if *m == model { "<strong>" } else { "" },
            escape(m),
            if *m == model { "</strong>" } else { "" }
        );
    }
    body.push_str("</p>");
    let where_text = param(&uri, "where");
    let mut q = json!({"model": model, "limit": LIST_PAGE, "offset": (page - 1) * LIST_PAGE});
    if let Some(w) = &where_text {
        let parsed: Value = serde_json::from_str(w).map_err(|e| {
            bad(
                StatusCode::BAD_REQUEST,
                &format!("where: is not valid JSON ({e}); e.g. {{\"status\": \"ready\"}}"),
            )
        })?;
        q["where"] = parsed;
    }
    let _ = write!(
        body,
        "<form class=\"search\" method=\"get\" action=\"/collections\"><input type=\"hidden\" name=\"model\" value=\"{}\">\
         <input name=\"where\" placeholder='where, as JSON: {{\"status\": \"ready\"}}' value=\"{}\"><button type=\"submit\">Filter</button></form>",
        escape(&model),
        escape(where_text.as_deref().unwrap_or(""))
    );
    let result = state.call("query", q).await.map_err(failed)?;
    let rows: Vec<Value> = result
        .get("results")
        .or_else(|| result.get("documents"))
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| result.as_array().cloned())
        .unwrap_or_default();
    let mut columns: Vec<String> = Vec::new();
    for r in &rows {
        if let Some(meta) = r.get("meta").and_then(Value::as_object) {
            for k in meta.keys() {
                if !columns.contains(k) && columns.len() < 12 {
                    columns.push(k.clone());
                }
            }
        }
    }
    body.push_str("<table><tr><th>document</th>");
    for c in &columns {
        let _ = write!(body, "<th>{}</th>", escape(c));
    }
    body.push_str("</tr>");
    for r in &rows {
        let id = str_of(r, "id").unwrap_or("");
        let _ = write!(body, "<tr><td>{}</td>", doc_link(id, str_of(r, "title")));
        for c in &columns {
            let v = r
                .get("meta")
                .and_then(|m| m.get(c))
                .cloned()
                .unwrap_or(Value::Null);
            let text = match v {
                Value::Null => String::new(),
                Value::String(s) => s,
                other => other.to_string(),
            };
            let _ = write!(body, "<td>{}</td>", escape(&text));
        }
        body.push_str("</tr>");
    }
    body.push_str("</table>");
    if rows.is_empty() {
        body.push_str("<p class=\"muted\">No documents match.</p>");
    }
    let base = format!(
        "/collections?model={}{}&",
        url_encode(&model),
        where_text
            .map(|w| format!("&where={}", url_encode(&w)))
            .unwrap_or_default()
    );
    body.push_str(&pager(&base, page, rows.len() == LIST_PAGE));
    ok("Collections", "/collections", &body)
}

pub async fn validation(State(state): State<Arc<WebState>>) -> PageResult {
    let r = state
        .call("validation_report", json!({"limit": LIST_PAGE * 5}))
        .await
        .map_err(failed)?;
    let mut body = String::from(
        "<h1>Validation</h1><p class=\"meta\">Documents of collection models checked against their model (the <code>validate</code> tool).</p>",
    );
    let count = |k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    let problems = r
        .get("problems")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let _ = write!(
        body,
        "<p>{} checked · {} valid · <strong>{} invalid</strong> · {} with problems{}</p>",
        count("checked"),
        count("valid"),
        count("invalid"),
        count("with_problems"),
        if count("with_problems") as usize > problems.len() {
            format!(" (the first {} shown)", problems.len())
        } else {
            String::new()
        }
    );
    if problems.is_empty() {
        body.push_str("<p class=\"muted\">No problems.</p>");
    } else {
        body.push_str(
            "<table><tr><th>document</th><th>model</th><th>errors</th><th>warnings</th></tr>",
        );
        for x in problems {
            let list = |k: &str| -> String {
                x.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|e| {
                                let text = e.as_str().map(String::from).unwrap_or_else(|| {
                                    str_of(e, "message")
                                        .map(String::from)
                                        .unwrap_or_else(|| e.to_string())
                                });
                                format!("<li>{}</li>", escape(&text))
                            })
                            .collect::<String>()
                    })
                    .unwrap_or_default()
            };
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td><ul class=\"plain\">{}</ul></td><td><ul class=\"plain\">{}</ul></td></tr>",
                doc_link(str_of(x, "docid").unwrap_or(""), None),
                escape(str_of(x, "model").unwrap_or("")),
                list("errors"),
                list("warnings")
            );
        }
        body.push_str("</table>");
    }
    ok("Validation", "/validation", &body)
}

// ---- status ----

pub async fn status(State(state): State<Arc<WebState>>) -> PageResult {
    let s = state.call("status", json!({})).await.map_err(failed)?;
    let mut body = String::from("<h1>Status</h1><table>");
    if let Some(obj) = s.as_object() {
        for (k, v) in obj {
            let text = match v {
                Value::String(t) => t.clone(),
                other => other.to_string(),
            };
            let _ = write!(
                body,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(k),
                escape(&text)
            );
        }
    }
    body.push_str("</table><h2>Integrity check</h2>");
    let cached = state
        .check
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    match cached {
        None => body.push_str("<p class=\"muted\">Not run since the server started. It reads everything, so it runs only when asked.</p>"),
        Some((when, r)) => {
            let errors = r.get("errors").and_then(Value::as_array).map_or(0, Vec::len);
            let warnings = r.get("warnings").and_then(Value::as_array).map_or(0, Vec::len);
            let _ = write!(
                body,
                "<p id=\"check-result\">Run at {}: {} · {errors} error(s), {warnings} warning(s)</p>",
                escape(&when),
                if r.get("ok").and_then(Value::as_bool).unwrap_or(false) { "ok" } else { "problems found" }
            );
            for key in ["errors", "warnings"] {
                let items = r.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
                if items.is_empty() {
                    continue;
                }
                let _ = write!(body, "<h2>{key}</h2><table><tr><th>type</th><th>entity</th><th>detail</th></tr>");
                for e in items.iter().take(LIST_PAGE) {
                    let f = |k: &str| escape(&e.get(k).map(|v| v.as_str().map(String::from).unwrap_or_else(|| v.to_string())).unwrap_or_default());
                    let _ = write!(body, "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", f("type"), f("entity"), f("detail"));
                }
                body.push_str("</table>");
            }
        }
    }
    body.push_str("<form method=\"post\" action=\"/status/check\"><button type=\"submit\">Run the check</button></form>");
    ok("Status", "/status", &body)
}

pub async fn run_check(State(state): State<Arc<WebState>>) -> Response {
    match state.call("check", json!({})).await {
        Ok(r) => {
            let when = chrono::Utc::now()
                .format("%Y-%m-%d %H:%M:%S UTC")
                .to_string();
            *state.check.lock().unwrap_or_else(|p| p.into_inner()) = Some((when, r));
            let mut resp = StatusCode::SEE_OTHER.into_response();
            resp.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/status"));
            resp
        }
        Err(e) => failed(e).into_response(),
    }
}

pub async fn sign_out(
    State(state): State<Arc<WebState>>,
    axum::Extension(SessionId(id)): axum::Extension<SessionId>,
) -> Response {
    state.sessions.end(&id);
    let mut resp = sign_in_page(StatusCode::OK, Some("Signed out."));
    resp.headers_mut()
        .insert(header::SET_COOKIE, super::clear_cookie(&state));
    resp
}
