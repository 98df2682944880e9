//! The `api` embedding provider: an OpenAI-compatible `POST {api_url}/embeddings` endpoint
//! (OpenAI, Azure-style gateways, Ollama, llama.cpp server, vLLM, text-embeddings-inference…).
//!
//! Request: `{"model": <embedding.model>, "input": [texts…]}` with `Authorization: Bearer KEY`
//! when the variable named by `embedding.api_key_env` holds a key. Answer:
//! `{"data": [{"embedding": [numbers…], "index": n}, …]}`; `index` is optional and, when
//! present, orders the vectors. Every vector is checked against `embedding.dimensions` and
//! L2-normalised, so cosine similarity is a dot product.
//!
//! Transient failures (HTTP 429, any 5xx, connection failures, timeouts) are retried up to
//! `embedding.api_max_retries` times with exponential backoff; other answers fail at once.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::blocking::Client;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde::Deserialize;

use crate::config::EmbeddingConfig;
use crate::embedding::{EmbedError, EmbeddingProvider, l2_normalize};

/// First pause before a retry; it doubles with every further retry.
const INITIAL_BACKOFF: Duration = Duration::from_millis(200);
/// Longest pause computed by the exponential backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Longest pause granted to a server's `Retry-After` header.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// How much of an error answer's body is quoted in the error message.
const BODY_EXCERPT_CHARS: usize = 300;

/// Embeddings from an OpenAI-compatible HTTP endpoint.
///
/// # Threads and async runtimes
///
/// The HTTP calls use `reqwest::blocking`, which panics when its client is created, used or
/// dropped-with-a-runtime inside a tokio runtime context. This type is safe anyway:
///
/// * [`new`](Self::new) / [`with_key`](Self::with_key) never touch reqwest's client; it is built
///   lazily on the first [`embed`](EmbeddingProvider::embed) call.
/// * `embed` called from a thread that is inside a tokio runtime context (an async task,
///   `block_on`, `spawn_blocking`) runs the HTTP work on a short-lived helper thread outside
///   that context and waits for it, so it still does not panic — but it *blocks the calling
///   thread* for the whole request (up to `api_timeout_secs` × attempts plus backoff). Async
///   callers should therefore call it through `tokio::task::spawn_blocking` or from a plain
///   worker thread, which is the intended use.
pub struct ApiProvider {
    /// `{api_url}/embeddings`.
    endpoint: reqwest::Url,
    /// The endpoint as shown in messages (credentials in the URL are removed).
    shown_endpoint: String,
    /// `Bearer KEY`, marked sensitive; `None` sends no `Authorization` header.
    auth: Option<HeaderValue>,
    key_env: String,
    model: String,
    dimensions: usize,
    batch_size: usize,
    timeout_secs: u64,
    max_retries: u32,
    initial_backoff: Duration,
    /// Loopback endpoints never go through an HTTP proxy from the environment.
    bypass_proxy: bool,
    client: OnceLock<Client>,
}

impl fmt::Debug for ApiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiProvider")
            .field("endpoint", &self.shown_endpoint)
            .field(
                "key",
                &if self.auth.is_some() {
                    "<set>"
                } else {
                    "<none>"
                },
            )
            .field("key_env", &self.key_env)
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("batch_size", &self.batch_size)
            .field("timeout_secs", &self.timeout_secs)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

impl ApiProvider {
    /// A provider for `cfg`, with the API key read from the environment variable named by
    /// `embedding.api_key_env`. An unset or empty variable means no `Authorization` header
    /// (local endpoints often need none).
    pub fn new(cfg: &EmbeddingConfig) -> Result<Self, EmbedError> {
        let var = cfg.api_key_env.trim();
        let key = if var.is_empty() {
            None
        } else {
            std::env::var_os(var).map(|v| v.to_string_lossy().into_owned())
        };
        Self::with_key(cfg, key)
    }

