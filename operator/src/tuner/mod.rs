//! Delayed-batching tuner (placeholder until the tuner lands).
pub mod cli;
