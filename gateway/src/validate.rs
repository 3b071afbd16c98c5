//! From a parsed OpenAI request to what a backend runs: token ids,
//! [`SamplingParams`], the number of choices and the target (token-level
//! routing, or one member model alone). Everything is checked here, before
//! the request takes a slot; the error names the field.

use engine_config::GenerationDefaults;
use protocol::client::RequestError;
use protocol::sampling::SamplingParams;
use serde_json::{Map, Value};
use textio::ChatMessage;

use crate::error::ApiError;
use crate::openai::request::{
    ChatRequest, CompletionRequest, MessageContent, PromptField, SamplingFields,
};
use crate::openai::Endpoint;
use crate::text::TextSide;

mod catalog;
pub use catalog::{Catalog, LearnedDefaults, Target};

/// Most choices per prompt.
pub const MAX_N: usize = 64;
/// Most prompts in one completions request.
pub const MAX_PROMPTS: usize = 64;
/// Most alternatives per position (`top_logprobs`, completions `logprobs`).
pub const MAX_TOP_LOGPROBS: usize = protocol::sampling::MAX_TOP_LOGPROBS;
/// Chat `max_tokens` when the client gives none.
pub const DEFAULT_CHAT_MAX_TOKENS: usize = 512;
/// Completions `max_tokens` when the client gives none (OpenAI's default).
pub const DEFAULT_COMPLETION_MAX_TOKENS: usize = 16;
/// Upper bound on `max_tokens` before the engine's own context check.
pub const MAX_TOKENS_CAP: u64 = 1 << 24;

/// One prompt: its ids and (for `echo`) its text.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptInput {
    /// Token ids sent to the engine.
    pub ids: Vec<u32>,
    /// The prompt as text, when known or decodable.
    pub text: Option<String>,
}

/// A checked request, ready for admission.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Chat or completions.
    pub endpoint: Endpoint,
    /// The `model` the client sent (echoed back).
    pub model: String,
    /// Routed or pinned.
    pub target: Target,
    /// One or more prompts (chat: exactly one).
    pub prompts: Vec<PromptInput>,
    /// Sampling for every choice (choice `i` adds `i` to a given seed).
    pub params: SamplingParams,
    /// Choices per prompt.
    pub n: usize,
    /// SSE streaming.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`.
    pub continuous_usage: bool,
    /// Log-probabilities: `Some(k)` = chosen token plus `k` alternatives.
    pub logprobs: Option<usize>,
    /// Completions `echo`.
    pub echo: bool,
    /// `return_token_sources`.
    pub sources: bool,
}

impl Prepared {
    /// Engine requests this request makes (prompts × n).
    pub fn num_sequences(&self) -> usize {
        self.prompts.len() * self.n
    }
}

/// A number the client sent, as the engine's `f32` (ranges are checked
/// once, by [`SamplingParams::validate`]).
fn float(v: Option<f64>, default: f32) -> f32 {
    v.map_or(default, |x| x as f32)
}

/// What the shared sampling fields of both endpoints come to.
#[derive(Debug, Clone)]
struct Sampling {
    /// Engine parameters, checked.
    params: SamplingParams,
    /// Choices per prompt.
    n: usize,
    /// SSE streaming.
    stream: bool,
    /// `stream_options.include_usage`.
    include_usage: bool,
    /// `stream_options.continuous_usage_stats`.
    continuous_usage: bool,
    /// `return_token_sources`.
    sources: bool,
}

