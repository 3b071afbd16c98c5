//! Delayed-batching tuner.
pub mod cli;
mod chain;
pub mod error;
pub mod inputs;
pub mod metrics;
pub mod predict;
pub mod report;
pub mod search;
pub mod simulate;
pub mod slot_chain;
mod state;
mod stationary;

pub use error::TunerError;
pub use inputs::{StepLatency, TunerInputs};
pub use search::{best, best_by_simulation, best_table, best_with, Scored, SearchOptions, SearchStrategy, TuneResult};
pub use simulate::{simulate, GapDistribution, SimulationOptions, SimulationReport};
pub use slot_chain::{predict_slotwise, SlotwiseResult};
pub use predict::{predict, predict_with, ModelPrediction, Prediction, SolveOptions};
