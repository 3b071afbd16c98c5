//! `GET /internal/text-side`: the files of the entry model's directory a
//! remote gateway reads (tokenizer, chat template, special tokens, sampling
//! defaults), served by a group's subservers so that the gateway needs no
//! copy of the weights' volume.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Path of the endpoint, on a subserver's admin port.
pub const TEXT_SIDE_PATH: &str = "/internal/text-side";

/// The file without which there is no text side.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Every file the endpoint serves when the directory has it: what the
/// gateway's tokenizer (`tokenizer.json`), chat template
/// (`tokenizer_config.json`, `chat_template.jinja`,
/// `special_tokens_map.json`) and sampling defaults
/// (`generation_config.json`) are read from.
pub const TEXT_SIDE_FILES: [&str; 5] = [
    TOKENIZER_FILE,
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
];

/// The answer: the entry model's name and the files present, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextSideBody {
    /// The entry model whose directory the files come from.
    pub model: String,
    /// File name (one of [`TEXT_SIDE_FILES`]) -> its text.
    pub files: BTreeMap<String, String>,
}

impl TextSideBody {
    /// Why the body cannot be used, if it cannot: a file outside
    /// [`TEXT_SIDE_FILES`] (a name the gateway would not know where to
    /// put), or no [`TOKENIZER_FILE`].
    pub fn check(&self) -> Result<(), String> {
        if let Some(odd) = self
            .files
            .keys()
            .find(|k| !TEXT_SIDE_FILES.contains(&k.as_str()))
        {
            return Err(format!(
                "unexpected file `{odd}` (expected only {})",
                TEXT_SIDE_FILES.join(", ")
            ));
        }
        if !self.files.contains_key(TOKENIZER_FILE) {
            return Err(format!("no {TOKENIZER_FILE} among the files"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(names: &[&str]) -> TextSideBody {
        TextSideBody {
            model: "m".into(),
            files: names
                .iter()
                .map(|n| (n.to_string(), "{}".to_string()))
                .collect(),
        }
    }

    #[test]
    fn only_known_names_and_a_tokenizer_pass() {
        assert_eq!(body(&TEXT_SIDE_FILES).check(), Ok(()));
        assert_eq!(body(&[TOKENIZER_FILE]).check(), Ok(()));
        let err = body(&["tokenizer_config.json"]).check().unwrap_err();
        assert!(err.contains("no tokenizer.json"), "{err}");
        let err = body(&[TOKENIZER_FILE, "../etc/passwd"])
            .check()
            .unwrap_err();
        assert!(err.contains("unexpected file `../etc/passwd`"), "{err}");
    }
}
