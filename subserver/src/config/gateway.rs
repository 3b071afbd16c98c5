//! The HTTP front door's settings (`gateway:`).

use std::path::PathBuf;

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
        }
    }
}
