//! A real OpenAI-compatible embedding server on loopback, for tests of the `api` provider and
//! of the embedding lifecycle through the real binary. Its vectors are deterministic: each word
//! adds weight to a "concept" dimension (a small table of related words share one, so a query
//! can match a section by meaning without sharing a word) or to a hashed dimension.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub const DIMS: usize = 32;

/// Words that mean the same here share a dimension.
const CONCEPTS: &[&[&str]] = &[
    &["postgres", "database", "sql", "jsonb", "storage", "db"],
    &["rationale", "chose", "because", "reason", "decision", "why"],
    &["deploy", "release", "ship", "rollout", "production"],
    &["cat", "kitten", "feline", "pet"],
    &["outage", "incident", "pager", "oncall", "night"],
];

pub struct EmbedServer {
    pub port: u16,
    /// While set, every request gets a 500.
    pub fail: Arc<AtomicBool>,
    /// Embedding requests answered, not counting a daemon's probe (one text, `kbdb`).
    pub requests: Arc<AtomicUsize>,
}

impl EmbedServer {
    pub fn start() -> EmbedServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fail = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let (f, r) = (fail.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (f, r) = (f.clone(), r.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &f, &r);
                });
            }
        });
        EmbedServer {
            port,
            fail,
            requests,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The `[embedding]` section of worker.toml for this server.
    pub fn worker_toml(&self, model: &str) -> String {
        format!(
            "[embedding]\nprovider = \"api\"\napi_url = \"{}\"\nmodel = \"{model}\"\ndimensions = {DIMS}\napi_timeout_secs = 5\napi_max_retries = 0\n",
            self.url()
        )
    }
}

fn serve(
    stream: std::net::TcpStream,
    fail: &AtomicBool,
    requests: &AtomicUsize,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut length = 0usize;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let probe = serde_json::from_slice::<serde_json::Value>(&body)
        .is_ok_and(|v| v["input"] == serde_json::json!(["kbdb"]));
    if !probe {
        requests.fetch_add(1, Ordering::SeqCst);
    }
    let (status, answer) = if fail.load(Ordering::SeqCst) {
        (
            "500 Internal Server Error",
            "{\"error\":\"down\"}".to_string(),
        )
    } else {
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let data: Vec<serde_json::Value> = req["input"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| t.as_str().unwrap_or(""))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, t)| serde_json::json!({"index": i, "embedding": embed(t)}))
            .collect();
        ("200 OK", serde_json::json!({ "data": data }).to_string())
    };
    let mut s = stream;
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    )?;
    s.flush()
}

/// The deterministic embedding of a text.
pub fn embed(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIMS];
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 1)
    {
        let w = w.to_lowercase();
        match CONCEPTS.iter().position(|c| c.contains(&w.as_str())) {
            Some(i) => v[i] += 1.0,
            None => {
                let h = w
                    .bytes()
                    .fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
                v[CONCEPTS.len() + h as usize % (DIMS - CONCEPTS.len())] += 0.3;
            }
        }
    }
    v
}
