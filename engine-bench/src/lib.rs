//! Benchmark drivers over the engine, the measurements that scripts and
//! examples depend on: the simulated-backend bench (`tokenrouter
//! sim-bench`, [`sim_bench`], its settings in [`options`] and arrival
//! schedule in [`stagger`]), random-weight models and their timing
//! ([`random_init`], [`random_model`]), decode-step profiles
//! (`make bench-engine`, [`profile`]) and the step counts of ME's direct
//! route (`make bench-me`, [`me_route`]).
//!
//! It sits above `subserver` and depends on it, never the other way:
//! `subserver`, `policies`, `model-files` and `gateway` must not depend on
//! this crate; only binaries, examples and tests use it. The Std. Serving
//! forwarder that `sim-bench` compares against is a serving path and stays
//! in the engine (`subserver::std_serving`).

pub mod me_route;
pub mod options;
pub mod profile;
pub mod random_init;
pub mod random_model;
pub mod sim_bench;
pub mod stagger;
