//! What the HTTP surface asks of the subserver.

use std::collections::BTreeMap;

/// Delayed-batching thresholds per model: `table[model][n - 1]` is the
/// number of runnable requests the model waits for when `n` requests are
/// active in the group.
pub type ThresholdTable = BTreeMap<String, Vec<usize>>;

/// The subserver's side of the admin endpoints. Called from the HTTP
/// thread, so implementations lock what they share with the scheduler and
/// must return quickly (never wait for a step to end).
pub trait AdminApi: Send + Sync {
    /// `Ok` when the subserver can serve; otherwise why not (503).
    fn healthy(&self) -> Result<(), String>;
    /// The thresholds in force, for every model of the subserver.
    fn thresholds(&self) -> ThresholdTable;
    /// Replaces the thresholds of the models in `t` (already checked to be
    /// known models with non-empty lists of positive values) and returns
    /// the whole table now in force; `Err` (answered as 400) when the
    /// subserver refuses the table.
    fn set_thresholds(&self, t: ThresholdTable) -> Result<ThresholdTable, String>;
    /// Queue lengths (running, waiting, pending) per model and KV usage, as
    /// JSON for `/admin/state`.
    fn snapshot(&self) -> serde_json::Value;
}
