//! The routed subserver runtime: one scheduler thread per model, the policy
//! hooks it calls, delayed batching, and the in-process group that wires the
//! models together.

pub mod batching;
pub mod client;
pub mod core;
pub mod cpu_share;
pub mod group;
pub mod inbox;
pub mod inproc;
pub mod member;
pub mod policy;
pub mod prompt_memo;
pub mod seq;
pub mod share_control;
pub mod shared;
pub mod stats;

#[cfg(test)]
mod cancel_tests;
#[cfg(test)]
mod signal_tests;
#[cfg(test)]
mod tests;
