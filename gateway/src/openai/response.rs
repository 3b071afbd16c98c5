//! OpenAI response objects, built from plain values so that each shape is
//! tested on its own: the non-streaming body, its choices, the streaming
//! chunks, `usage` and `logprobs`, with the routing extensions
//! (`token_sources`, `usage.completion_tokens_by_model`, `usage.switches`).

use protocol::client::Usage;
use protocol::sampling::TokenLogprobs;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Endpoint;

/// What every object of one answer repeats.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// `chatcmpl-...` or `cmpl-...`.
    pub id: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// The `model` the client sent.
    pub model: &'a str,
    /// Chat or completions.
    pub endpoint: Endpoint,
}

impl Head<'_> {
    /// The `object` of the non-streaming body.
    fn body_object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Chat => "chat.completion",
            Endpoint::Completions => "text_completion",
        }
    }

    /// The `object` of a streaming chunk.
    fn chunk_object(&self) -> &'static str {
        match self.endpoint {
            Endpoint::Chat => "chat.completion.chunk",
            Endpoint::Completions => "text_completion",
        }
    }
}

/// The id prefix of an answer to `endpoint`.
pub fn id_prefix(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
    }
}

/// `usage` with the routing extensions; `names[i]` is model `i`.
/// `peer_fallbacks` counts peer failures the request survived on the entry
/// model (`fallback_on_peer_failure`).
pub fn usage_json(u: &Usage, names: &[String]) -> Value {
    let mut by_model = Map::new();
    for (i, name) in names.iter().enumerate() {
        by_model.insert(
            name.clone(),
            json!(u.tokens_by_model.get(i).copied().unwrap_or(0)),
        );
    }
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
        "completion_tokens_by_model": by_model,
        "switches": u.switches,
        "peer_fallbacks": u.peer_fallbacks,
    })
}

/// One token's entry in chat `logprobs.content`; `text(id)` shows a token.
pub fn token_logprob(lp: &TokenLogprobs, token: u32, text: impl Fn(u32) -> String) -> Value {
    // The engine reports -inf for a masked token; JSON has no infinity.
    let finite = |x: f32| if x.is_finite() { x } else { -9999.0 };
    json!({
        "token": text(token),
        "logprob": finite(lp.logprob),
        "bytes": text(token).into_bytes(),
        "top_logprobs": lp.top.iter().map(|&(id, l)| json!({
            "token": text(id),
            "logprob": finite(l),
            "bytes": text(id).into_bytes(),
        })).collect::<Vec<_>>(),
    })
}

/// Completions-style `logprobs` from chat-style entries.
pub fn completion_logprobs(entries: &[Value]) -> Value {
    let mut offset = 0usize;
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top = Vec::new();
    let mut offsets = Vec::new();
    for e in entries {
        let t = e["token"].as_str().unwrap_or("").to_string();
        offsets.push(offset);
        offset += t.len();
        tokens.push(json!(t));
        token_logprobs.push(e["logprob"].clone());
        let mut m = Map::new();
        if let Some(alts) = e["top_logprobs"].as_array() {
            for a in alts {
                m.insert(
                    a["token"].as_str().unwrap_or("").to_string(),
                    a["logprob"].clone(),
                );
            }
        }
        top.push(Value::Object(m));
    }
    json!({
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top,
        "text_offset": offsets,
    })
}

/// A choice's `logprobs` field: `null` unless asked for, else the chat or
/// completions shape of `entries`.
pub fn logprobs_field(endpoint: Endpoint, asked: bool, entries: &[Value]) -> Value {
    match (asked, endpoint) {
        (false, _) => Value::Null,
        (true, Endpoint::Chat) => json!({ "content": entries }),
        (true, Endpoint::Completions) => completion_logprobs(entries),
    }
}

/// One finished choice of a non-streaming answer.
#[derive(Debug, Clone, Copy)]
pub struct FinalChoice<'a> {
    /// Choice index.
    pub index: usize,
    /// Chat: the message content; completions: the text (echo included).
    pub text: &'a str,
    /// The `logprobs` field (see [`logprobs_field`]).
    pub logprobs: &'a Value,
    /// `finish_reason`.
    pub finish: Option<&'a str>,
    /// Writer of each token, when `return_token_sources` asked for them.
    pub sources: Option<&'a [&'a str]>,
}

/// A `choices[i]` object of the non-streaming body.
pub fn final_choice(endpoint: Endpoint, c: FinalChoice<'_>) -> Value {
    let mut choice = Map::new();
    choice.insert("index".into(), json!(c.index));
    match endpoint {
        Endpoint::Chat => {
            choice.insert(
                "message".into(),
                json!({"role": "assistant", "content": c.text}),
            );
        }
        Endpoint::Completions => {
            choice.insert("text".into(), json!(c.text));
        }
    }
    choice.insert("logprobs".into(), c.logprobs.clone());
    choice.insert("finish_reason".into(), json!(c.finish));
    if let Some(sources) = c.sources {
        choice.insert("token_sources".into(), json!(sources));
    }
    Value::Object(choice)
}

