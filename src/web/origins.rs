//! The origins a browser page may call from: the list `kbdb serve` allows (its own origins and
//! `serve.allowed_origins`), checked against a request's `Origin` by the MCP endpoint's guard
//! (`serve/guard.rs`) and by the web page's form posts alike.

/// The origins a browser page may call from, as (scheme, host, port).
pub(crate) struct Origins(Vec<(String, String, u16)>);

/// `scheme://host[:port]` (a trailing `/` allowed) as (scheme, host, port), lower-cased, the
/// port the scheme's default when absent.
fn parse_origin(text: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = text.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return None;
    }
    let authority: http::uri::Authority = rest.parse().ok()?;
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    Some((
        scheme,
        authority.host().to_ascii_lowercase(),
        authority.port_u16().unwrap_or(default),
    ))
}

impl Origins {
    pub(crate) fn parse(list: &[String]) -> Origins {
        Origins(list.iter().filter_map(|o| parse_origin(o)).collect())
    }

    pub(crate) fn allows(&self, origin: &str) -> bool {
        parse_origin(origin).is_some_and(|o| self.0.contains(&o))
    }
}
