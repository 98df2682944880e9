//! The web page of `kbdb serve` (docs/web.md): the real binary on a loopback port with a real
//! daemon, driven over plain HTTP (sign-in, sessions, headers, safe rendering, the Origin check
//! of POSTs, bad parameters), and in a real headless Chromium through Playwright for Python
//! (tests/web/browser.py) when both are installed — required when KBDB_REQUIRE_BROWSER=1 (CI).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use common::TestDb;
use reqwest::blocking::{Client, Response};
use serde_json::Value;

/// A running `kbdb serve` on a free loopback port; stopped (SIGTERM) when dropped.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`
    base: String,
    /// The one-time sign-in link it printed.
    sign_in: String,
    port: u16,
}

impl Served {
    fn start(db: &TestDb) -> Served {
        let mut child = db
            .process()
            .args(["serve", "--listen", "127.0.0.1:0", "--format", "json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let started: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("kbdb serve printed {line:?} ({e})"));
        let listening = started["listening"].as_str().unwrap().to_string();
        let port = listening.rsplit(':').next().unwrap().parse().unwrap();
        Served {
            child,
            base: format!("http://{listening}"),
            sign_in: started["web"].as_str().unwrap().to_string(),
            port,
        }
    }

    fn cookie_name(&self) -> String {
        format!("kbdb_session_{}", self.port)
    }

    /// Sign in with the link; the `Cookie` header value of the session.
    fn sign_in(&self) -> String {
        let r = http().get(&self.sign_in).send().unwrap();
        assert_eq!(r.status(), 303, "{}", r.text().unwrap_or_default());
        let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
        set.split(';').next().unwrap().to_string()
    }

    fn get(&self, path: &str, cookie: Option<&str>) -> Response {
        let mut req = http().get(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header("Cookie", c);
        }
        req.send().unwrap()
    }

    fn page(&self, path: &str, cookie: &str) -> String {
        let r = self.get(path, Some(cookie));
        let status = r.status();
        let body = r.text().unwrap();
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        common::daemon::signal(self.child.id(), libc::SIGTERM);
        let _ = self.child.wait();
    }
}

/// A client that follows no redirects and keeps no cookies (each test sends its own).
fn http() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A database with a small document, a section that references it, and a hostile section.
fn sample() -> (TestDb, Value) {
    let db = TestDb::new();
    let adr = db.json(&[
        "learn",
        "--docid",
        "adr/7",
        "--split",
        "# ADR 7: Postgres\n## Context\nWe need JSON queries.\n## Decision\nWe chose Postgres because of JSONB.\n\n```rust\nfn main() { let answer = 42; }\n```\n",
    ]);
    let decision = adr["sections"]
        .as_array()
        .and_then(|s| s.iter().find(|x| x["heading"] == "Decision"))
        .map(|x| x["kbid"].as_str().unwrap().to_string());
    let hostile = db.learn(&[
        "Careful: <script>alert('xss')</script> and <img src=x onerror=alert(1)> \
         and [a trap](javascript:alert(2)) but see [the ADR](kbdb://document/adr/7).",
        "--title",
        "Hostile note",
        "--tag",
        "security",
    ]);
    let ids = serde_json::json!({
        "decision": decision,
        "hostile": hostile["kbid"],
    });
    (db, ids)
}

#[test]
fn without_a_session_the_page_shows_no_knowledge() {
    let (db, ids) = sample();
    let s = Served::start(&db);
    let hostile = ids["hostile"].as_str().unwrap();
    for path in [
        "/".to_string(),
        "/search?q=postgres".into(),
        format!("/section/{hostile}"),
        "/doc/adr/7".into(),
        "/docs".into(),
        "/tags".into(),
        "/status".into(),
        format!("/raw/{hostile}"),
    ] {
        for cookie in [None, Some(format!("{}=forged", s.cookie_name()))] {
            let r = s.get(&path, cookie.as_deref());
            assert_eq!(r.status(), 401, "{path} with {cookie:?}");
            let body = r.text().unwrap();
            assert!(body.contains("Sign in"), "{path}: {body}");
            for secret in ["Postgres", "Hostile", "JSONB", "adr/7", "security"] {
                assert!(!body.contains(secret), "{path} shows {secret}: {body}");
            }
        }
    }
    // A wrong sign-in link signs nobody in.
    let r = s.get("/?token=not-the-secret", None);
    assert_eq!(r.status(), 401);
    assert!(r.headers().get("set-cookie").is_none());
}

#[test]
fn the_sign_in_link_sets_an_httponly_strict_cookie_and_works_once() {
    let (db, _) = sample();
    let s = Served::start(&db);
    assert!(
        s.sign_in.starts_with(&format!("{}/?token=", s.base)),
        "{}",
        s.sign_in
    );
    let r = http().get(&s.sign_in).send().unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/", "the token leaves the URL");
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set.starts_with(&format!("{}=", s.cookie_name())), "{set}");
    assert!(set.contains("HttpOnly"), "{set}");
    assert!(set.contains("SameSite=Strict"), "{set}");
    assert!(set.contains("Path=/"), "{set}");
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let home = s.page("/", &cookie);
    assert!(
        home.contains("Recent changes") && home.contains("Careful: &lt;script&gt;"),
        "{home}"
    );
    // The link is spent: using it again signs nobody in, the session goes on.
    let again = http().get(&s.sign_in).send().unwrap();
    assert_eq!(again.status(), 401);
    assert!(again.headers().get("set-cookie").is_none());
    assert_eq!(s.get("/docs", Some(&cookie)).status(), 200);
    // Signing out ends the session (a POST from the page's own origin).
    let out = http()
        .post(format!("{}/signout", s.base))
        .header("Cookie", &cookie)
        .header("Origin", &s.base)
        .send()
        .unwrap();
    assert_eq!(out.status(), 200);
    assert_eq!(s.get("/docs", Some(&cookie)).status(), 401);
}

#[test]
fn every_answer_carries_the_content_security_policy() {
    let (db, _) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    for (path, c) in [
        ("/", None),
        ("/", Some(cookie.as_str())),
        ("/search?q=postgres", Some(cookie.as_str())),
        ("/search?q=x&page=zero", Some(cookie.as_str())),
        ("/assets/app.js", None),
    ] {
        let r = s.get(path, c);
        let h = r.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{path}: {csp}"
        );
        assert!(
            csp.contains("object-src 'none'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "same-origin", "{path}");
    }
}

#[test]
fn hostile_content_is_shown_as_text() {
    let (db, ids) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let hostile = ids["hostile"].as_str().unwrap();
    let page = s.page(&format!("/section/{hostile}"), &cookie);
    assert!(
        page.contains("&lt;script&gt;alert(&#39;xss&#39;)&lt;/script&gt;")
            || page.contains("&lt;script&gt;alert('xss')&lt;/script&gt;"),
        "{page}"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(!page.contains("<img src=x"), "{page}");
    assert!(
        !page.to_lowercase().contains("javascript:"),
        "the javascript: link is dropped: {page}"
    );
    assert!(page.contains("a trap"), "its text stays: {page}");
    // The kbdb:// link became a link to the document's view, and the document lists it back.
    assert!(
        page.contains("<a href=\"/doc/adr/7\">the ADR</a>"),
        "{page}"
    );
    // The search snippet is escaped too.
    let found = s.page("/search?q=careful", &cookie);
    assert!(
        found.contains("&lt;script&gt;") && !found.contains("<script>alert"),
        "{found}"
    );
}

#[test]
fn a_section_shows_its_documents_references_and_neighbourhood() {
    let (db, ids) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let decision = ids["decision"].as_str().unwrap();
    let page = s.page(&format!("/section/{decision}"), &cookie);
    assert!(
        page.contains("<h2>Documents</h2>") && page.contains("href=\"/doc/adr/7\""),
        "{page}"
    );
    assert!(
        page.contains("<span class=\"k\">fn</span>"),
        "code is highlighted: {page}"
    );
    assert!(page.contains("<svg class=\"graph\""), "{page}");
    let deeper = s.page(&format!("/section/{decision}?depth=2"), &cookie);
    assert!(deeper.contains("Depth 2"), "{deeper}");
    // The document view shows its sections in order.
    let doc = s.page("/doc/adr/7", &cookie);
    let (a, b, c) = (
        doc.find("ADR 7: Postgres</h1>").unwrap(),
        doc.find("Context").unwrap(),
        doc.find("Decision").unwrap(),
    );
    assert!(a < b && b < c, "{doc}");
    // The hostile note references the document: it is a back-reference of the document's view
    // in recall; the tags view counts its tag.
    let tags = s.page("/tags", &cookie);
    assert!(
        tags.contains("security") && tags.contains("<td>1</td>"),
        "{tags}"
    );
    let docs = s.page("/docs", &cookie);
    assert!(docs.contains("ADR 7: Postgres"), "{docs}");
    let status = s.page("/status", &cookie);
    assert!(
        status.contains("sections") && status.contains("Run the check"),
        "{status}"
    );
}

#[test]
fn search_shows_snippets_modes_filters_and_the_relaxed_notice() {
    let (db, _) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let page = s.page("/search?q=postgres", &cookie);
    assert!(page.contains("<mark>Postgres</mark>"), "{page}");
    let relaxed = s.page("/search?q=postgres+zebra", &cookie);
    assert!(relaxed.contains("id=\"relaxed\""), "{relaxed}");
    let docs = s.page("/search?q=postgres&mode=documents", &cookie);
    assert!(docs.contains("matching section(s)"), "{docs}");
    let tagged = s.page("/search?q=careful&tag=security", &cookie);
    assert!(tagged.contains("Hostile note"), "{tagged}");
    let untagged = s.page("/search?q=careful&tag=nothing", &cookie);
    assert!(!untagged.contains("Hostile note"), "{untagged}");
    // The fragment the script fetches while typing is the results alone.
    let fragment = s.page("/search?q=postgres&fragment=1", &cookie);
    assert!(
        !fragment.contains("<html") && fragment.contains("<mark>"),
        "{fragment}"
    );
}

#[test]
fn bad_parameters_are_a_400_naming_the_field() {
    let (db, _) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    for (path, field) in [
        ("/search?q=x&page=0", "page"),
        ("/search?q=x&page=abc", "page"),
        ("/search?q=x&page=99999", "page"),
        ("/search?q=x&mode=everything", "mode"),
        ("/docs?page=-1", "page"),
        ("/section/zzzz?depth=7", "depth"),
        ("/collections?where=%7Bnot-json", "where"),
    ] {
        let r = s.get(path, Some(&cookie));
        assert_eq!(r.status(), 400, "{path}");
        let body = r.text().unwrap();
        assert!(body.contains(&format!("{field}:")), "{path}: {body}");
    }
    let r = s.get("/section/nosuchsection00000000000000", Some(&cookie));
    assert!(r.status() == 400 || r.status() == 404, "{}", r.status());
    let r = s.get("/doc/no/such/doc", Some(&cookie));
    assert_eq!(r.status(), 404, "{}", r.text().unwrap());
}

#[test]
fn a_post_from_a_foreign_origin_is_refused() {
    let (db, _) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let post = |origin: Option<&str>| {
        let mut req = http()
            .post(format!("{}/status/check", s.base))
            .header("Cookie", &cookie);
        if let Some(o) = origin {
            req = req.header("Origin", o);
        }
        req.send().unwrap()
    };
    assert_eq!(post(Some("http://evil.example")).status(), 403);
    assert_eq!(
        post(Some(&format!("http://127.0.0.1:{}", s.port + 1))).status(),
        403
    );
    assert_eq!(
        post(None).status(),
        403,
        "a POST without Origin is refused too"
    );
    assert!(
        !s.page("/status", &cookie).contains("check-result"),
        "nothing ran"
    );
    let ok = post(Some(&s.base));
    assert_eq!(ok.status(), 303);
    let status = s.page("/status", &cookie);
    assert!(
        status.contains("id=\"check-result\"") && status.contains(": ok"),
        "{status}"
    );
    // Without a session, even from the page's origin: the sign-in page.
    let anon = http()
        .post(format!("{}/status/check", s.base))
        .header("Origin", &s.base)
        .send()
        .unwrap();
    assert_eq!(anon.status(), 401);
}

/// Chromium and Playwright for Python, when both are here: the command to run the script.
fn browser() -> Result<(String, String), String> {
    let chromium = std::env::var("KBDB_CHROMIUM")
        .ok()
        .or_else(|| {
            [
                "/usr/bin/chromium",
                "/usr/bin/chromium-browser",
                "/usr/bin/google-chrome",
            ]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .map(|p| p.to_string())
        })
        .ok_or("no Chromium (apt-get install chromium, or set KBDB_CHROMIUM)")?;
    let python = std::env::var("KBDB_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = std::process::Command::new(&python)
        .args(["-c", "import playwright.sync_api"])
        .output()
        .map_err(|e| format!("no {python}: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "Playwright for Python is not installed (pip install playwright==1.63.0): {}",
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    Ok((python, chromium))
}

#[test]
fn the_page_works_in_a_real_browser() {
    let (python, chromium) = match browser() {
        Ok(b) => b,
        Err(why) => {
            if std::env::var("KBDB_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
                panic!("KBDB_REQUIRE_BROWSER=1 but {why}");
            }
            eprintln!("SKIPPED the_page_works_in_a_real_browser: {why}");
            return;
        }
    };
    let (db, ids) = sample();
    let s = Served::start(&db);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/web/browser.py");
    let shots = std::env::var("KBDB_WEB_SCREENSHOTS").unwrap_or_default();
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--chromium", &chromium, "--link", &s.sign_in])
        .args(["--hostile", ids["hostile"].as_str().unwrap()])
        .args(["--screenshots", &shots])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "browser.py failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("ok: the browser flow passed"),
        "{stdout}\n{stderr}"
    );
}

/// DNS rebinding: a page of another name that resolves to this server gets nothing, signed in
/// or not; the loopback names this server listens on are served.
#[test]
fn a_request_for_a_host_that_is_not_served_here_is_refused() {
    let (db, _) = sample();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let port = s.base.rsplit(':').next().unwrap().to_string();
    for (host, want) in [
        (format!("evil.example:{port}"), 403),
        ("evil.example".to_string(), 403),
        (format!("localhost:{port}"), 200),
        (format!("127.0.0.1:{port}"), 200),
    ] {
        let r = http()
            .get(format!("{}/docs", s.base))
            .header("Host", &host)
            .header("Cookie", &cookie)
            .send()
            .unwrap();
        assert_eq!(r.status(), want, "Host {host}");
        if want == 403 {
            assert!(!r.text().unwrap().contains("Postgres"), "Host {host}");
        }
    }
}

/// The docids of a `/docs` page, in the order shown.
fn listed_docids(page: &str) -> Vec<String> {
    page.split("<td class=\"kbid\">")
        .skip(1)
        .map(|s| s.split("</td>").next().unwrap().to_string())
        .collect()
}

/// `kbdb docs` newest first, ties by docid: what the pages of `/docs` must show, in order.
fn docs_newest_first(db: &TestDb) -> Vec<String> {
    let all = db.json(&["docs"]);
    let mut all: Vec<(String, String)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["updated_at"].as_str().unwrap().to_string(),
                d["docid"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    all.into_iter().map(|(_, d)| d).collect()
}

/// Every page of `/docs`, concatenated; checks the pager links on the way.
fn docs_pages(s: &Served, cookie: &str) -> Vec<String> {
    let mut out = Vec::new();
    for page in 1.. {
        let body = s.page(&format!("/docs?page={page}"), cookie);
        let listed = listed_docids(&body);
        assert!(listed.len() <= 100, "page {page}");
        assert_eq!(body.contains("rel=\"prev\""), page > 1, "page {page}");
        out.extend(listed);
        if !body.contains("rel=\"next\"") {
            return out;
        }
    }
    unreachable!()
}

#[test]
fn the_documents_view_pages_newest_first_after_edits_and_deletes() {
    let db = TestDb::new();
    let lines: String = (0..230)
        .map(|i| {
            format!(
                "{}\n",
                serde_json::json!({"content": format!("Fact number {i} of the pile."),
                    "docid": format!("pile/{i:03}")})
            )
        })
        .collect();
    db.cmd()
        .args(["learn", "--jsonl"])
        .write_stdin(lines)
        .assert()
        .success();
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let first = docs_pages(&s, &cookie);
    assert_eq!(first.len(), 230);
    assert_eq!(first, docs_newest_first(&db));
    assert!(s.page("/docs", &cookie).contains("230 document(s)"));
    // An edit (through the daemon the page reads from) brings a document to the front.
    std::thread::sleep(Duration::from_millis(5));
    db.learn(&["A later fact for the pile.", "--docid", "pile/117"]);
    let after_edit = docs_pages(&s, &cookie);
    assert_eq!(after_edit[0], "pile/117");
    assert_eq!(after_edit, docs_newest_first(&db));
    // A delete takes one out; the page boundaries move by one.
    db.json(&["doc", "delete", "pile/042"]);
    let after_delete = docs_pages(&s, &cookie);
    assert_eq!(after_delete.len(), 229);
    assert!(!after_delete.contains(&"pile/042".to_string()));
    assert_eq!(after_delete, docs_newest_first(&db));
    let page3 = s.page("/docs?page=3", &cookie);
    assert_eq!(listed_docids(&page3), after_delete[200..].to_vec());
    assert!(s.page("/docs", &cookie).contains("229 document(s)"));
    // Past the end: an empty table, a link back, none forward.
    let past = s.page("/docs?page=9", &cookie);
    assert!(listed_docids(&past).is_empty() && !past.contains("rel=\"next\""));
}

const COLLECTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/collection");

/// The row of `docid` in the validation view (None: not listed).
fn validation_row(page: &str, docid: &str) -> Option<String> {
    let link = format!("href=\"/doc/{docid}\"");
    page.split("<tr>")
        .find(|row| row.contains(&link))
        .map(str::to_string)
}

/// The "N invalid" count of the validation view.
fn invalid_count(page: &str) -> u64 {
    let end = page.find(" invalid</strong>").expect("the counts");
    let start = page[..end].rfind("<strong>").unwrap() + "<strong>".len();
    page[start..end].parse().unwrap()
}

#[test]
fn the_validation_view_shows_the_writes_that_fix_or_break_a_document() {
    let db = TestDb::new();
    for docid in [
        "epics/auth",
        "epics/billing",
        "stories/login",
        "stories/logout",
        "stories/signup",
        "people/dana",
    ] {
        let file = format!("{COLLECTION}/{docid}.md");
        db.json(&["learn", "--file", &file, "--docid", docid, "--split"]);
    }
    db.json(&["models", "load", &format!("{COLLECTION}/models.toml")]);
    let s = Served::start(&db);
    let cookie = s.sign_in();
    let page = s.page("/validation", &cookie);
    let invalid = invalid_count(&page);
    let login = validation_row(&page, "stories/login");
    assert!(
        login.as_ref().is_none_or(|r| !r.contains("one of")),
        "{page}"
    );
    let missing = "item stories/invoices does not exist";
    assert!(
        validation_row(&page, "epics/billing").is_some_and(|r| r.contains(missing)),
        "{page}"
    );
    // An edit that breaks a document shows on the next visit, and the one that fixes it too.
    db.json(&[
        "doc",
        "update",
        "stories/login",
        "--meta",
        r#"{"status": "bogus"}"#,
    ]);
    let page = s.page("/validation", &cookie);
    assert_eq!(invalid_count(&page), invalid + 1, "{page}");
    assert!(
        validation_row(&page, "stories/login")
            .is_some_and(|r| r.contains("meta.status") || r.contains("one of")),
        "{page}"
    );
    db.json(&[
        "doc",
        "update",
        "stories/login",
        "--meta",
        r#"{"status": "ready"}"#,
    ]);
    let page = s.page("/validation", &cookie);
    assert_eq!(invalid_count(&page), invalid, "{page}");
    // The item an epic names is created: the epic's error goes, though the epic did not change;
    // it comes back when the item is deleted.
    db.json(&[
        "learn",
        "--docid",
        "stories/invoices",
        "--split",
        "+++\nstatus = \"ready\"\n+++\n# Invoices\n\n## Acceptance Criteria\n\n- sent\n",
    ]);
    let page = s.page("/validation", &cookie);
    assert!(!page.contains(missing), "{page}");
    assert_eq!(invalid_count(&page), invalid - 1, "{page}");
    db.json(&["doc", "delete", "stories/invoices"]);
    let page = s.page("/validation", &cookie);
    assert!(page.contains(missing), "{page}");
    assert_eq!(invalid_count(&page), invalid, "{page}");
}
