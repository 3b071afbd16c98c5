//! `ChatTemplate`: renders a conversation into a prompt string, byte for byte
//! as transformers' `tokenizer.apply_chat_template(messages, tokenize=False,
//! add_generation_prompt=..., **kwargs)` does.
//!
//! Checked live against transformers by `tests/chat_template_hf.rs`. Known
//! gap: the `~` operator formats floats MiniJinja's way, so `'x' ~ 1e20`
//! differs from Jinja2 (`{{ 1e20 }}` and `|string` are right); no known
//! template does that.

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::value::{Serde, Value as JinjaValue};
use minijinja::Environment;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::template_env::{environment, render_error, TEMPLATE_NAME};
use super::tokenizer_config::TemplateConfig;
use super::TokenizerError;

/// One chat message as the template sees it (`message.role`,
/// `message.content`, ...). Extra fields (`tool_calls`, `name`,
/// `tool_call_id`, ...) pass through to the template untouched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`...
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant turn's reasoning, kept apart from `content` (Qwen3,
    /// DeepSeek-R1). Absent (not `null`) in the template when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Any other field, in the order given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    /// A message with only a role and a content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            reasoning_content: None,
            extra: Map::new(),
        }
    }
}

/// A compiled chat template plus the special tokens transformers passes to
/// it. Cheap to share across threads (`&self` rendering).
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    special_tokens: Map<String, Value>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_len", &self.source.len())
            .field("special_tokens", &self.special_tokens)
            .finish()
    }
}

impl ChatTemplate {
    /// Loads the default template and special tokens of a Hugging Face
    /// tokenizer directory (`tokenizer_config.json`, and
    /// `chat_template.jinja` / `special_tokens_map.json` when present).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let config = TemplateConfig::from_dir(dir.as_ref())?;
        tracing::debug!(dir = %dir.as_ref().display(), "chat template loaded");
        Self::new(config.template, config.special_tokens)
    }

    /// Compiles `source`. `special_tokens` is transformers'
    /// `special_tokens_map` (`bos_token`, `eos_token`, ...: strings;
    /// `additional_special_tokens`: a list), exposed to the template as
    /// variables.
    pub fn new(
        source: impl Into<String>,
        special_tokens: Map<String, Value>,
    ) -> Result<Self, TokenizerError> {
        let source = source.into();
        let env = environment(source.clone())?;
        Ok(Self {
            env,
            source,
            special_tokens,
        })
    }

    /// The Jinja source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The BOS token string, if the tokenizer has one.
    pub fn bos_token(&self) -> Option<&str> {
        self.special_tokens.get("bos_token").and_then(Value::as_str)
    }

    /// The EOS token string, if the tokenizer has one.
    pub fn eos_token(&self) -> Option<&str> {
        self.special_tokens.get("eos_token").and_then(Value::as_str)
    }

    /// Renders `messages`. The template sees `messages`,
    /// `add_generation_prompt`, `tools` and `documents` (none unless given in
    /// `kwargs`), the special tokens, and every entry of `kwargs` (e.g.
    /// `enable_thinking`), which override special tokens of the same name.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        kwargs: &Map<String, Value>,
    ) -> Result<String, TokenizerError> {
        let mut ctx: BTreeMap<String, JinjaValue> = BTreeMap::new();
        for (k, v) in &self.special_tokens {
            ctx.insert(k.clone(), JinjaValue::from(Serde(v)));
        }
        for (k, v) in kwargs {
            ctx.insert(k.clone(), JinjaValue::from(Serde(v)));
        }
        ctx.entry("tools".into()).or_insert(JinjaValue::from(()));
        ctx.entry("documents".into())
            .or_insert(JinjaValue::from(()));
        ctx.insert("messages".into(), JinjaValue::from(Serde(messages)));
        ctx.insert(
            "add_generation_prompt".into(),
            JinjaValue::from(add_generation_prompt),
        );

        let template = self.env.get_template(TEMPLATE_NAME).map_err(render_error)?;
        template.render(JinjaValue::from(ctx)).map_err(render_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_assets::qwen3_tokenizer_dir;
    use serde_json::json;

    fn kwargs(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn chat_message_round_trips_through_json_keeping_extra_fields() {
        let raw = json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"b": 1, "a": 2}}}]});
        let msg: ChatMessage = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(msg.reasoning_content, None);
        assert!(msg.extra.contains_key("tool_calls"));
        assert_eq!(serde_json::to_value(&msg).unwrap(), raw);
        // Key order inside extra fields is kept (tojson output depends on it).
        let text = serde_json::to_string(&msg).unwrap();
        assert!(
            text.find("\"b\"").unwrap() < text.find("\"a\"").unwrap(),
            "{text}"
        );
    }

    #[test]
    fn qwen3_template_renders_thinking_switch() {
        let t = ChatTemplate::from_dir(qwen3_tokenizer_dir()).unwrap();
        assert_eq!(t.eos_token(), Some("<|im_end|>"));
        assert_eq!(t.bos_token(), None);
        let msgs = [
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", "Hi"),
        ];
        let on = t.render(&msgs, true, &Map::new()).unwrap();
        assert_eq!(on, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        let off = t
            .render(&msgs, true, &kwargs(json!({"enable_thinking": false})))
            .unwrap();
        assert_eq!(off, format!("{on}<think>\n\n</think>\n\n"));
    }

    #[test]
    fn special_tokens_and_kwargs_reach_the_template() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.reasoning_content is defined %}({{ m.reasoning_content }}){% endif %};{% endfor %}{{ tools }}{{ extra }}{{ eos_token }}",
            kwargs(json!({"bos_token": "<s>", "eos_token": "</s>"})),
        )
        .unwrap();
        let mut a = ChatMessage::new("assistant", "x");
        a.reasoning_content = Some("r".into());
        let out = t
            .render(
                &[ChatMessage::new("user", "u"), a],
                false,
                &kwargs(json!({"extra": 7, "eos_token": "E"})),
            )
            .unwrap();
        assert_eq!(out, "<s>user:u;assistant:x(r);None7E");
    }

    #[test]
    fn raise_exception_in_a_template_is_a_typed_error() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}ok",
            Map::new(),
        )
        .unwrap();
        assert_eq!(
            t.render(&[ChatMessage::new("user", "u")], false, &Map::new())
                .unwrap(),
            "ok"
        );
        let err = t
            .render(&[ChatMessage::new("system", "s")], false, &Map::new())
            .unwrap_err();
        assert!(
            matches!(&err, TokenizerError::TemplateRaised(m) if m == "first message must be from the user"),
            "{err}"
        );
    }
}
