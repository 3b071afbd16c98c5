//! Sampling defaults of a served model, as vLLM applies them
//! (`--generation-config auto` plus `--override-generation-config`): the
//! model directory's `generation_config.json`, overridden by the engine
//! config's `generation_config:`. A request's own values always win; the
//! gateway fills only the fields a request leaves out (or sets to null).

use std::path::Path;

use protocol::sampling::SamplingParams;
use serde::Serialize;

use crate::error::ConfigError;

/// The file vLLM reads the model's defaults from.
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// Sampling defaults; `None` leaves the engine's own default (temperature 1,
/// top_p 1, top_k off, min_p 0).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct GenerationDefaults {
    /// Default `temperature`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Default `top_p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// Default `top_k`; 0 turns top-k off (vLLM's -1, which the config
    /// also accepts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    /// Default `min_p`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
}

/// `transformers.GenerationConfig`'s own defaults. vLLM reads the file's
/// `to_diff_dict()`, so a value equal to one of these is not a default.
const HF_DEFAULT_TEMPERATURE: f64 = 1.0;
const HF_DEFAULT_TOP_P: f64 = 1.0;
const HF_DEFAULT_TOP_K: i64 = 50;
const HF_DEFAULT_REPETITION_PENALTY: f64 = 1.0;

impl GenerationDefaults {
    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `self`, with every field `over` sets replacing it.
    pub fn overridden_by(self, over: Self) -> Self {
        Self {
            temperature: over.temperature.or(self.temperature),
            top_p: over.top_p.or(self.top_p),
            top_k: over.top_k.or(self.top_k),
            min_p: over.min_p.or(self.min_p),
        }
    }

    /// The engine parameters these defaults give (everything else at
    /// [`SamplingParams::default`]).
    pub fn params(&self) -> SamplingParams {
        let d = SamplingParams::default();
        SamplingParams {
            temperature: self.temperature.unwrap_or(d.temperature),
            top_p: self.top_p.unwrap_or(d.top_p),
            top_k: self.top_k.unwrap_or(d.top_k),
            min_p: self.min_p.unwrap_or(d.min_p),
            ..d
        }
    }

    /// Checks the ranges with [`SamplingParams::validate`] (the one range
    /// check); the error names `{key}.{field}`.
    pub fn validate(&self, key: &str) -> Result<(), ConfigError> {
        self.params()
            .validate()
            .map_err(|e| ConfigError::invalid(format!("{key}.{}", e.field), e.reason))
    }

    /// Reads a `top_k` as vLLM spells it: -1 (or 0) off, k > 0 keeps k;
    /// the error names `key`.
    pub fn top_k_from(value: i64, key: &str) -> Result<usize, ConfigError> {
        match value {
            -1 | 0 => Ok(0),
            k if k > 0 => Ok(k as usize),
            k => Err(ConfigError::invalid(
                key,
                format!("must be -1 (off), 0 (off) or positive, got {k}"),
            )),
        }
    }

    /// The sampling defaults of the model in `dir`, from its
    /// `generation_config.json` (none when the file is absent). As vLLM,
    /// only `temperature`, `top_p`, `top_k` and `min_p` count, and only
    /// where they differ from `transformers`' own defaults; values are
    /// range-checked, the error naming the file and the key.
    pub fn from_model_dir(dir: &Path) -> Result<Self, ConfigError> {
        let path = dir.join(GENERATION_CONFIG_FILE);
        if !path.is_file() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
            path: path.clone(),
            source,
        })?;
        Self::from_json_text(&text).map_err(|e| e.in_file(path))
    }

    /// [`Self::from_model_dir`] on the file's text.
    fn from_json_text(text: &str) -> Result<Self, ConfigError> {
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| ConfigError::invalid("(root)", format!("not JSON: {e}")))?;
        let Some(map) = value.as_object() else {
            return Err(ConfigError::invalid("(root)", "must be a JSON object"));
        };
        let number = |key: &str| -> Result<Option<f64>, ConfigError> {
            match map.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| ConfigError::invalid(key, format!("must be a number, got {v}"))),
            }
        };
        let unless = |v: Option<f64>, hf: f64| v.filter(|&x| x != hf);
        let top_k = match number("top_k")? {
            Some(k) if k.fract() != 0.0 => {
                return Err(ConfigError::invalid(
                    "top_k",
                    format!("must be an integer, got {k}"),
                ))
            }
            Some(k) if k as i64 != HF_DEFAULT_TOP_K => Some(Self::top_k_from(k as i64, "top_k")?),
            _ => None,
        };
        if let Some(p) = unless(number("repetition_penalty")?, HF_DEFAULT_REPETITION_PENALTY) {
            // The engine has no repetition penalty: say so rather than
            // silently sampling differently from vLLM.
            tracing::warn!(
                repetition_penalty = p,
                "generation_config.json sets repetition_penalty, which this engine does not apply"
            );
        }
        let defaults = Self {
            temperature: unless(number("temperature")?, HF_DEFAULT_TEMPERATURE).map(|x| x as f32),
            top_p: unless(number("top_p")?, HF_DEFAULT_TOP_P).map(|x| x as f32),
            top_k,
            min_p: number("min_p")?.map(|x| x as f32),
        };
        // Keys of the file are top-level: name them bare.
        defaults
            .params()
            .validate()
            .map_err(|e| ConfigError::invalid(e.field, e.reason))?;
        Ok(defaults)
    }
}

