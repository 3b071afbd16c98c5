//! Reading what a chat template needs from a Hugging Face tokenizer
//! directory: the template source and the special-token strings that
//! transformers passes to it (`tokenizer.special_tokens_map`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::TokenizerError;

/// The special-token attributes transformers exposes to templates
/// (`SPECIAL_TOKENS_ATTRIBUTES`), in its order.
const SPECIAL_TOKEN_KEYS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];
const ADDITIONAL_KEY: &str = "additional_special_tokens";

/// The template source and special tokens of one tokenizer directory.
#[derive(Debug, Clone)]
pub(crate) struct TemplateConfig {
    /// The Jinja source of the default chat template.
    pub template: String,
    /// `special_tokens_map`: each set special token as a string, plus
    /// `additional_special_tokens` as a list, unset ones omitted.
    pub special_tokens: Map<String, Value>,
}

fn read_json(path: &Path) -> Result<Map<String, Value>, TokenizerError> {
    let text = std::fs::read_to_string(path).map_err(|e| TokenizerError::io(path, e))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| TokenizerError::Config {
        path: path.to_path_buf(),
        field: "<root>".into(),
        reason: format!("not valid JSON: {e}"),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(TokenizerError::Config {
            path: path.to_path_buf(),
            field: "<root>".into(),
            reason: format!("expected a JSON object, found {}", json_kind(&other)),
        }),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A special token as transformers stores it: a string, an `AddedToken`
/// object (`{"content": ...}`), or null.
fn token_string(path: &Path, field: &str, v: &Value) -> Result<Option<String>, TokenizerError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(TokenizerError::Config {
                path: path.to_path_buf(),
                field: field.into(),
                reason: "an AddedToken object needs a string `content`".into(),
            }),
        },
        other => Err(TokenizerError::Config {
            path: path.to_path_buf(),
            field: field.into(),
            reason: format!(
                "expected a string or an AddedToken object, found {}",
                json_kind(other)
            ),
        }),
    }
}

fn token_list(path: &Path, v: &Value) -> Result<Vec<String>, TokenizerError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                token_string(path, &format!("{ADDITIONAL_KEY}[{i}]"), item).transpose()
            })
            .collect(),
        other => Err(TokenizerError::Config {
            path: path.to_path_buf(),
            field: ADDITIONAL_KEY.into(),
            reason: format!("expected an array, found {}", json_kind(other)),
        }),
    }
}

/// The default template: `chat_template.jinja` when present (transformers
/// gives it priority), else `chat_template` of `tokenizer_config.json`, a
/// string or a list of `{name, template}` of which `default` is used.
fn template_source(
    dir: &Path,
    config_path: &Path,
    config: &Map<String, Value>,
) -> Result<String, TokenizerError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja).map_err(|e| TokenizerError::io(jinja, e));
    }
    let no_template = |reason: String| TokenizerError::NoChatTemplate {
        path: dir.to_path_buf(),
        reason,
    };
    match config.get("chat_template") {
        None | Some(Value::Null) => Err(no_template(
            "tokenizer_config.json has no `chat_template` and there is no chat_template.jinja"
                .into(),
        )),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(items)) => {
            let mut names = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let field = format!("chat_template[{i}]");
                let bad = |reason: &str| TokenizerError::Config {
                    path: config_path.to_path_buf(),
                    field: field.clone(),
                    reason: reason.into(),
                };
                let obj = item
                    .as_object()
                    .ok_or_else(|| bad("expected an object {name, template}"))?;
                let name = obj
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("missing string `name`"))?;
                let template = obj
                    .get("template")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad("missing string `template`"))?;
                if name == "default" {
                    return Ok(template.to_string());
                }
                names.push(name.to_string());
            }
            Err(no_template(format!(
                "`chat_template` lists no `default` template (names: {})",
                names.join(", ")
            )))
        }
        Some(other) => Err(TokenizerError::Config {
            path: config_path.to_path_buf(),
            field: "chat_template".into(),
            reason: format!(
                "expected a string or a list of {{name, template}}, found {}",
                json_kind(other)
            ),
        }),
    }
}