    /// A provider for `cfg` with an explicit key (`None`: no `Authorization` header). The key is
    /// not read from the environment; `cfg.api_key_env` is only named in error messages.
    pub fn with_key(cfg: &EmbeddingConfig, key: Option<String>) -> Result<Self, EmbedError> {
        let base = cfg.api_url.trim().trim_end_matches('/');
        if base.is_empty() {
            return Err(EmbedError::Unavailable(
                "embedding.api_url is empty; set it to the base URL of an OpenAI-compatible \
                 endpoint (e.g. https://api.openai.com/v1; requests go to {api_url}/embeddings)"
                    .into(),
            ));
        }
        let endpoint = reqwest::Url::parse(&format!("{base}/embeddings")).map_err(|e| {
            EmbedError::Unavailable(format!(
                "embedding.api_url {base:?} is not a valid URL ({e}); expected something like \
                 https://api.openai.com/v1"
            ))
        })?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(EmbedError::Unavailable(format!(
                "embedding.api_url {base:?} must start with http:// or https://"
            )));
        }
        if cfg.model.trim().is_empty() {
            return Err(EmbedError::Unavailable(
                "embedding.model is empty; set it to the model name the API expects".into(),
            ));
        }
        if cfg.dimensions == 0 {
            return Err(EmbedError::Unavailable(
                "embedding.dimensions is 0; set it to the vector length of the model".into(),
            ));
        }
        let key_env = cfg.api_key_env.trim().to_string();
        let auth = match key.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    EmbedError::Unavailable(format!(
                        "the API key in ${key_env} contains characters that cannot be sent in \
                         an HTTP header"
                    ))
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let bypass_proxy = endpoint.host_str().is_some_and(|host| {
            host.eq_ignore_ascii_case("localhost")
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        let mut shown = endpoint.clone();
        let _ = shown.set_password(None);
        let _ = shown.set_username("");
        Ok(ApiProvider {
            shown_endpoint: shown.to_string(),
            endpoint,
            auth,
            key_env,
            model: cfg.model.clone(),
            dimensions: cfg.dimensions,
            batch_size: cfg.batch_size.max(1),
            timeout_secs: cfg.api_timeout_secs,
            max_retries: cfg.api_max_retries,
            initial_backoff: INITIAL_BACKOFF,
            bypass_proxy,
            client: OnceLock::new(),
        })
    }

    /// Replace the first retry pause (200 ms by default; it doubles per retry, capped at 5 s).
    /// Meant for tests, which want retries to be quick.
    pub fn with_backoff(mut self, initial: Duration) -> Self {
        self.initial_backoff = initial;
        self
    }

    /// The request timeout (`None` when `api_timeout_secs` is 0, meaning no limit).
    fn timeout(&self) -> Option<Duration> {
        (self.timeout_secs > 0).then(|| Duration::from_secs(self.timeout_secs))
    }

    /// The HTTP client, built on first use. Must be called outside any tokio runtime context.
    fn client(&self) -> Result<&Client, EmbedError> {
        if let Some(client) = self.client.get() {
            return Ok(client);
        }
        let mut builder = Client::builder()
            .user_agent(concat!("kbdb/", env!("CARGO_PKG_VERSION")))
            // `None` disables reqwest's default 30 s limit too.
            .timeout(self.timeout());
        if let Some(t) = self.timeout() {
            builder = builder.connect_timeout(t);
        }
        if self.bypass_proxy {
            builder = builder.no_proxy();
        }
        let client = builder.build().map_err(|e| {
            EmbedError::Unavailable(format!("cannot set up the HTTP client: {}", chain(&e)))
        })?;
        // Two threads racing here both build a client; one of them is dropped, which is fine.
        Ok(self.client.get_or_init(|| client))
    }

    /// `embed` without the runtime-context guard.
    fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let client = self.client()?;
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch_size) {
            out.extend(self.embed_batch(client, chunk)?);
        }
        Ok(out)
    }

    /// One batch, with retries.
    fn embed_batch(&self, client: &Client, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::to_vec(&serde_json::json!({ "model": self.model, "input": texts }))
            .map_err(|e| EmbedError::Failed(format!("cannot encode the request: {e}")))?;
        let attempts = self.max_retries.saturating_add(1);
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.attempt(client, &body, texts.len()) {
                Ok(vectors) => return Ok(vectors),
                Err(Attempt::Fatal(message)) => return Err(EmbedError::Failed(message)),
                Err(Attempt::Transient {
                    message,
                    retry_after,
                }) => {
                    if attempt >= attempts {
                        return Err(EmbedError::Failed(format!(
                            "{message} (gave up after {attempt} attempt{}; \
                             embedding.api_max_retries is {})",
                            plural(attempt as usize),
                            self.max_retries
                        )));
                    }
                    let delay = retry_delay(self.initial_backoff, attempt - 1, retry_after);
                    tracing::warn!(
                        attempt,
                        of = attempts,
                        delay_ms = delay.as_millis() as u64,
                        "embedding request failed, retrying: {message}"
                    );
                    std::thread::sleep(delay);
                }
            }
        }
    }

    /// One HTTP request and the checks on its answer.
    fn attempt(
        &self,
        client: &Client,
        body: &[u8],
        expected: usize,
    ) -> Result<Vec<Vec<f32>>, Attempt> {
        let mut request = client
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body.to_vec());
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request.send().map_err(|e| self.transport_error(e))?;
        let status = response.status();
        let retry_after = parse_retry_after(response.headers());
        let bytes = response.bytes().map_err(|e| self.transport_error(e))?;

        if status.is_success() {
            return parse_answer(&bytes, expected, self.dimensions).map_err(Attempt::Fatal);
        }
        let excerpt = excerpt(&bytes);
        let what = format!(
            "the embedding API at {} answered HTTP {}{}",
            self.shown_endpoint,
            status_text(status),
            if excerpt.is_empty() {
                String::new()
            } else {
                format!(": {excerpt}")
            }
        );
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(Attempt::Transient {
                message: what,
                retry_after,
            });
        }
        let hint = match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                if self.key_env.is_empty() {
                    " — the endpoint wants an API key; set embedding.api_key_env to the name of \
                     the environment variable holding it"
                        .to_string()
                } else if self.auth.is_none() {
                    format!(
                        " — the endpoint wants an API key, but ${} (embedding.api_key_env) is \
                         not set",
                        self.key_env
                    )
                } else {
                    format!(
                        " — check the API key in ${} (embedding.api_key_env)",
                        self.key_env
                    )
                }
            }
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
                " — check embedding.api_url (requests go to {api_url}/embeddings)".to_string()
            }
            _ => String::new(),
        };
        Err(Attempt::Fatal(format!("{what}{hint}")))
    }

    /// Classify a reqwest error: timeouts and network failures are transient.
    fn transport_error(&self, e: reqwest::Error) -> Attempt {
        let e = e.without_url();
        if e.is_timeout() {
            Attempt::Transient {
                message: format!(
                    "the embedding API at {} did not answer within {} s — timeout set by \
                     embedding.api_timeout_secs",
                    self.shown_endpoint, self.timeout_secs
                ),
                retry_after: None,
            }
        } else if e.is_connect() {
            Attempt::Transient {
                message: format!(
                    "cannot connect to the embedding API at {}: {}",
                    self.shown_endpoint,
                    chain(&e)
                ),
                retry_after: None,
            }
        } else if e.is_builder() {
            Attempt::Fatal(format!(
                "cannot build the request to {}: {}",
                self.shown_endpoint,
                chain(&e)
            ))
        } else {
            // Connection reset, closed before the answer, truncated body…
            Attempt::Transient {
                message: format!(
                    "the connection to the embedding API at {} failed: {}",
                    self.shown_endpoint,
                    chain(&e)
                ),
                retry_after: None,
            }
        }
    }
}