/// Shared sampling fields → engine parameters, `n`, streaming options. A
/// sampling field the request leaves out (or sets to null) takes the
/// served model's default, as vLLM does; the request's own values win.
fn sampling(
    f: &SamplingFields,
    max_tokens: Option<u64>,
    default_max: usize,
    defaults: &GenerationDefaults,
) -> Result<Sampling, ApiError> {
    let base = defaults.params();
    let max_tokens = match max_tokens {
        None => default_max,
        Some(m) if m > MAX_TOKENS_CAP => {
            return Err(ApiError::ContextLength(format!(
                "max_tokens {m} exceeds the largest context this server supports ({MAX_TOKENS_CAP})"
            )))
        }
        Some(m) => m as usize,
    };
    let top_k = match f.top_k {
        None => base.top_k,
        Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid(
                "top_k",
                format!("top_k must be -1 (off) or positive, got {k}"),
            ))
        }
    };
    let n = match f.n {
        None => 1,
        Some(n) if (1..=MAX_N as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::invalid(
                "n",
                format!("n must be in [1, {MAX_N}], got {n}"),
            ))
        }
    };
    let stop = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop.len() > 16 {
        return Err(ApiError::invalid("stop", "at most 16 stop strings"));
    }
    let params = SamplingParams {
        temperature: float(f.temperature, base.temperature),
        top_p: float(f.top_p, base.top_p),
        top_k,
        min_p: float(f.min_p, base.min_p),
        seed: f.seed.map(|s| s as u64),
        max_tokens,
        stop,
        stop_token_ids: f.stop_token_ids.clone().unwrap_or_default(),
        ignore_eos: f.ignore_eos.unwrap_or(false),
        ..SamplingParams::default()
    };
    params
        .validate()
        .map_err(|e| ApiError::from(RequestError::Sampling(e)))?;
    let stream = f.stream.unwrap_or(false);
    let opts = f.stream_options.clone().unwrap_or_default();
    if f.stream_options.is_some() && !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "stream_options is only allowed with stream: true",
        ));
    }
    Ok(Sampling {
        params,
        n,
        stream,
        include_usage: opts.include_usage,
        continuous_usage: opts.continuous_usage_stats,
        sources: f.return_token_sources.unwrap_or(false),
    })
}

fn content_text(c: &Option<MessageContent>, i: usize) -> Result<String, ApiError> {
    match c {
        None => Ok(String::new()),
        Some(MessageContent::Text(t)) => Ok(t.clone()),
        Some(MessageContent::Parts(parts)) => {
            let mut out = String::new();
            for (j, p) in parts.iter().enumerate() {
                if p.kind != "text" {
                    return Err(ApiError::invalid(
                        format!("messages[{i}].content[{j}].type"),
                        format!(
                            "content part type `{}` is not supported (only text)",
                            p.kind
                        ),
                    ));
                }
                out.push_str(p.text.as_deref().unwrap_or(""));
            }
            Ok(out)
        }
    }
}

/// Checks a chat request and renders its prompt.
pub fn chat(req: ChatRequest, catalog: &Catalog, text: &TextSide) -> Result<Prepared, ApiError> {
    let target = catalog.resolve(&req.model)?;
    if req.messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    if req.sampling.max_tokens.is_some() && req.max_completion_tokens.is_some() {
        return Err(ApiError::invalid(
            "max_completion_tokens",
            "give max_tokens or max_completion_tokens, not both",
        ));
    }
    let Sampling {
        mut params,
        n,
        stream,
        include_usage,
        continuous_usage,
        sources,
    } = sampling(
        &req.sampling,
        req.max_completion_tokens.or(req.sampling.max_tokens),
        DEFAULT_CHAT_MAX_TOKENS,
        &catalog.defaults_for(target),
    )?;
    let logprobs = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(_)) => {
            return Err(ApiError::invalid(
                "top_logprobs",
                "top_logprobs needs logprobs: true",
            ))
        }
        (false, None) => None,
        (true, k) => {
            let k = k.unwrap_or(0);
            if k > MAX_TOP_LOGPROBS as u64 {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    format!("top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {k}"),
                ));
            }
            Some(k as usize)
        }
    };
    params.logprobs = logprobs;
    let mut messages = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            other => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!("role `{other}` is not supported (system, user, assistant)"),
                ))
            }
        };
        if role != "assistant" && m.content.is_none() {
            return Err(ApiError::invalid(
                format!("messages[{i}].content"),
                "content is required",
            ));
        }
        let mut msg = ChatMessage::new(role, content_text(&m.content, i)?);
        msg.reasoning_content = m.reasoning_content.clone();
        if let Some(name) = &m.name {
            msg.extra.insert("name".into(), Value::String(name.clone()));
        }
        messages.push(msg);
    }
    let kwargs: Map<String, Value> = req.chat_template_kwargs.clone().unwrap_or_default();
    if let Some(v) = kwargs.get("enable_thinking") {
        if !v.is_boolean() {
            return Err(ApiError::invalid(
                "chat_template_kwargs.enable_thinking",
                "enable_thinking must be a boolean",
            ));
        }
    }
    let prompt_text = text.render_chat(
        &messages,
        req.add_generation_prompt.unwrap_or(true),
        &kwargs,
    )?;
    let ids = text.encode(&prompt_text, false)?;
    Ok(Prepared {
        endpoint: Endpoint::Chat,
        model: req.model,
        target,
        prompts: vec![PromptInput {
            ids,
            text: Some(prompt_text),
        }],
        params,
        n,
        stream,
        include_usage,
        continuous_usage,
        logprobs,
        echo: false,
        sources,
    })
}

