//! Argument types and thin drivers for each subcommand.

pub mod assets;
pub mod gateway;
pub mod generate;
pub mod listen;
pub mod router;
pub mod serve;
pub mod sim_bench;
pub mod std_serving;
pub mod subserver;
