//! `EngineConfig`: the validated configuration of one routed group. The
//! loaders that build it live in `load`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::backend::Backend;
use super::error::ConfigError;
use super::execution_mode::ExecutionMode;
use super::gateway::GatewayConfig;
use super::generation::GenerationDefaults;
use super::model::ModelSpec;
use super::placement::{DType, DeviceSpec};
use super::policy::PolicySpec;
use super::system::{KvBudget, SystemConfig};
use super::threshold::ThresholdTable;
use super::transport::TransportConfig;

/// Group-level sim settings (top-level `sim:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimGroupConfig {
    /// Seed of the sim backend's token generator.
    pub seed: u64,
}

/// A routed group: its models (in file order; the index of a model is its
/// position under `model:`), the entry model, the routing policy and the
/// runtime settings. Built only by the loaders, so its invariants hold:
/// at least one model, a valid entry index, one threshold list per model,
/// and one TCP address per model when the transport is TCP.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    pub(super) models: Vec<ModelSpec>,
    pub(super) entry: usize,
    pub(super) system: SystemConfig,
    pub(super) policy: PolicySpec,
    pub(super) thresholds: ThresholdTable,
    pub(super) backend: Backend,
    pub(super) sim: SimGroupConfig,
    pub(super) device: DeviceSpec,
    pub(super) dtype: DType,
    pub(super) execution_mode: ExecutionMode,
    pub(super) max_batch_wait_ms: f64,
    pub(super) fallback_on_peer_failure: bool,
    pub(super) target_large_share: Option<f64>,
    pub(super) transport: TransportConfig,
    pub(super) gateway: GatewayConfig,
    /// `generation_config:`, the override of every model's defaults.
    pub(super) generation_override: GenerationDefaults,
    /// Each model's `generation_config.json` defaults (index = model index).
    pub(super) model_generation: Vec<GenerationDefaults>,
    pub(super) base_dir: PathBuf,
    pub(super) source: Option<PathBuf>,
}

impl EngineConfig {
    /// Every model, in file order (index = model index).
    pub fn models(&self) -> &[ModelSpec] {
        &self.models
    }

    /// Model `index`.
    pub fn model(&self, index: usize) -> Option<&ModelSpec> {
        self.models.get(index)
    }

    /// The index of the model called `name`.
    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m.name == name)
    }

    /// Model names, in index order.
    pub fn model_names(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.name.as_str()).collect()
    }

    /// Index of the entry model (`system.entry_model`), which admits requests.
    pub fn entry_index(&self) -> usize {
        self.entry
    }

    /// The entry model.
    pub fn entry_model(&self) -> &ModelSpec {
        &self.models[self.entry]
    }

    /// Model `index`'s KV cache budget.
    pub fn kv_budget(&self, index: usize) -> Option<KvBudget> {
        self.models.get(index).map(|m| m.kv_budget)
    }

    /// The `system:` limits.
    pub fn system(&self) -> &SystemConfig {
        &self.system
    }

    /// Routing policy name and kwargs.
    pub fn policy(&self) -> &PolicySpec {
        &self.policy
    }

    /// Delayed-batching thresholds, one list per model.
    pub fn thresholds(&self) -> &ThresholdTable {
        &self.thresholds
    }

    /// Thresholds, for retuning in place (the table keeps its model count).
    pub fn thresholds_mut(&mut self) -> &mut ThresholdTable {
        &mut self.thresholds
    }

    /// The runner backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Group-level sim settings.
    pub fn sim(&self) -> SimGroupConfig {
        self.sim
    }

    /// The top-level device (each model may override it: see `ModelSpec`).
    pub fn device(&self) -> DeviceSpec {
        self.device
    }

    /// The top-level dtype (each model may override it: see `ModelSpec`).
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The execution mode.
    pub fn execution_mode(&self) -> ExecutionMode {
        self.execution_mode
    }

    /// Upper bound on any delayed-batching wait, in milliseconds.
    pub fn max_batch_wait_ms(&self) -> f64 {
        self.max_batch_wait_ms
    }

    /// `max_batch_wait_ms` as a duration.
    pub fn max_batch_wait(&self) -> Duration {
        Duration::from_secs_f64(self.max_batch_wait_ms / 1000.0)
    }

    /// Whether a request whose peer is unreachable continues on the home
    /// model instead of failing.
    pub fn fallback_on_peer_failure(&self) -> bool {
        self.fallback_on_peer_failure
    }

    /// The share of tokens the non-entry models should write, when a
    /// controller is asked to hold one; in (0, 1).
    pub fn target_large_share(&self) -> Option<f64> {
        self.target_large_share
    }

    /// How subservers reach each other.
    pub fn transport(&self) -> &TransportConfig {
        &self.transport
    }

    /// HTTP gateway settings.
    pub fn gateway(&self) -> &GatewayConfig {
        &self.gateway
    }

    /// The sampling defaults of the routed group (vLLM's generation
    /// config): the entry model's `generation_config.json`, overridden
    /// field by field by the config's `generation_config:`.
    pub fn generation_defaults(&self) -> GenerationDefaults {
        self.model_generation_defaults(self.entry)
    }

    /// The sampling defaults of model `index` served alone: its own
    /// `generation_config.json`, overridden by `generation_config:`.
    pub fn model_generation_defaults(&self, index: usize) -> GenerationDefaults {
        self.model_generation
            .get(index)
            .copied()
            .unwrap_or_default()
            .overridden_by(self.generation_override)
    }

    /// The config's own `generation_config:` (the override alone).
    pub fn generation_override(&self) -> GenerationDefaults {
        self.generation_override
    }

    /// The directory relative paths resolve against (absolute).
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    /// The file this config came from (`None` for text or the embedded default).
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }

    /// Turns CUDA graphs for every CUDA model on or off, whatever
    /// `system.cuda_graphs` says (`serve` / `subserver --cuda-graphs`).
    pub fn override_cuda_graphs(&mut self, on: bool) {
        self.system.cuda_graphs = on;
    }

    /// Gives every model a KV pool of exactly `tokens` tokens, replacing
    /// the file's budget (`tokenrouter serve --max-total-tokens`, SGLang's
    /// flag of that name): the way to run a GPU-sized config, such as the
    /// official layout's `mem_fraction_static: 0.85`, on a shared host.
    pub fn override_kv_tokens(&mut self, tokens: usize) -> Result<(), ConfigError> {
        if tokens < self.system.block_size {
            return Err(ConfigError::invalid(
                "max_total_tokens",
                format!(
                    "must hold at least one block of {} tokens (got {tokens})",
                    self.system.block_size
                ),
            ));
        }
        for m in &mut self.models {
            m.kv_budget = KvBudget::Tokens(tokens);
        }
        Ok(())
    }

    /// Resolves a path the way the file's own paths are resolved (for paths
    /// inside `scheduler_kwargs`, e.g. R2R's `router_path`).
    pub fn resolve_path(&self, path: impl AsRef<Path>) -> PathBuf {
        self.base_dir.join(path)
    }
}
