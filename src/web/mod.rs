//! The web page of `kbdb serve` (docs/web.md): server-rendered HTML for people — search, read a
//! section with its references and neighbourhood, browse documents, collections, validation
//! and status. Every datum comes from the daemon's operations (the MCP tools' own calls);
//! this module only signs people in, calls, and renders.
//!
//! - `session`: the one-time sign-in link and the session cookie.
//! - `render`: untrusted markdown → sanitised HTML, code highlighting, snippets.
//! - `pages`: the views.
//! - `assets`: the stylesheet and script, embedded in the binary.
//! - `origins`: the origins a form post may come from (shared with the MCP endpoint's guard).

mod assets;
pub(crate) mod origins;
mod pages;
pub mod render;
pub mod session;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderValue, Method, StatusCode, header};
use serde_json::Value;

use crate::daemon::pool::ClientPool;
use crate::error::{KbError, Result};

/// The Content-Security-Policy of every answer: no inline script or style, nothing from
/// elsewhere, images only from the page or `data:` URLs, no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// What the page needs from the server that mounts it.
pub struct WebOptions {
    /// The daemon connections of the server, shared with its MCP sessions.
    pub pool: Arc<ClientPool>,
    /// Served over TLS: the cookie is `Secure`.
    pub secure: bool,
    /// The port, which names the cookie (cookies are shared by every port of a host).
    pub port: u16,
    /// Origins a POST may come from (the server's own and `serve.allowed_origins`).
    pub origins: Vec<String>,
    /// `Host` values accepted (empty: any).
    pub hosts: Vec<String>,
}

pub struct WebState {
    pool: Arc<ClientPool>,
    pub sessions: session::Sessions,
    cookie: String,
    secure: bool,
    origins: origins::Origins,
    hosts: Vec<String>,
    /// The last `check` run from the status page: when, and its result.
    check: Mutex<Option<(String, Value)>>,
}

impl WebState {
    /// Call a daemon operation from async code.
    async fn call(&self, method: &'static str, params: Value) -> Result<Value> {
        let pool = self.pool.clone();
        tokio::task::spawn_blocking(move || pool.call(method, params))
            .await
            .map_err(|e| KbError::Daemon(format!("the call {method} did not finish: {e}")))?
    }
}

/// The page's routes, and its state (for the sign-in link).
pub fn router(options: WebOptions) -> Result<(Router, Arc<WebState>)> {
    let state = Arc::new(WebState {
        pool: options.pool,
        sessions: session::Sessions::new()?,
        cookie: format!("kbdb_session_{}", options.port),
        secure: options.secure,
        origins: origins::Origins::parse(&options.origins),
        hosts: options.hosts,
        check: Mutex::new(None),
    });
    // Load the document index and validate every document now rather than at the first visit
    // of `/docs` or `/validation` (about 1 s at 300k sections; docs/web.md). Best effort: a
    // failure here is met again, and reported, by the visit.
    let pool = state.pool.clone();
    let _ = std::thread::Builder::new()
        .name("kbdb-web-warm".into())
        .spawn(move || {
            let _ = pool.call("documents_page", serde_json::json!({"limit": 1}));
            let _ = pool.call("validation_report", serde_json::json!({"limit": 0}));
        });
    let router = Router::new()
        .route("/", get(pages::home))
        .route("/search", get(pages::search))
        .route("/section/{kbid}", get(pages::section))
        .route("/raw/{kbid}", get(pages::raw))
        .route("/doc/{*docid}", get(pages::document))
        .route("/docs", get(pages::docs))
        .route("/tags", get(pages::tags))
        .route("/collections", get(pages::collections))
        .route("/validation", get(pages::validation))
        .route("/status", get(pages::status))
        .route("/status/check", post(pages::run_check))
        .route("/signout", post(pages::sign_out))
        .route("/assets/{name}", get(assets::asset))
        .route("/favicon.ico", get(assets::favicon))
        .layer(axum::middleware::from_fn_with_state(state.clone(), protect))
        .with_state(state.clone());
    Ok((router, state))
}

fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with a form
    // POST, which the Origin check must refuse; links to other sites still carry no referrer.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