impl std::fmt::Display for GenerationDefaults {
    /// `temperature=0.2 top_p=0.9` (only the fields set; `none` when empty).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = self.temperature {
            parts.push(format!("temperature={t}"));
        }
        if let Some(p) = self.top_p {
            parts.push(format!("top_p={p}"));
        }
        if let Some(k) = self.top_k {
            parts.push(format!("top_k={k}"));
        }
        if let Some(m) = self.min_p {
            parts.push(format!("min_p={m}"));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_files_sampling_keys_as_vllm_does() {
        let d = GenerationDefaults::from_json_text(
            r#"{"bos_token_id": 1, "eos_token_id": 2, "temperature": 0.6, "top_p": 0.95,
                "top_k": 20, "min_p": 0.05, "do_sample": true}"#,
        )
        .unwrap();
        assert_eq!(
            d,
            GenerationDefaults {
                temperature: Some(0.6),
                top_p: Some(0.95),
                top_k: Some(20),
                min_p: Some(0.05),
            }
        );
        // transformers' own defaults are not model defaults (to_diff_dict).
        let d = GenerationDefaults::from_json_text(
            r#"{"temperature": 1.0, "top_p": 1.0, "top_k": 50, "repetition_penalty": 1.0}"#,
        )
        .unwrap();
        assert!(d.is_empty(), "{d:?}");
        // Token ids only (what `import-gguf` writes): no defaults.
        let d = GenerationDefaults::from_json_text(r#"{"bos_token_id": 1, "eos_token_id": 2}"#);
        assert!(d.unwrap().is_empty());
    }

    #[test]
    fn bad_files_name_the_key() {
        for (text, key) in [
            (r#"{"temperature": -1}"#, "temperature"),
            (r#"{"top_p": 0}"#, "top_p"),
            (r#"{"min_p": 1.5}"#, "min_p"),
            (r#"{"top_k": -2}"#, "top_k"),
            (r#"{"top_k": 2.5}"#, "top_k"),
            (r#"{"temperature": "hot"}"#, "temperature"),
        ] {
            let err = GenerationDefaults::from_json_text(text).unwrap_err();
            assert_eq!(err.key(), Some(key), "{text}: {err}");
        }
        let dir = tempfile::tempdir().unwrap();
        assert!(GenerationDefaults::from_model_dir(dir.path())
            .unwrap()
            .is_empty());
        std::fs::write(dir.path().join(GENERATION_CONFIG_FILE), "{\"top_p\": 2}").unwrap();
        let err = GenerationDefaults::from_model_dir(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(GENERATION_CONFIG_FILE) && msg.contains("top_p"),
            "{msg}"
        );
    }

    #[test]
    fn override_wins_field_by_field() {
        let file = GenerationDefaults {
            temperature: Some(0.6),
            top_k: Some(20),
            ..Default::default()
        };
        let over = GenerationDefaults {
            temperature: Some(0.2),
            top_p: Some(0.9),
            ..Default::default()
        };
        let d = file.overridden_by(over);
        assert_eq!(
            (d.temperature, d.top_p, d.top_k, d.min_p),
            (Some(0.2), Some(0.9), Some(20), None)
        );
        assert_eq!(d.to_string(), "temperature=0.2 top_p=0.9 top_k=20");
        assert_eq!(GenerationDefaults::default().to_string(), "none");
    }
}
