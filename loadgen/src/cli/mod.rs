//! Arguments and drivers of `tokenrouter bench`, `eval` and `report`
//! (the binary only forwards to these).

pub mod bench;
pub mod eval;
pub mod report;

use clap::Args;

use crate::client::{Endpoint, RequestSpec};

/// Where and how to send requests (shared by `bench` and `eval`).
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Base URL of an OpenAI-compatible server.
    #[arg(long, default_value = "http://127.0.0.1:30000")]
    pub url: String,
    /// `model` field of each request (our gateway's default name is `default`).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Endpoint to call.
    #[arg(long, value_enum, default_value_t = Endpoint::Chat)]
    pub endpoint: Endpoint,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Ask the server to ignore EOS and write exactly max_tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Bearer token.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Name of the large model in `usage.completion_tokens_by_model`; its
    /// share of output tokens is reported when the server attributes tokens.
    #[arg(long)]
    pub large_model: Option<String>,
    /// Seed of the run: request i gets its own seed derived from it.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Hide the progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// This run is a query-level baseline: fail (after writing the output)
    /// when its large-model share is 0 or 1, since then it routed nothing
    /// and is single-model serving (needs --large-model).
    #[arg(long, requires = "large_model")]
    pub query_level: bool,
}

impl Target {
    /// The request settings.
    pub fn spec(&self) -> RequestSpec {
        RequestSpec {
            base_url: self.url.clone(),
            model: self.model.clone(),
            endpoint: self.endpoint,
            temperature: self.temperature,
            ignore_eos: self.ignore_eos,
            api_key: self.api_key.clone(),
        }
    }
}

/// With `--query-level`: the refusal of a share of 0 or 1.
fn check_query_level(target: &Target, share: Option<f64>) -> anyhow::Result<()> {
    if target.query_level {
        crate::frontier::check_query_level_share(share)
            .map_err(|e| anyhow::anyhow!("--query-level: {e}"))?;
    }
    Ok(())
}

/// A fresh tokio runtime for a client command.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