impl EmbeddingProvider for ApiProvider {
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return self.embed_blocking(texts);
        }
        // Inside a tokio runtime context reqwest::blocking would panic: do the work on a helper
        // thread that has no runtime context (see the type's documentation).
        std::thread::scope(|scope| {
            match std::thread::Builder::new()
                .name("kbdb-embed-api".into())
                .spawn_scoped(scope, || self.embed_blocking(texts))
            {
                Ok(handle) => handle.join().unwrap_or_else(|_| {
                    Err(EmbedError::Failed(
                        "the embedding request thread panicked".into(),
                    ))
                }),
                Err(e) => Err(EmbedError::Failed(format!(
                    "cannot start a thread for the embedding request: {e}"
                ))),
            }
        })
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// One request for one short text, without retries: a provider that is down is known in
    /// one connection attempt (or one `api_timeout_secs`).
    fn probe(&self) -> Result<(), EmbedError> {
        let once = || -> Result<(), EmbedError> {
            let client = self.client()?;
            let body =
                serde_json::to_vec(&serde_json::json!({ "model": self.model, "input": ["kbdb"] }))
                    .map_err(|e| EmbedError::Failed(format!("cannot encode the request: {e}")))?;
            match self.attempt(client, &body, 1) {
                Ok(_) => Ok(()),
                Err(Attempt::Fatal(message)) | Err(Attempt::Transient { message, .. }) => {
                    Err(EmbedError::Failed(message))
                }
            }
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return once();
        }
        // As in `embed`: no blocking HTTP inside a runtime context.
        std::thread::scope(|scope| {
            scope.spawn(once).join().unwrap_or_else(|_| {
                Err(EmbedError::Failed(
                    "the embedding probe thread panicked".into(),
                ))
            })
        })
    }

    fn model_name(&self) -> &str {
        &self.model
    }

    fn max_batch(&self) -> usize {
        self.batch_size
    }
}

