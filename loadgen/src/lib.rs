//! Measuring any OpenAI-compatible server from the outside: a closed-loop
//! load generator (`tokenrouter bench`), a math accuracy harness
//! (`tokenrouter eval`), and the one writer of `docs/results/` pages.
//!
//! This crate speaks only HTTP and JSON: it does not link libtorch, so it
//! drives our gateway, vLLM, SGLang or a llama.cpp server alike.

pub mod accuracy;
pub mod bench;
pub mod cli;
pub mod client;
pub mod compare;
pub mod conn;
pub mod dataset;
pub mod eval;
pub mod frontier;
pub mod machine;
pub mod page;
pub mod plot;
pub mod seeds;
pub mod stats;
pub mod verdict;
pub mod work_page;