/// Special tokens as transformers resolves them: `tokenizer_config.json`,
/// overridden by `special_tokens_map.json` only for legacy configs without
/// `added_tokens_decoder` (mirroring `from_pretrained`).
fn special_tokens(
    dir: &Path,
    config_path: &Path,
    config: &Map<String, Value>,
) -> Result<Map<String, Value>, TokenizerError> {
    let mut singles: Vec<(&str, Option<String>)> = Vec::new();
    for key in SPECIAL_TOKEN_KEYS {
        let v = config
            .get(key)
            .map(|v| token_string(config_path, key, v))
            .transpose()?
            .flatten();
        singles.push((key, v));
    }
    let mut additional = config
        .get(ADDITIONAL_KEY)
        .map(|v| token_list(config_path, v))
        .transpose()?
        .unwrap_or_default();

    let map_path: PathBuf = dir.join("special_tokens_map.json");
    if !config.contains_key("added_tokens_decoder") && map_path.is_file() {
        let map = read_json(&map_path)?;
        for (key, slot) in singles.iter_mut() {
            if let Some(v) = map.get(*key) {
                *slot = token_string(&map_path, key, v)?;
            }
        }
        if let Some(v) = map.get(ADDITIONAL_KEY) {
            for tok in token_list(&map_path, v)? {
                if !additional.contains(&tok) {
                    additional.push(tok);
                }
            }
        }
    }

    // `special_tokens_map` keeps only truthy attributes.
    let mut out = Map::new();
    for (key, v) in singles {
        if let Some(s) = v.filter(|s| !s.is_empty()) {
            out.insert(key.to_string(), Value::String(s));
        }
    }
    if !additional.is_empty() {
        out.insert(
            ADDITIONAL_KEY.into(),
            Value::Array(additional.into_iter().map(Value::String).collect()),
        );
    }
    Ok(out)
}

impl TemplateConfig {
    /// Reads `<dir>/tokenizer_config.json` (and `chat_template.jinja`,
    /// `special_tokens_map.json` when present).
    pub(crate) fn from_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let config_path = dir.join("tokenizer_config.json");
        let config = read_json(&config_path)?;
        let template = template_source(dir, &config_path, &config)?;
        let special_tokens = special_tokens(dir, &config_path, &config)?;
        Ok(Self {
            template,
            special_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir_with(files: &[(&str, String)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn reads_string_template_and_added_token_objects() {
        let cfg = json!({
            "chat_template": "T",
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
            "eos_token": "</s>",
            "unk_token": null,
            "pad_token": "",
            "additional_special_tokens": ["<a>", {"content": "<b>"}],
            "added_tokens_decoder": {}
        });
        let dir = dir_with(&[("tokenizer_config.json", cfg.to_string())]);
        let c = TemplateConfig::from_dir(dir.path()).unwrap();
        assert_eq!(c.template, "T");
        assert_eq!(
            Value::Object(c.special_tokens),
            json!({"bos_token": "<s>", "eos_token": "</s>", "additional_special_tokens": ["<a>", "<b>"]})
        );
    }

    #[test]
    fn picks_default_from_a_template_list_and_prefers_jinja_file() {
        let cfg = json!({"chat_template": [{"name": "tool_use", "template": "A"}, {"name": "default", "template": "B"}]});
        let dir = dir_with(&[("tokenizer_config.json", cfg.to_string())]);
        assert_eq!(TemplateConfig::from_dir(dir.path()).unwrap().template, "B");
        std::fs::write(dir.path().join("chat_template.jinja"), "C").unwrap();
        assert_eq!(TemplateConfig::from_dir(dir.path()).unwrap().template, "C");
    }

    #[test]
    fn legacy_special_tokens_map_overrides_config() {
        let cfg = json!({"chat_template": "T", "eos_token": "</s>", "additional_special_tokens": ["<a>"]});
        let map = json!({"eos_token": {"content": "<|im_end|>"}, "bos_token": "<s>", "additional_special_tokens": ["<a>", "<c>"]});
        let dir = dir_with(&[
            ("tokenizer_config.json", cfg.to_string()),
            ("special_tokens_map.json", map.to_string()),
        ]);
        let c = TemplateConfig::from_dir(dir.path()).unwrap();
        assert_eq!(
            Value::Object(c.special_tokens),
            json!({"bos_token": "<s>", "eos_token": "<|im_end|>", "additional_special_tokens": ["<a>", "<c>"]})
        );
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let dir = dir_with(&[(
            "tokenizer_config.json",
            json!({"eos_token": "x"}).to_string(),
        )]);
        let err = TemplateConfig::from_dir(dir.path()).unwrap_err();
        assert_eq!(err.error_type(), "no_chat_template");

        let cfg = json!({"chat_template": [{"name": "tool_use", "template": "A"}]});
        let dir = dir_with(&[("tokenizer_config.json", cfg.to_string())]);
        let err = TemplateConfig::from_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("tool_use"), "{err}");

        let dir = dir_with(&[(
            "tokenizer_config.json",
            json!({"chat_template": "T", "eos_token": 3}).to_string(),
        )]);
        let err = TemplateConfig::from_dir(dir.path()).unwrap_err();
        assert_eq!(err.error_type(), "tokenizer_config");
        let msg = err.to_string();
        assert!(
            msg.contains("tokenizer_config.json") && msg.contains("`eos_token`"),
            "{msg}"
        );

        let dir = dir_with(&[("tokenizer_config.json", "[1]".into())]);
        let err = TemplateConfig::from_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("expected a JSON object"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let err = TemplateConfig::from_dir(dir.path()).unwrap_err();
        assert_eq!(err.error_type(), "io");
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
    }
}