/// The non-streaming body.
pub fn completion_body(head: &Head<'_>, choices: Vec<Value>, usage: Value) -> Value {
    json!({
        "id": head.id,
        "object": head.body_object(),
        "created": head.created,
        "model": head.model,
        "choices": choices,
        "usage": usage,
    })
}

/// The last streaming chunk when `stream_options.include_usage` is set:
/// no choices, the request's usage.
pub fn usage_chunk(head: &Head<'_>, usage: Value) -> Value {
    json!({
        "id": head.id,
        "object": head.chunk_object(),
        "created": head.created,
        "model": head.model,
        "choices": [],
        "usage": usage,
    })
}

/// What a chunk carries besides logprobs and the finish reason.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// Chat: the first chunk's `{"role": "assistant"}`; completions: "".
    Role,
    /// New text (chat `delta.content`, completions `text`).
    Text(&'a str),
}

/// The parts of one streaming chunk for choice `index`.
#[derive(Debug, Clone)]
pub struct ChunkParts<'a> {
    /// Choice index.
    pub index: usize,
    /// Role or text.
    pub payload: Payload<'a>,
    /// The `logprobs` field of the tokens this chunk carries.
    pub logprobs: Value,
    /// Set on the choice's last chunk.
    pub finish: Option<&'a str>,
    /// Writer of each token this chunk carries.
    pub sources: Vec<&'a str>,
    /// `usage`: absent, `null`, or the running totals.
    pub usage: Option<Value>,
}

/// A streaming chunk, ready to serialize into an SSE `data:` frame.
pub fn chunk<'a>(head: &Head<'a>, parts: ChunkParts<'a>) -> Chunk<'a> {
    let (delta, text) = match (head.endpoint, parts.payload) {
        (Endpoint::Chat, Payload::Role) => (
            Some(Delta {
                role: Some("assistant"),
                content: Some(""),
            }),
            None,
        ),
        (Endpoint::Chat, Payload::Text(t)) => (
            Some(Delta {
                role: None,
                content: (!t.is_empty()).then_some(t),
            }),
            None,
        ),
        (Endpoint::Completions, Payload::Role) => (None, Some("")),
        (Endpoint::Completions, Payload::Text(t)) => (None, Some(t)),
    };
    Chunk {
        id: head.id,
        object: head.chunk_object(),
        created: head.created,
        model: head.model,
        choices: [ChunkChoice {
            index: parts.index,
            delta,
            text,
            logprobs: parts.logprobs,
            finish_reason: parts.finish,
            token_sources: parts.sources,
        }],
        usage: parts.usage,
    }
}

/// Chat `delta`.
#[derive(Debug, Serialize)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

/// `choices[0]` of a chunk.
#[derive(Debug, Serialize)]
pub struct ChunkChoice<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    delta: Option<Delta<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    logprobs: Value,
    finish_reason: Option<&'a str>,
    token_sources: Vec<&'a str>,
}

