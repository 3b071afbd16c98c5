//! `GET /internal/text-side`: the entry model's tokenizer files
//! ([`TEXT_SIDE_FILES`], those present) as one JSON body
//! ([`TextSideBody`]), so that a remote gateway reads its tokenizer, chat
//! template and sampling defaults from a group instead of mounting the
//! weights' volume.

use std::path::PathBuf;

use warp::http::StatusCode;
use warp::reply::Response;
use warp::Reply;

use super::reply;
use crate::config::EngineConfig;

pub use protocol::text_side::{TextSideBody, TEXT_SIDE_FILES, TEXT_SIDE_PATH, TOKENIZER_FILE};

/// Where the text side is read from: the entry model and its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextDir {
    /// The entry model's name.
    pub model: String,
    /// Its Hugging Face directory.
    pub dir: PathBuf,
}

impl TextDir {
    /// The entry model of `cfg`, when it has a directory (a simulated
    /// model may have none).
    pub fn entry_of(cfg: &EngineConfig) -> Option<Self> {
        let entry = cfg.entry_model();
        entry.path.as_ref().map(|dir| Self {
            model: entry.name.clone(),
            dir: dir.clone(),
        })
    }
}

/// Why the text side cannot be served: the HTTP status and the message.
type Refusal = (StatusCode, String);

/// Reads the files of `text` that exist; [`TOKENIZER_FILE`] must.
pub fn read(text: &TextDir) -> Result<TextSideBody, Refusal> {
    let mut files = std::collections::BTreeMap::new();
    for name in TEXT_SIDE_FILES {
        let path = text.dir.join(name);
        if !path.is_file() {
            continue;
        }
        let content = std::fs::read_to_string(&path).map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        files.insert(name.to_string(), content);
    }
    if !files.contains_key(TOKENIZER_FILE) {
        return Err((
            StatusCode::NOT_FOUND,
            format!(
                "model `{}` has no {TOKENIZER_FILE} in {}",
                text.model,
                text.dir.display()
            ),
        ));
    }
    Ok(TextSideBody {
        model: text.model.clone(),
        files,
    })
}

/// The endpoint's answer. The reads block this HTTP thread for the few
/// milliseconds a tokenizer file takes; a gateway asks once, at its start.
pub(super) fn answer(text: Option<&TextDir>) -> Response {
    let Some(text) = text else {
        return reply::error(
            StatusCode::NOT_FOUND,
            "this subserver's entry model has no directory (a simulated model): \
             no tokenizer to serve; give the gateway `gateway.text_side: local`",
        );
    };
    match read(text) {
        Ok(body) => {
            tracing::info!(
                model = %body.model,
                files = ?body.files.keys().collect::<Vec<_>>(),
                "GET {TEXT_SIDE_PATH}"
            );
            warp::reply::with_status(warp::reply::json(&body), StatusCode::OK).into_response()
        }
        Err((status, message)) => {
            tracing::warn!(%message, "GET {TEXT_SIDE_PATH} refused");
            reply::error(status, &message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_dir(files: &[(&str, &str)]) -> (tempfile::TempDir, TextDir) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let t = TextDir {
            model: "small".into(),
            dir: dir.path().to_path_buf(),
        };
        (dir, t)
    }

    #[test]
    fn serves_the_files_present_and_nothing_else() {
        let (_d, t) = text_dir(&[
            ("tokenizer.json", "{\"t\": 1}"),
            ("generation_config.json", "{}"),
            ("config.json", "{}"),
            ("model.safetensors", "weights"),
        ]);
        let body = read(&t).unwrap();
        assert_eq!(body.model, "small");
        assert_eq!(
            body.files.keys().collect::<Vec<_>>(),
            ["generation_config.json", "tokenizer.json"]
        );
        assert_eq!(body.files["tokenizer.json"], "{\"t\": 1}");
        assert_eq!(body.check(), Ok(()));
    }

    #[test]
    fn no_tokenizer_or_no_directory_is_a_404_that_says_so() {
        let (_d, t) = text_dir(&[("tokenizer_config.json", "{}")]);
        let (status, message) = read(&t).unwrap_err();
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            message.contains("model `small` has no tokenizer.json"),
            "{message}"
        );
        assert_eq!(answer(Some(&t)).status(), StatusCode::NOT_FOUND);
        assert_eq!(answer(None).status(), StatusCode::NOT_FOUND);
    }
}
