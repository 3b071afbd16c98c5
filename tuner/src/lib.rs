//! Delayed-batching tuner: picks the threshold B per model that maximizes throughput.
//!
//! # The model (issue #4)
//! A closed system of N active requests and M models, each model running its own server.
//! Time advances in slots of `delta` ms; a step of model m with batch b lasts
//! `K_m(b) = round(L_m(b) / delta)` slots (`L_m` constant as in the paper, or a measured
//! latency table). An idle model starts a step as soon as at least `B_m` requests wait for it
//! and takes them all. When a step of m ends, each of its requests independently moves to
//! model j with probability `P[m][j]` and earns `C[m][j]` output tokens. Throughput is the
//! stationary reward rate. All requests start waiting at the entry model (model 0).
//! A vector under which some reachable state has nothing running and nothing able to start
//! deadlocks: it is [`TunerError::Infeasible`], never a number.
//!
//! # State space and method
//! The slot-level state is, per model, `(waiting, batch, remaining slots)`; with
//! `delta = 0.1 ms` the remaining-slot counter alone takes up to 279 values. Nothing random
//! happens between two step completions, so [`predict`] works on the *embedded* chain observed
//! just after each completion event (after routing and new starts): from state s the next
//! event is `dt_s = min remaining` slots away, the ending steps route their requests
//! multinomially, and idle models at threshold start. Each state carries its sojourn `dt_s`
//! and the expected credit `R_s` of the steps ending at its event, and
//! `throughput = sum pi_s R_s / sum pi_s dt_s` (semi-Markov reward ratio). Only reachable
//! states are built (BFS from the start state, states packed in a `u128`); idle models carry
//! no phase. The state count is independent of `delta` once `delta` divides the latencies,
//! and so is every result (tested).
//!
//! The stationary distribution is computed on the closed classes (iterative Tarjan SCC; the
//! classes are weighted by their absorption probability from the start state) by Gauss-Seidel
//! sweeps, each preceded by aggregation-disaggregation corrections: one lumps states with
//! equal step phases (slow mode: how the models' steps line up) and, with two models, one
//! lumps states with equal request counts (slow mode: how requests split over models).
//! Convergence is declared on an L1 change below 1e-10 and checked by the residual
//! `|pi P - pi|_1 <= 1e-9`.
//!
//! [`predict_slotwise`] is the literal slot-by-slot chain (power iteration on the lazy chain),
//! used to validate the event-level solver on small cases; [`simulate`] is an independent
//! Monte-Carlo event simulation that also accepts empirical (non-geometric) gap
//! distributions. [`best`]/[`best_with`] search B* exhaustively or by an exact-per-vector
//! pattern search, and [`metrics`] turns subserver metrics into [`TunerInputs`].
#![warn(missing_docs)]

mod chain;
pub mod cli;
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
pub use predict::{
    predict, predict_with, ModelPrediction, Prediction, SolveOptions, DEFAULT_MAX_STATES,
};
pub use search::{
    best, best_by_simulation, best_table, best_with, Scored, SearchOptions, SearchStrategy,
    TuneResult,
};
pub use simulate::{simulate, GapDistribution, SimulationOptions, SimulationReport};
pub use slot_chain::{predict_slotwise, SlotwiseResult};