/// Outcome of one failed attempt.
enum Attempt {
    /// Worth retrying; `retry_after` is the server's `Retry-After`, when given.
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Retrying would not help.
    Fatal(String),
}

#[derive(Deserialize)]
struct EmbeddingAnswer {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f32>,
    #[serde(default)]
    index: Option<usize>,
}

/// Parse and check a successful answer: `expected` vectors of `dimensions` finite values,
/// ordered by `index` when the items carry one, L2-normalised.
fn parse_answer(bytes: &[u8], expected: usize, dimensions: usize) -> Result<Vec<Vec<f32>>, String> {
    let answer: EmbeddingAnswer = serde_json::from_slice(bytes).map_err(|e| {
        let excerpt = excerpt(bytes);
        format!(
            "the embedding API returned an answer that is not the expected \
             {{\"data\": [{{\"embedding\": [...]}}]}} JSON ({e}){}",
            if excerpt.is_empty() {
                " — the body is empty".to_string()
            } else {
                format!("; it begins: {excerpt}")
            }
        )
    })?;
    let items = answer.data;
    if items.len() != expected {
        return Err(format!(
            "the embedding API returned {} vector{} for {expected} text{}",
            items.len(),
            plural(items.len()),
            plural(expected)
        ));
    }
    let indexed = items.iter().filter(|i| i.index.is_some()).count();
    let mut vectors: Vec<Vec<f32>> = if indexed == 0 {
        items.into_iter().map(|i| i.embedding).collect()
    } else if indexed != expected {
        return Err(
            "the embedding API returned items of which only some carry an `index`".to_string(),
        );
    } else {
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
        for item in items {
            let index = item.index.unwrap_or(usize::MAX);
            let slot = slots.get_mut(index).ok_or_else(|| {
                format!(
                    "the embedding API returned index {index}, out of range for {expected} text{}",
                    plural(expected)
                )
            })?;
            if slot.is_some() {
                return Err(format!(
                    "the embedding API returned index {index} more than once"
                ));
            }
            *slot = Some(item.embedding);
        }
        // Every slot is filled: `expected` distinct in-range indices.
        slots.into_iter().flatten().collect()
    };
    for v in &mut vectors {
        if v.len() != dimensions {
            return Err(format!(
                "the embedding API returned {}-dimensional vectors; embedding.dimensions is \
                 {dimensions}",
                v.len()
            ));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err("the embedding API returned a vector with non-finite values".to_string());
        }
        l2_normalize(v);
    }
    Ok(vectors)
}

/// The pause before retry number `retry` (0-based): the server's `Retry-After` (capped at 30 s)
/// when given, else `initial` doubled per retry, capped at 5 s.
fn retry_delay(initial: Duration, retry: u32, retry_after: Option<Duration>) -> Duration {
    match retry_after {
        Some(d) => d.min(MAX_RETRY_AFTER),
        None => {
            let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
            initial.saturating_mul(factor).min(MAX_BACKOFF.max(initial))
        }
    }
}

