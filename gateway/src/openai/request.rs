//! Request bodies of `/v1/chat/completions` and `/v1/completions`.
//!
//! Parsing is two-stage: the JSON object's keys are checked against what
//! the endpoint supports (anything else is a 400 naming the fields, never
//! ignored), then the object is deserialized with the path of any bad value.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Which OpenAI endpoint a body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completions,
}

/// Keys both endpoints accept.
const COMMON_KEYS: &[&str] = &[
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "user",
    "return_token_sources",
];
/// Keys only chat accepts.
const CHAT_KEYS: &[&str] = &[
    "messages",
    "max_completion_tokens",
    "top_logprobs",
    "chat_template_kwargs",
    "add_generation_prompt",
];
/// Keys only completions accepts.
const COMPLETION_KEYS: &[&str] = &["prompt", "echo"];

/// Keys accepted only with the value that means "off"; any other value is
/// an unsupported feature.
fn neutral(key: &str, value: &Value) -> Option<bool> {
    let num = |target: f64| value.as_f64().map(|x| x == target).or(Some(false));
    match key {
        "frequency_penalty" | "presence_penalty" => num(0.0),
        "repetition_penalty" => num(1.0),
        "response_format" => Some(value.get("type").and_then(Value::as_str) == Some("text")),
        "tool_choice" => Some(value.as_str() == Some("none")),
        "tools" | "functions" | "logit_bias" => Some(
            value.as_array().is_some_and(Vec::is_empty)
                || value.as_object().is_some_and(Map::is_empty),
        ),
        "parallel_tool_calls" => Some(true),
        "best_of" => num(1.0),
        "suffix" => Some(value.as_str() == Some("")),
        _ => None,
    }
}

/// Parses a request body: UTF-8, JSON, an object, only supported keys.
pub fn parse_object(body: &[u8], endpoint: Endpoint) -> Result<Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| ApiError::BadJson(format!("the body is not valid UTF-8: {e}")))?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::BadJson(format!("the body is not valid JSON: {e}")))?;
    let Value::Object(mut map) = value else {
        return Err(ApiError::BadJson("the body must be a JSON object".into()));
    };
    // `null` means "not given", as in the OpenAI SDKs.
    map.retain(|_, v| !v.is_null());
    let extra = match endpoint {
        Endpoint::Chat => CHAT_KEYS,
        Endpoint::Completions => COMPLETION_KEYS,
    };
    let mut unsupported: Vec<String> = Vec::new();
    let mut neutral_keys = Vec::new();
    for (k, v) in &map {
        if COMMON_KEYS.contains(&k.as_str()) || extra.contains(&k.as_str()) {
            continue;
        }
        match neutral(k, v) {
            Some(true) => neutral_keys.push(k.clone()),
            _ => unsupported.push(k.clone()),
        }
    }
    if !unsupported.is_empty() {
        unsupported.sort();
        return Err(ApiError::Unsupported(unsupported));
    }
    for k in neutral_keys {
        map.remove(&k);
    }
    Ok(map)
}

/// Deserializes `map` into `T`, naming the path of a bad value.
pub fn typed<T: serde::de::DeserializeOwned>(map: Map<String, Value>) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(Value::Object(map.clone())).map_err(|e| {
        let mut path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." || path.is_empty() {
            // Flattened fields lose their path: find the culprit alone.
            path = blame(&map).unwrap_or_default();
        }
        if path.is_empty() {
            ApiError::invalid("", inner)
        } else {
            ApiError::invalid(path.clone(), format!("{path}: {inner}"))
        }
    })
}

/// The shared sampling field of `map` whose value does not deserialize.
fn blame(map: &Map<String, Value>) -> Option<String> {
    map.iter().find_map(|(k, v)| {
        let mut one = Map::new();
        one.insert(k.clone(), v.clone());
        serde_json::from_value::<SamplingFields>(Value::Object(one))
            .is_err()
            .then(|| k.clone())
    })
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum StopField {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl StopField {
    /// As a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and `usage: null` on the others).
    #[serde(default)]
    pub include_usage: bool,
    /// vLLM's option: usage on every chunk.
    #[serde(default)]
    pub continuous_usage_stats: bool,
}

/// Sampling fields both endpoints share.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct SamplingFields {
    /// Most tokens to generate.
    pub max_tokens: Option<u64>,
    /// Sampling temperature (0 = greedy).
    pub temperature: Option<f64>,
    /// Nucleus mass.
    pub top_p: Option<f64>,
    /// Top-k (-1 or 0 = off).
    pub top_k: Option<i64>,
    /// Min-p.
    pub min_p: Option<f64>,
    /// Seed.
    pub seed: Option<i64>,
    /// Stop strings.
    pub stop: Option<StopField>,
    /// Stop token ids (vLLM extension).
    pub stop_token_ids: Option<Vec<u32>>,
    /// Keep going past EOS (vLLM extension).
    pub ignore_eos: Option<bool>,
    /// Choices per prompt.
    pub n: Option<u64>,
    /// Stream with SSE.
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// End-user id (logged only as given; not used for routing).
    pub user: Option<String>,
    /// Routing extension: the writer of every token in each choice.
    pub return_token_sources: Option<bool>,
}

/// Content of a chat message: a string or a list of text parts.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts (only `{"type": "text", "text": ...}`).
    Parts(Vec<ContentPart>),
}

