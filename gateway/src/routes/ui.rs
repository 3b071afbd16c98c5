//! `GET /ui`: the route-trace page (every token coloured by its writer).

use std::sync::Arc;

use warp::http::HeaderValue;
use warp::reply::Response;

use crate::state::Gateway;

const PAGE: &str = include_str!("../ui/index.html");

/// The page; the served model name is filled in.
pub fn handle(gw: Arc<Gateway>) -> Response {
    // The page drives the first group (the one `default` names).
    let catalog = &gw.primary().catalog;
    let members = serde_json::to_string(&catalog.members).unwrap_or_else(|_| "[]".into());
    let page = PAGE
        .replace("__SERVED_MODEL__", &html_escape(&catalog.served))
        .replace("__MEMBERS__", &html_escape(&members));
    let mut resp = Response::new(page.into());
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
