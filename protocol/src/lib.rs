//! The vocabulary TokenRouter's crates share: what the gateway, the
//! subservers, the tuner and the operator say to each other, and the names
//! they publish metrics under.
//!
//! This crate is a leaf: it depends on serde, bincode and thiserror only,
//! so the gateway's HTTP layer, the tuner and the operator can speak the
//! wire and metric vocabulary without linking libtorch.
//!
//! - [`ids`]: request and model ids.
//! - [`sampling`]: [`SamplingParams`](sampling::SamplingParams) and their
//!   one validation, token log-probabilities, finish reasons.
//! - [`client`]: the events a client gets for a request and the typed
//!   [`RequestError`](client::RequestError).
//! - [`peer`]: the messages between subservers and their TCP codec.
//! - [`wire`]: the NDJSON events a group's ingress streams to a gateway.
//! - [`text_side`]: the entry model's tokenizer files a subserver serves
//!   to a remote gateway.
//! - [`execution_mode`]: how a group's models overlap their steps.
//! - [`metrics`]: every metric name, with its type and labels.
//! - [`access`]: the bearer token of the subservers' control endpoints.

pub mod access;
pub mod client;
pub mod execution_mode;
pub mod ids;
pub mod metrics;
pub mod peer;
pub mod sampling;
mod string_enum;
pub mod text_side;
pub mod wire;

pub use execution_mode::ExecutionMode;
pub use string_enum::ParseEnumError;

/// serde, for the impls [`string_enum!`] writes in other crates.
#[doc(hidden)]
pub use serde as __serde;