/// One streaming chunk (serialized straight into the frame, no `Value`).
#[derive(Debug, Serialize)]
pub struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChunkChoice<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(endpoint: Endpoint) -> Head<'static> {
        Head {
            id: "chatcmpl-1",
            created: 7,
            model: "tr",
            endpoint,
        }
    }

    fn usage() -> Usage {
        Usage {
            prompt_tokens: 5,
            completion_tokens: 4,
            tokens_by_model: vec![3, 1],
            switches: 2,
            cached_prompt_tokens: 1,
            peer_fallbacks: 0,
        }
    }

    fn names() -> Vec<String> {
        vec!["quick".into(), "reference".into()]
    }

    #[test]
    fn usage_has_totals_and_the_routing_extensions() {
        let u = usage_json(&usage(), &names());
        assert_eq!(
            u,
            json!({
                "prompt_tokens": 5,
                "completion_tokens": 4,
                "total_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 1},
                "completion_tokens_by_model": {"quick": 3, "reference": 1},
                "switches": 2,
                "peer_fallbacks": 0,
            })
        );
        // A model the usage has no count for still appears, with 0.
        let three = vec!["a".into(), "b".into(), "c".into()];
        assert_eq!(
            usage_json(&usage(), &three)["completion_tokens_by_model"]["c"],
            0
        );
    }

    #[test]
    fn token_logprob_replaces_infinities() {
        let lp = TokenLogprobs {
            token: 1,
            logprob: -0.5,
            rank: 1,
            top: vec![(1, -0.5), (2, f32::NEG_INFINITY)],
        };
        let v = token_logprob(&lp, 1, |id| format!("t{id}"));
        assert_eq!(v["token"], "t1");
        assert_eq!(v["logprob"], -0.5);
        assert_eq!(v["bytes"], json!(b"t1".to_vec()));
        assert_eq!(v["top_logprobs"][1]["token"], "t2");
        assert_eq!(v["top_logprobs"][1]["logprob"], -9999.0);
    }

    #[test]
    fn completion_logprobs_offsets_follow_the_token_texts() {
        let entries = vec![
            json!({"token": "ab", "logprob": -1.0, "top_logprobs": [{"token": "ab", "logprob": -1.0}]}),
            json!({"token": "c", "logprob": -2.0, "top_logprobs": []}),
        ];
        let v = completion_logprobs(&entries);
        assert_eq!(v["tokens"], json!(["ab", "c"]));
        assert_eq!(v["token_logprobs"], json!([-1.0, -2.0]));
        assert_eq!(v["text_offset"], json!([0, 2]));
        assert_eq!(v["top_logprobs"], json!([{"ab": -1.0}, {}]));
        assert_eq!(
            logprobs_field(Endpoint::Chat, true, &entries),
            json!({"content": entries})
        );
        assert_eq!(
            logprobs_field(Endpoint::Completions, false, &entries),
            Value::Null
        );
    }

    #[test]
    fn final_choices_of_both_endpoints() {
        let sources = ["quick", "reference"];
        let c = FinalChoice {
            index: 1,
            text: "hi",
            logprobs: &Value::Null,
            finish: Some("stop"),
            sources: Some(&sources),
        };
        assert_eq!(
            final_choice(Endpoint::Chat, c),
            json!({
                "index": 1,
                "message": {"role": "assistant", "content": "hi"},
                "logprobs": null,
                "finish_reason": "stop",
                "token_sources": ["quick", "reference"],
            })
        );
        let c = FinalChoice { sources: None, ..c };
        assert_eq!(
            final_choice(Endpoint::Completions, c),
            json!({"index": 1, "text": "hi", "logprobs": null, "finish_reason": "stop"})
        );
    }

    #[test]
    fn bodies_name_their_objects() {
        let h = head(Endpoint::Chat);
        let body = completion_body(&h, vec![json!({"index": 0})], json!({"x": 1}));
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["id"], "chatcmpl-1");
        assert_eq!(body["created"], 7);
        assert_eq!(body["model"], "tr");
        assert_eq!(body["usage"], json!({"x": 1}));
        let h = head(Endpoint::Completions);
        assert_eq!(
            completion_body(&h, vec![], Value::Null)["object"],
            "text_completion"
        );
        let last = usage_chunk(&h, json!({"x": 1}));
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["object"], "text_completion");
        assert_eq!(
            usage_chunk(&head(Endpoint::Chat), Value::Null)["object"],
            "chat.completion.chunk"
        );
        assert_eq!(id_prefix(Endpoint::Chat), "chatcmpl");
        assert_eq!(id_prefix(Endpoint::Completions), "cmpl");
    }

    fn parts(payload: Payload<'static>) -> ChunkParts<'static> {
        ChunkParts {
            index: 0,
            payload,
            logprobs: Value::Null,
            finish: None,
            sources: vec!["quick"],
            usage: None,
        }
    }

    #[test]
    fn chat_chunks_carry_a_delta() {
        let h = head(Endpoint::Chat);
        let role = serde_json::to_value(chunk(&h, parts(Payload::Role))).unwrap();
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(
            role["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert!(role["choices"][0].get("text").is_none());
        assert!(role.get("usage").is_none());
        let text = serde_json::to_value(chunk(&h, parts(Payload::Text("yo")))).unwrap();
        assert_eq!(text["choices"][0]["delta"], json!({"content": "yo"}));
        assert_eq!(text["choices"][0]["token_sources"], json!(["quick"]));
        // An empty text (the finish chunk) has an empty delta.
        let mut p = parts(Payload::Text(""));
        p.finish = Some("length");
        p.usage = Some(Value::Null);
        let fin = serde_json::to_value(chunk(&h, p)).unwrap();
        assert_eq!(fin["choices"][0]["delta"], json!({}));
        assert_eq!(fin["choices"][0]["finish_reason"], "length");
        assert_eq!(fin["usage"], Value::Null);
    }

    #[test]
    fn completion_chunks_carry_text() {
        let h = head(Endpoint::Completions);
        let v = serde_json::to_value(chunk(&h, parts(Payload::Text("yo")))).unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0]["text"], "yo");
        assert!(v["choices"][0].get("delta").is_none());
        let v = serde_json::to_value(chunk(&h, parts(Payload::Role))).unwrap();
        assert_eq!(v["choices"][0]["text"], "");
    }
}