/// The query parameter `name` of a raw query string, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (form_decode(k) == name).then(|| form_decode(v))
    })
}

/// A form-encoded query component: `+` is a space, then the project's one `%XX` decoder
/// (a `%` without two hex digits stays literal).
pub(crate) fn form_decode(s: &str) -> String {
    crate::text::markers::percent_decode(&s.replace('+', " "))
}

/// Every request: the Host check, the sign-in link, the session (no session: the sign-in
/// page, with no knowledge), the Origin check of POSTs, and the security headers.
async fn protect(State(state): State<Arc<WebState>>, request: Request, next: Next) -> Response {
    security_headers(guarded(state, request, next).await)
}

async fn guarded(state: Arc<WebState>, request: Request, next: Next) -> Response {
    if !state.hosts.is_empty() {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = match host.rsplit_once(':') {
            Some((n, p)) if p.chars().all(|c| c.is_ascii_digit()) => n,
            _ => host,
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        // As `/mcp` accepts them (rmcp): a listed name, or a listed `host:port`.
        let listed = |h: &String| h.eq_ignore_ascii_case(name) || h.eq_ignore_ascii_case(host);
        if !state.hosts.iter().any(listed) {
            return pages::error_page(StatusCode::FORBIDDEN, "this Host is not served here");
        }
    }
    let path = request.uri().path().to_string();
    if path.starts_with("/assets/") || path == "/favicon.ico" {
        return next.run(request).await;
    }
    if request.method() == Method::POST {
        let origin = request
            .headers()
            .get(header::ORIGIN)
            .and_then(|o| o.to_str().ok());
        match origin {
            Some(o) if state.origins.allows(o) => {}
            _ => {
                return pages::error_page(
                    StatusCode::FORBIDDEN,
                    "refused: a change must come from this page (its Origin header is missing or foreign)",
                );
            }
        }
    }
    if path == "/"
        && request.method() == Method::GET
        && let Some(secret) = query_param(request.uri().query(), "token")
    {
        return sign_in(&state, &secret);
    }
    let session = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .find_map(|h| session::cookie(h, &state.cookie).map(str::to_string));
    match session {
        Some(id) if state.sessions.valid(&id) => {
            let mut request = request;
            request.extensions_mut().insert(SessionId(id));
            next.run(request).await
        }
        _ => pages::sign_in_page(StatusCode::UNAUTHORIZED, None),
    }
}

/// The session of a request (set by `protect`).
#[derive(Clone)]
pub(crate) struct SessionId(pub String);

fn sign_in(state: &WebState, secret: &str) -> Response {
    match state.sessions.sign_in(secret) {
        Ok(session::SignIn::Ok { session, .. }) => {
            tracing::info!("web: a browser signed in with the sign-in link");
            eprintln!(
                "kbdb serve: the sign-in link was used; the next one is /?token={}",
                state.sessions.sign_in_secret()
            );
            let cookie = format!(
                "{}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
                state.cookie,
                session::SESSION_IDLE.as_secs(),
                if state.secure { "; Secure" } else { "" }
            );
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::SEE_OTHER;
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Ok(session::SignIn::Refused) => pages::sign_in_page(
            StatusCode::UNAUTHORIZED,
            Some(
                "This sign-in link is not valid (each link works once). Use the link kbdb serve printed last.",
            ),
        ),
        Err(e) => pages::error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

pub(crate) fn clear_cookie(state: &WebState) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        state.cookie
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

impl IntoResponse for pages::Html {
    fn into_response(self) -> Response {
        let mut r = (self.0, self.1).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        let q = Some("q=deploy+day&tag=a%2Fb&bad=%zz&page=2");
        assert_eq!(query_param(q, "q").as_deref(), Some("deploy day"));
        assert_eq!(query_param(q, "tag").as_deref(), Some("a/b"));
        assert_eq!(query_param(q, "bad").as_deref(), Some("%zz"));
        assert_eq!(query_param(q, "none"), None);
        assert_eq!(form_decode("%"), "%");
        assert_eq!(form_decode("a%4"), "a%4");
        assert_eq!(form_decode("%e2%82%ac"), "€");
        assert_eq!(form_decode("c%2B%2B+book"), "c++ book");
    }
}
