//! A Hugging Face model directory: which files it holds and what they say
//! beyond `config.json` (EOS ids from `generation_config.json`).

use std::path::{Path, PathBuf};

use crate::error::EngineError;
use model_files::hf_config::{ModelConfig, TokenIds};

/// Where a model directory's weights are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WeightSource {
    /// safetensors files (one, or the shards of an index).
    Safetensors(Vec<PathBuf>),
    /// A GGUF (`model.gguf`, as `import-gguf --link` writes it), read and
    /// dequantized at load.
    Gguf(PathBuf),
}

/// The files of one model directory.
#[derive(Debug, Clone)]
pub struct ModelDir {
    /// The directory.
    pub path: PathBuf,
    /// Parsed `config.json`.
    pub config: ModelConfig,
}

impl ModelDir {
    /// Opens a directory and parses its `config.json`.
    pub fn open(path: &Path) -> Result<Self, EngineError> {
        if !path.is_dir() {
            return Err(EngineError::Load(model_files::LoadError::InvalidModel {
                path: path.to_path_buf(),
                reason: "not a directory".into(),
            }));
        }
        let config = ModelConfig::from_file(&path.join("config.json"))?;
        Ok(Self {
            path: path.to_path_buf(),
            config,
        })
    }

    /// The weights: safetensors when the directory has any (see
    /// [`Self::weight_files`]), else its `model.gguf`.
    pub fn weight_source(&self) -> Result<WeightSource, EngineError> {
        let gguf = self.path.join(model_files::gguf::LINKED_GGUF);
        let has_safetensors = self.path.join("model.safetensors.index.json").exists()
            || self.path.join("model.safetensors").exists();
        if !has_safetensors && gguf.exists() {
            return Ok(WeightSource::Gguf(gguf));
        }
        self.weight_files().map(WeightSource::Safetensors)
    }

    /// The safetensors files: the shards named by `model.safetensors.index.json`,
    /// else `model.safetensors`.
    pub fn weight_files(&self) -> Result<Vec<PathBuf>, EngineError> {
        let index = self.path.join("model.safetensors.index.json");
        if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(|e| EngineError::io(&index, e))?;
            let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                EngineError::Load(model_files::LoadError::InvalidModel {
                    path: index.clone(),
                    reason: e.to_string(),
                })
            })?;
            let map = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| {
                    EngineError::Load(model_files::LoadError::InvalidModel {
                        path: index.clone(),
                        reason: "no `weight_map`".into(),
                    })
                })?;
            let mut files: Vec<PathBuf> = Vec::new();
            for file in map.values().filter_map(|v| v.as_str()) {
                let p = self.path.join(file);
                if !files.contains(&p) {
                    files.push(p);
                }
            }
            files.sort();
            return Ok(files);
        }
        let single = self.path.join("model.safetensors");
        if single.exists() {
            Ok(vec![single])
        } else {
            Err(EngineError::Load(model_files::LoadError::InvalidModel {
                path: self.path.clone(),
                reason: "no model.safetensors, model.safetensors.index.json or model.gguf".into(),
            }))
        }
    }

    /// EOS ids: `generation_config.json`'s when present, merged with config.json's.
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut ids = self.config.eos_ids();
        let gen = self.path.join("generation_config.json");
        if let Ok(text) = std::fs::read_to_string(gen) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                if let Some(eos) = v.get("eos_token_id") {
                    if let Ok(more) = serde_json::from_value::<TokenIds>(eos.clone()) {
                        for id in more.to_vec() {
                            if !ids.contains(&id) {
                                ids.push(id);
                            }
                        }
                    }
                }
            }
        }
        ids
    }
}
