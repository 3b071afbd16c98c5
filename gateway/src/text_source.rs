//! `gateway.text_side: backend`: a remote gateway gets its entry model's
//! tokenizer, chat template and `generation_config.json` from a group's
//! subserver (`GET /internal/text-side`) instead of the model's directory,
//! so its pod needs no model volume. Until it has them, its text side is
//! pending: readiness fails while groups are listed and requests get a 503
//! that says why (see `routes`); the loader retries with backoff.

use std::sync::Arc;
use std::time::Duration;

use engine_config::GenerationDefaults;
use protocol::text_side::TextSideBody;
use tokio::task::JoinHandle;

use crate::state::{Gateway, Served};
use crate::text::TextSide;

/// First pause after a failed attempt; doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// Longest pause between attempts.
const MAX_RETRY: Duration = Duration::from_secs(10);
/// How often the loader looks for a healthy group while there is none.
const NO_GROUP_POLL: Duration = Duration::from_millis(200);

/// Why a fetched text side could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TextSourceError {
    /// The body lists files the gateway does not read, or no tokenizer.
    #[error("{0}")]
    Body(String),
    /// The files could not be staged for the loaders.
    #[error("cannot stage the files: {0}")]
    Io(#[from] std::io::Error),
    /// The tokenizer (or the chat template's config) does not load.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] textio::TokenizerError),
    /// `generation_config.json` is invalid.
    #[error("generation_config.json: {0}")]
    Defaults(#[from] engine_config::ConfigError),
}

/// What a group's files gave.
pub struct Learned {
    /// Tokenizer and chat template.
    pub text: TextSide,
    /// The entry model's sampling defaults, the config's
    /// `generation_config:` applied over its file.
    pub defaults: GenerationDefaults,
}

/// Loads `body` exactly as a local directory is loaded: the files go to a
/// private temporary directory that the same loaders read (and that is gone
/// when this returns); `over` is the config's `generation_config:`.
pub fn load(body: &TextSideBody, over: GenerationDefaults) -> Result<Learned, TextSourceError> {
    body.check().map_err(TextSourceError::Body)?;
    let dir = tempfile::Builder::new()
        .prefix("tokenrouter-text-side-")
        .tempdir()?;
    for (name, content) in &body.files {
        std::fs::write(dir.path().join(name), content)?;
    }
    let text = TextSide::from_dir(dir.path())?;
    let defaults = GenerationDefaults::from_model_dir(dir.path())?.overridden_by(over);
    Ok(Learned { text, defaults })
}

/// Fills `served` from its groups: tries every healthy group in order until
/// one's text side loads, then returns; pauses between rounds (backoff).
/// `over` is the config's `generation_config:`.
pub fn spawn(gw: Arc<Gateway>, over: GenerationDefaults) -> JoinHandle<()> {
    tokio::spawn(async move {
        let served = gw.primary();
        let mut pause = FIRST_RETRY;
        loop {
            match round(served, over).await {
                Round::Loaded => return,
                Round::NoGroup => tokio::time::sleep(NO_GROUP_POLL).await,
                Round::Failed => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_RETRY);
                }
            }
        }
    })
}

/// How one round of attempts ended.
enum Round {
    Loaded,
    NoGroup,
    Failed,
}

async fn round(served: &Served, over: GenerationDefaults) -> Round {
    let healthy: Vec<_> = served
        .pool
        .groups()
        .into_iter()
        .filter(|g| g.backend.healthy())
        .collect();
    if healthy.is_empty() {
        served.text.set_waiting("no group is healthy yet");
        return Round::NoGroup;
    }
    let mut failures = Vec::new();
    for g in healthy {
        let group = g.backend.id().to_string();
        let Some(fetch) = g.backend.text_side() else {
            failures.push(format!("{group}: this group cannot serve a text side"));
            continue;
        };
        let outcome = match fetch.await {
            Ok(body) => load(&body, over)
                .map(|l| (body, l))
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        match outcome {
            Ok((body, learned)) => {
                install(served, &group, &body, learned);
                return Round::Loaded;
            }
            Err(e) => {
                tracing::warn!(%group, error = %e, "cannot load the text side from this group; retrying");
                failures.push(format!("{group}: {e}"));
            }
        }
    }
    served.text.set_waiting(failures.join("; "));
    Round::Failed
}

/// Puts what a group gave in force and says what it was. The defaults go
/// first: the text side being loaded is what lets requests in.
fn install(served: &Served, group: &str, body: &TextSideBody, learned: Learned) {
    served.catalog.learned.set(learned.defaults);
    served.text.fill_from(&learned.text);
    tracing::info!(
        %group,
        model = %body.model,
        files = ?body.files.keys().collect::<Vec<_>>(),
        vocab = ?learned.text.vocab_size(),
        chat_template = learned.text.has_template(),
        defaults = %learned.defaults,
        "text side loaded from a group"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(dir: &std::path::Path) -> TextSideBody {
        let mut files = std::collections::BTreeMap::new();
        for name in protocol::text_side::TEXT_SIDE_FILES {
            if let Ok(text) = std::fs::read_to_string(dir.join(name)) {
                files.insert(name.to_string(), text);
            }
        }
        TextSideBody {
            model: "m".into(),
            files,
        }
    }

    #[test]
    fn a_body_loads_as_its_directory_does() {
        let dir = textio::test_assets::qwen3_tokenizer_dir();
        let local = TextSide::from_dir(&dir).unwrap();
        let over = GenerationDefaults {
            top_k: Some(5),
            ..Default::default()
        };
        let learned = load(&body_of(&dir), over).unwrap();
        let text = "<|im_start|>user\nhello<|im_end|>";
        assert_eq!(
            learned.text.encode(text, false).unwrap(),
            local.encode(text, false).unwrap()
        );
        assert!(learned.text.has_template());
        assert_eq!(
            learned.defaults, over,
            "no generation_config.json: the override alone"
        );
    }

    fn load_err(body: &TextSideBody) -> TextSourceError {
        match load(body, GenerationDefaults::default()) {
            Ok(_) => panic!("a bad body loaded"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_bad_body_says_what_is_wrong() {
        let dir = textio::test_assets::qwen3_tokenizer_dir();
        let mut body = body_of(&dir);
        body.files
            .insert("tokenizer.json".into(), "{not json".into());
        let err = load_err(&body);
        assert!(err.to_string().starts_with("tokenizer: "), "{err}");
        body.files.remove("tokenizer.json");
        let err = load_err(&body);
        assert!(err.to_string().contains("no tokenizer.json"), "{err}");
        let mut body = body_of(&dir);
        body.files.insert(
            "generation_config.json".into(),
            "{\"temperature\": -1}".into(),
        );
        let err = load_err(&body);
        assert!(
            err.to_string().starts_with("generation_config.json: "),
            "{err}"
        );
    }
}
