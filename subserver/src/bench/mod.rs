//! Runtime measurements that scripts depend on: the simulated-backend bench
//! (`tokenrouter sim-bench`) and the Std. Serving forwarder it compares against,
//! and the step counts of ME's direct route (`make bench-me`).

pub mod forwarder;
pub mod me_route;
pub mod options;
pub mod profile;
pub mod random_init;
pub mod random_model;
pub mod sim_bench;
pub mod stagger;
