//! `POST /tokenize` and `POST /detokenize` (vLLM's shapes).

use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use warp::http::{HeaderMap, StatusCode};
use warp::reply::Response;

use crate::error::{json_response, ApiError};
use crate::openai::request::{typed, ChatRequest};
use crate::routes::{authorize, count, fail};
use crate::state::{Gateway, Served};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeText {
    #[serde(default)]
    model: Option<String>,
    prompt: String,
    #[serde(default)]
    add_special_tokens: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Detokenize {
    #[serde(default)]
    model: Option<String>,
    tokens: Vec<i64>,
}

fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::BadJson(format!("the body is not valid UTF-8: {e}")))?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::BadJson("the body must be a JSON object".into())),
        Err(e) => Err(ApiError::BadJson(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

/// The group whose tokenizer serves `model` (the first group when none is named).
fn served_for<'a>(gw: &'a Gateway, model: Option<&str>) -> Result<&'a Served, ApiError> {
    match model {
        Some(m) => Ok(&gw.served[gw.group_of(m)?]),
        None => Ok(gw.primary()),
    }
}

fn tokenize_ids(gw: &Gateway, body: &[u8]) -> Result<Vec<u32>, ApiError> {
    let mut map = object(body)?;
    map.retain(|_, v| !v.is_null());
    if map.contains_key("messages") {
        // A conversation: rendered exactly as chat completions render it.
        map.entry("model".to_string())
            .or_insert_with(|| Value::String(gw.primary().catalog.served.clone()));
        let req: ChatRequest = typed(map)?;
        let g = served_for(gw, Some(&req.model))?;
        let p = crate::validate::chat(req, &g.catalog, &g.text)?;
        return Ok(p
            .prompts
            .into_iter()
            .next()
            .map(|p| p.ids)
            .unwrap_or_default());
    }
    let req: TokenizeText = typed(map)?;
    served_for(gw, req.model.as_deref())?
        .text
        .encode(&req.prompt, req.add_special_tokens.unwrap_or(true))
}

/// Text or messages → token ids.
pub fn tokenize(gw: Arc<Gateway>, headers: HeaderMap, body: Bytes) -> Response {
    const ROUTE: &str = "/tokenize";
    if let Some(resp) = authorize(&gw, ROUTE, &headers) {
        return resp;
    }
    match tokenize_ids(&gw, &body) {
        Ok(ids) => count(
            &gw,
            ROUTE,
            json_response(StatusCode::OK, &json!({"count": ids.len(), "tokens": ids})),
        ),
        Err(e) => fail(&gw, ROUTE, e),
    }
}

fn detokenize_text(gw: &Gateway, body: &[u8]) -> Result<String, ApiError> {
    let req: Detokenize = typed(object(body)?)?;
    let g = served_for(gw, req.model.as_deref())?;
    let ids = req
        .tokens
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            u32::try_from(t).map_err(|_| {
                ApiError::invalid(
                    format!("tokens[{i}]"),
                    format!("token id {t} is out of range"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    g.text.decode(&ids, false)
}

/// Token ids → text.
pub fn detokenize(gw: Arc<Gateway>, headers: HeaderMap, body: Bytes) -> Response {
    const ROUTE: &str = "/detokenize";
    if let Some(resp) = authorize(&gw, ROUTE, &headers) {
        return resp;
    }
    match detokenize_text(&gw, &body) {
        Ok(text) => count(
            &gw,
            ROUTE,
            json_response(StatusCode::OK, &json!({"prompt": text})),
        ),
        Err(e) => fail(&gw, ROUTE, e),
    }
}