/// One content part.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ContentPart {
    /// Must be `text`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text.
    #[serde(default)]
    pub text: Option<String>,
}

/// One chat message.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user`, `assistant` (or `developer`, treated as system).
    pub role: String,
    /// The text (may be absent for an assistant turn).
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Optional participant name.
    #[serde(default)]
    pub name: Option<String>,
    /// An assistant turn's reasoning (Qwen3 templates).
    #[serde(default)]
    pub reasoning_content: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ChatRequest {
    /// The served model name, a member model's name, or `default`.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Newer spelling of `max_tokens`.
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// Return log-probabilities of the chosen tokens.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// Alternatives per position (0..=20), with `logprobs: true`.
    #[serde(default)]
    pub top_logprobs: Option<u64>,
    /// Extra template variables (`enable_thinking`, ...).
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// Append the assistant header (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Shared sampling fields.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// `prompt`: text, texts, token ids, or lists of token ids.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PromptField {
    /// One text.
    Text(String),
    /// Several texts.
    Texts(Vec<String>),
    /// One token-id prompt.
    Ids(Vec<i64>),
    /// Several token-id prompts.
    IdLists(Vec<Vec<i64>>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct CompletionRequest {
    /// The served model name, a member model's name, or `default`.
    pub model: String,
    /// The prompt(s).
    pub prompt: PromptField,
    /// Top alternatives per position (0..=20); 0 = the chosen token only.
    #[serde(default)]
    pub logprobs: Option<u64>,
    /// Prepend the prompt to each choice's text.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Shared sampling fields.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_unsupported_fields_are_named() {
        let e = parse_object(
            br#"{"model":"m","messages":[],"tools":[{"type":"function"}],"frequency_penalty":0.5,"foo":1}"#,
            Endpoint::Chat,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ApiError::Unsupported(vec![
                "foo".into(),
                "frequency_penalty".into(),
                "tools".into()
            ])
        );
        // Neutral values and nulls are accepted and dropped.
        let m = parse_object(
            br#"{"model":"m","messages":[],"frequency_penalty":0,"response_format":{"type":"text"},"tools":null}"#,
            Endpoint::Chat,
        )
        .unwrap();
        assert_eq!(m.len(), 2);
        // `echo` is a completions field only.
        assert!(parse_object(
            br#"{"model":"m","messages":[],"echo":true}"#,
            Endpoint::Chat
        )
        .is_err());
    }

    #[test]
    fn bad_bodies_are_errors() {
        for body in [&b"\xff\xfe"[..], b"{", b"[1,2]", b"", b"null"] {
            assert!(matches!(
                parse_object(body, Endpoint::Completions),
                Err(ApiError::BadJson(_))
            ));
        }
    }

    #[test]
    fn typed_errors_carry_the_path() {
        let m = parse_object(
            br#"{"model":"m","prompt":"hi","max_tokens":-3}"#,
            Endpoint::Completions,
        )
        .unwrap();
        match typed::<CompletionRequest>(m) {
            Err(ApiError::InvalidParam { param, .. }) => assert_eq!(param, "max_tokens"),
            other => panic!("{other:?}"),
        }
        let m = parse_object(
            br#"{"model":"m","messages":[{"role":"user","content":"x","bogus":1}]}"#,
            Endpoint::Chat,
        )
        .unwrap();
        assert!(typed::<ChatRequest>(m).is_err());
        let m = parse_object(
            br#"{"model":"m","prompt":[[1,2],[3]],"stop":"x","n":2}"#,
            Endpoint::Completions,
        )
        .unwrap();
        let r: CompletionRequest = typed(m).unwrap();
        assert_eq!(r.prompt, PromptField::IdLists(vec![vec![1, 2], vec![3]]));
        assert_eq!(r.sampling.stop, Some(StopField::One("x".into())));
        assert_eq!(r.sampling.n, Some(2));
    }
}
