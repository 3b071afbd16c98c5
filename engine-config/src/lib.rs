//! The engine configuration: one YAML file describing a routed group (its
//! models, the routing policy, delayed batching, transport and gateway).
//!
//! The file accepts the official TokenRouter layout unchanged (per model:
//! `model_path`, `port`, `tp_size`, `scheduler_class`, `scheduler_kwargs`,
//! `delayed_batching_threshold`; `system`), with Hugging Face ids resolved
//! from the local cache ([`hf_cache`]), and our top-level form and
//! additions beside it. Loading happens in three passes:
//! YAML syntax, shape (serde with `deny_unknown_fields`, so unknown keys are
//! reported with their path), then meaning (`load`), which resolves defaults
//! and cross-field rules into the typed [`EngineConfig`]. Every key is
//! documented in `docs/config.md`.
//!
//! This crate does not link libtorch (the gateway reads the same file);
//! the `tch` feature adds the conversions to `tch::Device` / `tch::Kind`
//! the subserver uses. The subserver re-exports it as `subserver::config`.

mod backend;
mod dtype_bytes;
mod dtype_choice;
mod engine_config;
mod env_expand;
mod error;
mod execution_mode;
mod gateway;
mod generation;
pub mod hf_cache;
mod latency;
mod load;
mod model;
mod ordered_map;
mod placement;
mod policy;
mod raw;
mod string_enum;
mod system;
mod threshold;
mod transport;

pub use backend::Backend;
pub use dtype_choice::{cpu_bf16_flags, DTypeSetting};
pub use engine_config::{EngineConfig, SimGroupConfig};
pub use error::{ConfigError, Location};
pub use execution_mode::ExecutionMode;
pub use gateway::{GatewayConfig, TextSideSource};
pub use generation::{GenerationDefaults, GENERATION_CONFIG_FILE};
pub use latency::{LatencyError, LatencyModel};
pub use load::{DEFAULT_CONFIG_YAML, EMBEDDED_GROUPS_YAML, FAST_CONFIG_YAML};
pub use model::{ModelSpec, SimModel, DEFAULT_SIM_VOCAB_SIZE};
pub use placement::{DType, DeviceSpec};
pub use policy::{ClassRole, PolicyKind, PolicyName, PolicySpec};
pub use string_enum::ParseEnumError;
pub use system::{KvBudget, SystemConfig};
pub use threshold::{ThresholdError, ThresholdTable};
pub use transport::{TcpTransport, TransportConfig, TransportKind};
