//! The HTTP front door's settings (`gateway:`).

use std::path::PathBuf;

use super::string_enum::string_enum;

/// The `gateway:` block, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Address to bind.
    pub host: String,
    /// Port to bind (0 picks a free one).
    pub port: u16,
    /// File with one accepted API key per line; `None` disables auth.
    /// Resolved against the config file's directory.
    pub api_keys_file: Option<PathBuf>,
    /// Requests generating at once (> 0); more wait in the queue.
    pub max_inflight: usize,
    /// Requests waiting for a slot; beyond this the gateway answers 429.
    pub max_queue: usize,
    /// Largest accepted request body in bytes (> 0).
    pub max_body_bytes: usize,
    /// The model name clients send and see (`/v1/models`).
    pub served_model_name: String,
    /// Environment variable holding accepted API keys (comma or newline
    /// separated); combined with `api_keys_file`.
    pub api_keys_env: Option<String>,
    /// Milliseconds a graceful shutdown lets in-flight requests finish
    /// before cancelling them.
    pub drain_timeout_ms: u64,
    /// Milliseconds at the start of a drain in which requests are still
    /// served, each answer with `Connection: close`, so that clients leave
    /// their kept-alive connections before idle ones are closed; set it
    /// above the clients' idle keep-alive (httpx: 5 s). Part of
    /// `drain_timeout_ms`, and ended early once no connection is open.
    pub close_notice_ms: u64,
    /// `Retry-After` seconds sent with a 429.
    pub retry_after_s: u64,
    /// Milliseconds a request waits for a group while none is listed (the
    /// operator scaled to zero; the waiting request is the load it scales
    /// up from) before a 503; 0 answers 503 at once.
    pub group_wait_ms: u64,
    /// Remote groups (base URLs of entry subservers) for `tokenrouter gateway`.
    pub groups: Vec<String>,
    /// File listing remote groups, one base URL per line (a mounted
    /// ConfigMap); re-read when it changes.
    pub groups_file: Option<PathBuf>,
    /// Where a remote gateway reads the entry model's tokenizer, chat
    /// template and generation config from.
    pub text_side: TextSideSource,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".to_string(),
            port: 30000,
            api_keys_file: None,
            max_inflight: 64,
            max_queue: 256,
            max_body_bytes: 1 << 20,
            served_model_name: "default".to_string(),
            api_keys_env: None,
            drain_timeout_ms: 30_000,
            close_notice_ms: 6_000,
            retry_after_s: 1,
            group_wait_ms: 300_000,
            groups: Vec::new(),
            groups_file: None,
            text_side: TextSideSource::Local,
        }
    }
}

string_enum! {
    /// `gateway.text_side`: where the gateway gets the entry model's
    /// tokenizer, chat template and `generation_config.json`.
    pub enum TextSideSource as "gateway.text_side" {
        /// From the entry model's `path` on this machine (`make run`, a
        /// gateway that mounts the weights).
        Local => "local",
        /// From the first healthy group's entry subserver
        /// (`GET /internal/text-side`), before the gateway turns ready: a
        /// gateway pod needs no model volume.
        Backend => "backend",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngineConfig;

    fn text_side_of(gateway: &str) -> Result<TextSideSource, crate::ConfigError> {
        let yaml = format!(
            "model:\n  quick: {{path: q}}\n  reference: {{path: r}}\n\
             system: {{entry_model: quick}}\nscheduler_class: R2R\n{gateway}"
        );
        EngineConfig::from_yaml_str(&yaml, std::path::Path::new("/base"))
            .map(|c| c.gateway().text_side)
    }

    #[test]
    fn text_side_is_local_unless_the_config_says_backend() {
        assert_eq!(text_side_of("").unwrap(), TextSideSource::Local);
        assert_eq!(
            text_side_of("gateway: {text_side: backend}\n").unwrap(),
            TextSideSource::Backend
        );
        let err = text_side_of("gateway: {text_side: pvc}\n").unwrap_err();
        assert!(err.to_string().contains("local, backend"), "{err}");
    }
}
