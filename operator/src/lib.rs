//! `tokenrouter-operator`: reconciles `TokenRouterDeployment` resources into
//! serving StatefulSets, headless Services, the engine ConfigMap and a
//! gateway, autoscales the group count by concurrency, and retunes delayed
//! batching from live routing metrics (`tune`). No libtorch: the engine is reached over HTTP.
#![warn(missing_docs)]

pub mod apply;
pub mod apply_fault;
pub mod autoscale;
pub mod build;
pub mod cleanup;
pub mod cli;
pub mod context;
pub mod controller;
pub mod create_failures;
pub mod error;
pub mod events;
pub mod gpu_fit;
#[cfg(test)]
mod gpu_fit_tests;
pub mod groups;
pub mod metrics;
pub mod names;
pub mod pods;
pub mod probe;
pub mod refs;
pub mod retune;
pub mod roll;
pub mod status;
pub mod storage;
pub mod tune;
pub mod validate;

pub use context::{Context, Settings};
pub use controller::{error_policy, reconcile, run};
pub use error::{Error, Result};
