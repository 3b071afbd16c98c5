//! Runtime measurements that scripts depend on: the simulated-backend bench
//! (`tokenrouter sim-bench`) and the Std. Serving forwarder it compares against.

pub mod forwarder;
pub mod profile;
pub mod random_init;
pub mod random_model;
pub mod sim_bench;
