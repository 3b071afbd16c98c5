//! Group-wide engine limits (`system:`): KV cache size, batching budgets.

/// How much memory a model's KV cache gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KvBudget {
    /// This fraction (0, 1] of the device's memory (`mem_fraction_static`):
    /// on CUDA planned with the weights, on the CPU of the process's cgroup
    /// memory limit (the host's available memory without one).
    Fraction(f64),
    /// Exactly this many tokens (`kv_cache_tokens`).
    Tokens(usize),
}

/// Default `mem_fraction_static` on the CPU: the host also runs everything else.
pub const DEFAULT_MEM_FRACTION_CPU: f64 = 0.2;
/// Default `mem_fraction_static` on CUDA (SGLang's usual setting).
pub const DEFAULT_MEM_FRACTION_CUDA: f64 = 0.85;

/// The `system:` block, validated. The KV budget is resolved per model (its
/// default depends on the model's device): see `ModelSpec::kv_budget`.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemConfig {
    /// Tokens per KV block (> 0).
    pub block_size: usize,
    /// Chunked-prefill budget: new tokens per step (> 0).
    pub max_batched_tokens: usize,
    /// Sequences per step (> 0).
    pub max_batch_size: usize,
    /// Reuse KV across requests sharing a prefix.
    pub enable_prefix_cache: bool,
    /// libtorch intra-op threads (`None`: libtorch's default).
    pub threads: Option<usize>,
    /// Capture CUDA models' decode steps as CUDA graphs (`system.cuda_graphs`,
    /// `--cuda-graphs on`); a model on the CPU with graphs on is refused.
    pub cuda_graphs: bool,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            block_size: 16,
            max_batched_tokens: 2048,
            max_batch_size: 256,
            enable_prefix_cache: true,
            threads: None,
            cuda_graphs: false,
        }
    }
}