fn ids_of(raw: &[i64], i: usize, text: &TextSide) -> Result<Vec<u32>, ApiError> {
    let vocab = text.vocab_size().unwrap_or(u32::MAX as usize);
    raw.iter()
        .enumerate()
        .map(|(j, &t)| {
            if t < 0 || t as u64 >= vocab as u64 {
                Err(ApiError::invalid(
                    format!("prompt[{i}][{j}]"),
                    format!("token id {t} is outside the vocabulary of {vocab}"),
                ))
            } else {
                Ok(t as u32)
            }
        })
        .collect()
}

/// Checks a completions request and tokenizes its prompt(s).
pub fn completion(
    req: CompletionRequest,
    catalog: &Catalog,
    text: &TextSide,
) -> Result<Prepared, ApiError> {
    let target = catalog.resolve(&req.model)?;
    let Sampling {
        mut params,
        n,
        stream,
        include_usage,
        continuous_usage,
        sources,
    } = sampling(
        &req.sampling,
        req.sampling.max_tokens,
        DEFAULT_COMPLETION_MAX_TOKENS,
        &catalog.defaults_for(target),
    )?;
    let logprobs = match req.logprobs {
        None => None,
        Some(k) if k <= MAX_TOP_LOGPROBS as u64 => Some(k as usize),
        Some(k) => {
            return Err(ApiError::invalid(
                "logprobs",
                format!("logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {k}"),
            ))
        }
    };
    params.logprobs = logprobs;
    let echo = req.echo.unwrap_or(false);
    if echo && logprobs.is_some() {
        return Err(ApiError::Unsupported(vec!["echo with logprobs".into()]));
    }
    let text_prompt = |s: &str| -> Result<PromptInput, ApiError> {
        Ok(PromptInput {
            ids: text.encode(s, true)?,
            text: Some(s.to_string()),
        })
    };
    let id_prompt = |raw: &[i64], i: usize| -> Result<PromptInput, ApiError> {
        let ids = ids_of(raw, i, text)?;
        let text = if echo {
            Some(text.decode(&ids, false)?)
        } else {
            None
        };
        Ok(PromptInput { ids, text })
    };
    let prompts = match &req.prompt {
        PromptField::Text(s) => vec![text_prompt(s)?],
        PromptField::Texts(v) => v.iter().map(|s| text_prompt(s)).collect::<Result<_, _>>()?,
        PromptField::Ids(v) => vec![id_prompt(v, 0)?],
        PromptField::IdLists(v) => v
            .iter()
            .enumerate()
            .map(|(i, p)| id_prompt(p, i))
            .collect::<Result<_, _>>()?,
    };
    if prompts.is_empty() || prompts.len() > MAX_PROMPTS {
        return Err(ApiError::invalid(
            "prompt",
            format!("give between 1 and {MAX_PROMPTS} prompts"),
        ));
    }
    if let Some(i) = prompts.iter().position(|p| p.ids.is_empty()) {
        return Err(ApiError::invalid(
            "prompt",
            format!("prompt {i} is empty (no tokens)"),
        ));
    }
    Ok(Prepared {
        endpoint: Endpoint::Completions,
        model: req.model,
        target,
        prompts,
        params,
        n,
        stream,
        include_usage,
        continuous_usage,
        logprobs,
        echo,
        sources,
    })
}

#[cfg(test)]
mod tests;
