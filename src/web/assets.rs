//! The stylesheet, script and icon, embedded in the binary (no build chain).

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};

const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");
const ICON: &str = include_str!("assets/icon.svg");

pub async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "app.css" => (CSS, "text/css; charset=utf-8"),
        "app.js" => (JS, "text/javascript; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    r
}

/// Browsers ask for it whatever the page says; the icon is the SVG.
pub async fn favicon() -> Response {
    asset(Path("icon.svg".to_string())).await
}
