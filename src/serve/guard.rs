//! What every request passes before the MCP handler: the Origin check (403), the bearer token
//! (401), and the session limit (503). The token's grant goes on with the request
//! (`mcp::Access`), where the handler refuses writes to a read-only token.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode, header};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::tokens::TokenStore;
use crate::mcp::Access;
use crate::web::origins::Origins;

pub(super) struct Guard {
    pub(super) tokens: Arc<TokenStore>,
    pub(super) origins: Origins,
    pub(super) sessions: Arc<LocalSessionManager>,
    pub(super) max_sessions: usize,
}

/// The server's own origins (loopback names for a loopback or unspecified address, else the
/// address itself), then `extra` (`serve.allowed_origins`).
pub(super) fn allowed_origins(scheme: &str, addr: &SocketAddr, extra: &[String]) -> Vec<String> {
    let port = addr.port();
    let mut out = Vec::new();
    if addr.ip().is_loopback() || addr.ip().is_unspecified() {
        for host in ["127.0.0.1", "localhost", "[::1]"] {
            out.push(format!("{scheme}://{host}:{port}"));
        }
    }
    if !addr.ip().is_loopback() && !addr.ip().is_unspecified() {
        out.push(format!("{scheme}://{addr}"));
    }
    out.extend(extra.iter().cloned());
    out
}

/// The `Host` values accepted: the loopback names, the listen address, then `extra`
/// (`serve.allowed_hosts`; `"*"` there accepts any, which rmcp takes as an empty list).
pub(super) fn allowed_hosts(addr: &SocketAddr, extra: &[String]) -> Vec<String> {
    if extra.iter().any(|h| h == "*") {
        return Vec::new();
    }
    let mut out: Vec<String> = ["localhost", "127.0.0.1", "::1"]
        .into_iter()
        .map(String::from)
        .collect();
    if !addr.ip().is_unspecified() {
        out.push(addr.ip().to_string());
    }
    out.extend(extra.iter().cloned());
    out
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"error": {"code": status.as_u16(), "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn unauthorized(message: &str, invalid: bool) -> Response {
    let mut r = refuse(StatusCode::UNAUTHORIZED, message);
    let challenge = if invalid {
        r#"Bearer realm="kbdb", error="invalid_token""#
    } else {
        r#"Bearer realm="kbdb""#
    };
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    r
}

/// The bearer token of a request: Some(Ok) when well formed, Some(Err) when the header is
/// there but not a bearer token, None when absent.
fn bearer(request: &Request) -> Option<Result<&str, ()>> {
    let value = request.headers().get(header::AUTHORIZATION)?;
    let Ok(text) = value.to_str() else {
        return Some(Err(()));
    };
    let Some((scheme, token)) = text.trim().split_once(' ') else {
        return Some(Err(()));
    };
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Some(Err(()));
    }
    Some(Ok(token.trim()))
}

pub(super) async fn check(
    State(guard): State<Arc<Guard>>,
    mut request: Request<Body>,
    next: Next,
) -> Response {
    // A page of another site must not reach the server through the browser (DNS rebinding,
    // cross-site requests): its Origin is refused before anything else.
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| guard.origins.allows(o));
        if !allowed {
            tracing::warn!(origin = ?origin, "refused a request from a foreign Origin");
            return refuse(
                StatusCode::FORBIDDEN,
                "Forbidden: this Origin is not allowed (serve.allowed_origins in worker.toml)",
            );
        }
    }
    let grant = match bearer(&request) {
        None => {
            return unauthorized("Unauthorized: send Authorization: Bearer TOKEN", false);
        }
        Some(Err(())) => {
            return unauthorized(
                "Unauthorized: the Authorization header must be \"Bearer TOKEN\"",
                true,
            );
        }
        Some(Ok(token)) => match guard.tokens.verify(token) {
            Ok(Some(grant)) => grant,
            Ok(None) => {
                return unauthorized("Unauthorized: unknown or revoked token", true);
            }
            Err(e) => {
                tracing::error!("cannot read the tokens: {e}");
                return refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the server cannot read its tokens; see its log",
                );
            }
        },
    };
    // A new session (a POST without a session id) only while there is room for one.
    if request.method() == Method::POST
        && !request.headers().contains_key("mcp-session-id")
        && guard.sessions.sessions.read().await.len() >= guard.max_sessions
    {
        let mut r = refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "the server has {} open sessions, its limit (serve.max_sessions); retry later",
                guard.max_sessions
            ),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return r;
    }
    request.extensions_mut().insert(Access {
        token_name: grant.name,
        read_only: grant.read_only,
    });
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    // rmcp answers a DELETE (the session is closed by then) with 202; clients expect 200 or
    // 204 for a completed termination (the Python SDK logs a warning on any other).
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_match_by_scheme_host_and_port() {
        let addr: SocketAddr = "127.0.0.1:7411".parse().unwrap();
        let o = Origins::parse(&allowed_origins(
            "http",
            &addr,
            &["https://app.example.com".into()],
        ));
        assert!(o.allows("http://127.0.0.1:7411"));
        assert!(o.allows("http://LOCALHOST:7411/"));
        assert!(o.allows("http://[::1]:7411"));
        assert!(o.allows("https://app.example.com:443"));
        for bad in [
            "http://127.0.0.1:7412",
            "https://127.0.0.1:7411",
            "http://evil.example",
            "null",
            "http://localhost:7411.evil.example",
            "",
        ] {
            assert!(!o.allows(bad), "{bad}");
        }
    }

    #[test]
    fn a_star_accepts_any_host() {
        let addr: SocketAddr = "0.0.0.0:7411".parse().unwrap();
        assert!(allowed_hosts(&addr, &["*".into()]).is_empty());
        let hosts = allowed_hosts(&addr, &["kb.example.com".into()]);
        assert!(hosts.contains(&"kb.example.com".to_string()));
        assert!(!hosts.contains(&"0.0.0.0".to_string()));
    }
}