/// `Retry-After` in seconds (the HTTP-date form is ignored: the normal backoff applies).
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    value.parse::<u64>().ok().map(Duration::from_secs)
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `503 Service Unavailable`.
fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// The first 300 characters of a body, on one line.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = one_line.chars().take(BODY_EXCERPT_CHARS).collect();
    if one_line.chars().count() > BODY_EXCERPT_CHARS {
        out.push('…');
    }
    out
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// A variable name no environment sets.
    const UNSET_VAR: &str = "KBDB_TEST_API_KEY_NEVER_SET_7f3a";

    /// One scripted answer of the test server.
    enum Reply {
        Respond {
            status: u16,
            headers: Vec<(&'static str, String)>,
            body: String,
        },
        /// Read the request, then never answer (the connection stays open).
        Hang,
    }

    fn ok(body: String) -> Reply {
        Reply::Respond {
            status: 200,
            headers: vec![],
            body,
        }
    }

    fn status(code: u16, body: &str) -> Reply {
        Reply::Respond {
            status: code,
            headers: vec![],
            body: body.to_string(),
        }
    }

    #[derive(Debug, Clone)]
    struct Recorded {
        method: String,
        path: String,
        /// Lower-cased names.
        headers: Vec<(String, String)>,
        body: serde_json::Value,
    }

    impl Recorded {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        }
    }

    struct TestServer {
        base: String,
        requests: Arc<Mutex<Vec<Recorded>>>,
    }

    impl TestServer {
        fn requests(&self) -> Vec<Recorded> {
            self.requests.lock().unwrap().clone()
        }
    }

    /// An HTTP/1.1 server on loopback answering one connection per scripted reply, in order;
    /// after the script it stops listening (further connections are refused).
    fn serve(replies: Vec<Reply>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            let mut hung = Vec::new();
            for reply in replies {
                let Ok((mut stream, _)) = listener.accept() else {
                    return;
                };
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .unwrap();
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                seen.lock().unwrap().push(request);
                match reply {
                    Reply::Respond {
                        status,
                        headers,
                        body,
                    } => {
                        let mut head = format!(
                            "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\n\
                             Content-Length: {}\r\nConnection: close\r\n",
                            body.len()
                        );
                        for (name, value) in headers {
                            head.push_str(&format!("{name}: {value}\r\n"));
                        }
                        head.push_str("\r\n");
                        let _ = stream.write_all(head.as_bytes());
                        let _ = stream.write_all(body.as_bytes());
                        let _ = stream.flush();
                    }
                    Reply::Hang => hung.push(stream),
                }
            }
            drop(listener);
            if !hung.is_empty() {
                std::thread::sleep(Duration::from_secs(20));
            }
        });
        TestServer { base, requests }
    }

    fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = stream.read(&mut chunk).ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut first = lines.next()?.split(' ');
        let method = first.next()?.to_string();
        let path = first.next()?.to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = stream.read(&mut chunk).ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = serde_json::from_slice(&buf[head_end..head_end + length])
            .unwrap_or(serde_json::Value::Null);
        Some(Recorded {
            method,
            path,
            headers,
            body,
        })
    }

    fn config(base: &str) -> EmbeddingConfig {
        EmbeddingConfig {
            api_url: base.to_string(),
            api_key_env: UNSET_VAR.into(),
            model: "test-model".into(),
            dimensions: 3,
            api_timeout_secs: 5,
            api_max_retries: 3,
            batch_size: 64,
            ..EmbeddingConfig::default()
        }
    }

    fn provider(cfg: &EmbeddingConfig, key: Option<&str>) -> ApiProvider {
        ApiProvider::with_key(cfg, key.map(String::from))
            .unwrap()
            .with_backoff(Duration::from_millis(1))
    }

    /// Text `i` gets the vector [1, i, 2] (distinct directions).
    fn raw_vector(i: usize) -> Vec<f32> {
        vec![1.0, i as f32, 2.0]
    }

    fn unit(mut v: Vec<f32>) -> Vec<f32> {
        l2_normalize(&mut v);
        v
    }

    /// An answer for texts `ids`, listed in `order` (positions into `ids`), with `index`.
    fn answer(ids: &[usize], order: &[usize], with_index: bool) -> String {
        let data: Vec<serde_json::Value> = order
            .iter()
            .map(|&pos| {
                let mut item = serde_json::json!({
                    "object": "embedding",
                    "embedding": raw_vector(ids[pos]),
                });
                if with_index {
                    item["index"] = serde_json::json!(pos);
                }
                item
            })
            .collect();
        serde_json::json!({ "object": "list", "data": data, "model": "test-model" }).to_string()
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("text {i}")).collect()
    }

    fn assert_vectors(got: &[Vec<f32>], ids: &[usize]) {
        assert_eq!(got.len(), ids.len());
        for (v, &id) in got.iter().zip(ids) {
            let want = unit(raw_vector(id));
            for (a, b) in v.iter().zip(&want) {
                assert!(
                    (a - b).abs() < 1e-6,
                    "vector for text {id}: {v:?} != {want:?}"
                );
            }
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5);
        }
    }

    fn failed(r: Result<Vec<Vec<f32>>, EmbedError>) -> String {
        match r {
            Err(EmbedError::Failed(m)) => m,
            other => panic!("expected EmbedError::Failed, got {other:?}"),
        }
    }

    #[test]
    fn success_sends_model_input_and_key() {
        let server = serve(vec![
            ok(answer(&[0, 1, 2], &[0, 1, 2], true)),
            ok(answer(&[0, 1, 2], &[0, 1, 2], false)),
        ]);
        let cfg = config(&format!("{}/", server.base)); // trailing '/' is trimmed
        let with_key = provider(&cfg, Some("sk-test"));
        assert_eq!(with_key.dimensions(), 3);
        assert_eq!(with_key.model_name(), "test-model");
        assert_vectors(&with_key.embed(&texts(3)).unwrap(), &[0, 1, 2]);
        let without_key = provider(&cfg, None);
        assert_vectors(&without_key.embed(&texts(3)).unwrap(), &[0, 1, 2]);

        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        for r in &requests {
            assert_eq!(r.method, "POST");
            assert_eq!(r.path, "/v1/embeddings");
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(
                r.body,
                serde_json::json!({"model": "test-model", "input": ["text 0", "text 1", "text 2"]})
            );
        }
        assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
        assert_eq!(requests[1].header("authorization"), None);
    }

    #[test]
    fn empty_input_sends_nothing() {
        let cfg = config("http://127.0.0.1:9/v1");
        assert_eq!(
            provider(&cfg, None).embed(&[]).unwrap(),
            Vec::<Vec<f32>>::new()
        );
    }

    #[test]
    fn retries_after_a_500() {
        let server = serve(vec![
            status(500, "{\"error\":\"boom\"}"),
            ok(answer(&[0, 1], &[0, 1], true)),
        ]);
        let p = provider(&config(&server.base), None);
        assert_vectors(&p.embed(&texts(2)).unwrap(), &[0, 1]);
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn honours_retry_after_on_429() {
        let server = serve(vec![
            Reply::Respond {
                status: 429,
                headers: vec![("Retry-After", "0".into())],
                body: "{\"error\":\"slow down\"}".into(),
            },
            ok(answer(&[0], &[0], true)),
        ]);
        // A huge backoff proves Retry-After: 0 is what was used.
        let p = provider(&config(&server.base), None).with_backoff(Duration::from_secs(20));
        let start = Instant::now();
        assert_vectors(&p.embed(&texts(1)).unwrap(), &[0]);
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn unauthorized_fails_at_once_naming_the_key_variable() {
        let server = serve(vec![
            status(
                401,
                "{\"error\":{\"message\":\"Incorrect API key provided\"}}",
            ),
            status(401, "{\"error\":\"no key\"}"),
        ]);
        let mut cfg = config(&server.base);
        cfg.api_key_env = "MY_EMBED_KEY".into();
        let m = failed(provider(&cfg, Some("sk-secret")).embed(&texts(2)));
        assert!(m.contains("401"), "{m}");
        assert!(m.contains("MY_EMBED_KEY"), "{m}");
        assert!(m.contains("Incorrect API key provided"), "{m}");
        assert!(!m.contains("sk-secret"), "{m}");
        assert_eq!(server.requests().len(), 1);
        // Without a key the message says the variable is not set.
        let m = failed(provider(&cfg, None).embed(&texts(2)));
        assert!(m.contains("MY_EMBED_KEY") && m.contains("not set"), "{m}");
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn other_4xx_fail_at_once_with_a_body_excerpt() {
        let long = format!("{{\"error\":\"{}\"}}", "x".repeat(1000));
        let server = serve(vec![status(400, &long), status(404, "not here")]);
        let p = provider(&config(&server.base), None);
        let m = failed(p.embed(&texts(1)));
        assert!(m.contains("400 Bad Request"), "{m}");
        assert!(m.len() < 600, "body excerpt not truncated: {m}");
        let m = failed(p.embed(&texts(1)));
        assert!(m.contains("404") && m.contains("embedding.api_url"), "{m}");
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn wrong_dimension_or_count_fails() {
        let server = serve(vec![
            ok(r#"{"data":[{"embedding":[1,2],"index":0},{"embedding":[3,4],"index":1}]}"#.into()),
            ok(answer(&[0, 1], &[0, 1], true)),
        ]);
        let p = provider(&config(&server.base), None);
        let m = failed(p.embed(&texts(2)));
        assert!(
            m.contains("2-dimensional") && m.contains("embedding.dimensions is 3"),
            "{m}"
        );
        let m = failed(p.embed(&texts(3)));
        assert!(m.contains("2 vectors for 3 texts"), "{m}");
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn malformed_answers_fail_without_panicking() {
        let bodies = [
            "this is not json",
            "",
            r#"{"object":"list"}"#,
            r#"{"data":null}"#,
            r#"{"data":[{"embedding":"abc"}]}"#,
            r#"{"data":[{"embedding":[1,2,"x"]}]}"#,
            r#"{"data":[{"embedding":[1,2,3],"index":5}]}"#,
            r#"{"data":[{"embedding":[1,2,3],"index":0},{"embedding":[1,2,3],"index":0}]}"#,
            r#"{"data":[{"embedding":[1,2,3],"index":0},{"embedding":[1,2,3]}]}"#,
            r#"{"data":[{"embedding":[1e300,2,3]}]}"#,
            r#"[1,2,3]"#,
        ];
        let counts = [1, 1, 1, 1, 1, 1, 1, 2, 2, 1, 1];
        let server = serve(bodies.iter().map(|b| ok(b.to_string())).collect());
        let mut cfg = config(&server.base);
        cfg.api_max_retries = 0;
        let p = provider(&cfg, None);
        for (body, n) in bodies.iter().zip(counts) {
            let m = failed(p.embed(&texts(n)));
            assert!(m.contains("embedding API"), "{body}: {m}");
        }
        assert_eq!(server.requests().len(), bodies.len());
    }

    #[test]
    fn batches_preserve_order_and_follow_index() {
        let server = serve(vec![
            // Items listed in reverse; `index` puts them back.
            ok(answer(&[0, 1], &[1, 0], true)),
            ok(answer(&[2, 3], &[0, 1], true)),
            ok(answer(&[4], &[0], false)),
        ]);
        let mut cfg = config(&server.base);
        cfg.batch_size = 2;
        let p = provider(&cfg, None);
        assert_eq!(p.max_batch(), 2);
        assert_vectors(&p.embed(&texts(5)).unwrap(), &[0, 1, 2, 3, 4]);
        let inputs: Vec<serde_json::Value> = server
            .requests()
            .iter()
            .map(|r| r.body["input"].clone())
            .collect();
        assert_eq!(
            inputs,
            vec![
                serde_json::json!(["text 0", "text 1"]),
                serde_json::json!(["text 2", "text 3"]),
                serde_json::json!(["text 4"]),
            ]
        );
    }

    #[test]
    fn a_silent_server_times_out() {
        let server = serve(vec![Reply::Hang]);
        let mut cfg = config(&server.base);
        cfg.api_timeout_secs = 1;
        cfg.api_max_retries = 0;
        let p = provider(&cfg, None);
        let start = Instant::now();
        let m = failed(p.embed(&texts(1)));
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
        assert!(m.contains("timeout") && m.contains("1 s"), "{m}");
        assert!(m.contains("1 attempt;"), "{m}");
        assert_eq!(server.requests().len(), 1);
    }

    #[test]
    fn gives_up_after_the_retries() {
        let server = serve(vec![
            status(503, "overloaded"),
            status(503, "overloaded"),
            status(503, "overloaded"),
        ]);
        let mut cfg = config(&server.base);
        cfg.api_max_retries = 2;
        let m = failed(provider(&cfg, None).embed(&texts(1)));
        assert!(m.contains("503 Service Unavailable"), "{m}");
        assert!(m.contains("overloaded"), "{m}");
        assert!(m.contains("3 attempts"), "{m}");
        assert_eq!(server.requests().len(), 3);
    }

    #[test]
    fn connection_refused_is_retried_then_fails() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut cfg = config(&format!("http://127.0.0.1:{port}/v1"));
        cfg.api_max_retries = 2;
        let m = failed(provider(&cfg, None).embed(&texts(1)));
        assert!(m.contains("cannot connect"), "{m}");
        assert!(m.contains("3 attempts"), "{m}");
    }

    #[test]
    fn new_and_embed_work_on_a_plain_thread() {
        let server = serve(vec![ok(answer(&[0, 1], &[0, 1], true))]);
        let cfg = config(&server.base);
        let got = std::thread::spawn(move || {
            let p = ApiProvider::new(&cfg).unwrap();
            let got = p.embed(&texts(2));
            drop(p);
            got
        })
        .join()
        .unwrap();
        assert_vectors(&got.unwrap(), &[0, 1]);
        // UNSET_VAR is not set: no Authorization header.
        assert_eq!(server.requests()[0].header("authorization"), None);
    }

    #[test]
    fn new_reads_the_key_variable() {
        // PATH is set in any test environment; it stands in for a key variable.
        let Some(path) = std::env::var_os("PATH") else {
            return;
        };
        let server = serve(vec![ok(answer(&[0], &[0], true))]);
        let mut cfg = config(&server.base);
        cfg.api_key_env = "PATH".into();
        ApiProvider::new(&cfg).unwrap().embed(&texts(1)).unwrap();
        let want = format!("Bearer {}", path.to_string_lossy().trim());
        assert_eq!(
            server.requests()[0].header("authorization"),
            Some(want.as_str())
        );
    }

    #[test]
    fn embed_inside_a_tokio_runtime_does_not_panic() {
        let server = serve(vec![ok(answer(&[0], &[0], true))]);
        let p = provider(&config(&server.base), None);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async { p.embed(&texts(1)) });
        assert_vectors(&got.unwrap(), &[0]);
        // Created, used and dropped entirely inside an async task, on a multi-thread runtime.
        let server = serve(vec![ok(answer(&[0], &[0], true))]);
        let cfg = config(&server.base);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got = rt
            .block_on(async move {
                tokio::spawn(async move {
                    let p = ApiProvider::new(&cfg).unwrap();
                    let got = p.embed(&texts(1));
                    drop(p);
                    got
                })
                .await
            })
            .unwrap();
        assert_vectors(&got.unwrap(), &[0]);
    }

    #[test]
    fn bad_configuration_is_unavailable() {
        let unavailable = |cfg: &EmbeddingConfig| match ApiProvider::with_key(cfg, None) {
            Err(EmbedError::Unavailable(m)) => m,
            other => panic!("expected Unavailable, got {other:?}"),
        };
        let m = unavailable(&config("  "));
        assert!(m.contains("embedding.api_url"), "{m}");
        let m = unavailable(&config("not a url"));
        assert!(m.contains("embedding.api_url"), "{m}");
        let m = unavailable(&config("ftp://example.com/v1"));
        assert!(m.contains("http://"), "{m}");
        let mut cfg = config("http://127.0.0.1:1/v1");
        cfg.dimensions = 0;
        assert!(unavailable(&cfg).contains("embedding.dimensions"));
        let cfg = config("http://127.0.0.1:1/v1");
        match ApiProvider::with_key(&cfg, Some("bad\nkey".into())) {
            Err(EmbedError::Unavailable(m)) => assert!(m.contains(UNSET_VAR), "{m}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
        // An empty key is no key.
        let p = ApiProvider::with_key(&cfg, Some("  ".into())).unwrap();
        assert!(p.auth.is_none());
        assert!(!format!("{p:?}").contains("Bearer"));
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let ms = Duration::from_millis;
        let delays: Vec<Duration> = (0..8).map(|i| retry_delay(ms(200), i, None)).collect();
        assert_eq!(
            delays,
            [200, 400, 800, 1600, 3200, 5000, 5000, 5000]
                .map(ms)
                .to_vec()
        );
        assert_eq!(retry_delay(ms(200), 100, None), ms(5000));
        assert_eq!(
            retry_delay(ms(200), 0, Some(Duration::from_secs(120))),
            Duration::from_secs(30)
        );
        assert_eq!(
            retry_delay(ms(200), 3, Some(Duration::ZERO)),
            Duration::ZERO
        );
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static(" 7 "));
        assert_eq!(parse_retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(parse_retry_after(&headers), None);
    }
}
