//! The subserver's small HTTP surface, for Prometheus and the operator:
//!
//! | method | path | answer |
//! |---|---|---|
//! | GET | `/metrics` | the registry in the Prometheus text format |
//! | GET | `/livez` | liveness, this process only: 200 `{"status":"ok"}`, or 503 with the reason |
//! | GET | `/health` | readiness (peers too): 200 `{"status":"ok"}`, or 503 `{"status":"unhealthy","reason":..}` |
//! | GET | `/admin/thresholds` | `{"delayed_batching_threshold": {model: [B at n=1, ...]}}` |
//! | PUT | `/admin/thresholds` | same body in; sets it, answers the new table (400 on bad input) |
//! | GET | `/admin/routing_threshold` | `{"routing_threshold": x}` (`null` when the policy has none) |
//! | PUT | `/admin/routing_threshold` | same body in: moves the policy's live knob (400 out of range) |
//! | GET | `/admin/state` | [`AdminApi::snapshot`] (queues per model, KV usage) |
//! | POST | `/internal/generate` | the client ingress of a remote gateway ([`ingress`]): NDJSON events |
//! | GET | `/internal/text-side` | the entry model's tokenizer files for a remote gateway ([`text_side`]) |
//!
//! `/admin/*` and `/internal/*` are guarded ([`access`]): a bearer
//! token when one is configured, else loopback clients only.
//!
//! Errors answer `{"error":{"message":..,"type":..}}` as the OpenAI API
//! does. The server runs on its own thread and tokio runtime, owned by
//! [`SubserverHttp`]; dropping the handle stops it.

pub mod access;
mod admin;
#[cfg(test)]
mod endpoint_tests;
mod error;
pub mod ingress;
mod reply;
mod routes;
mod server;
pub mod text_side;
mod thresholds;

pub use access::{AdminToken, ControlAccess};
pub use admin::{knob_value, set_knob, AdminApi, ThresholdTable};
pub use error::HttpError;
pub use ingress::Ingress;
pub use server::SubserverHttp;
pub use text_side::TextDir;
pub use thresholds::{parse_thresholds, thresholds_json, THRESHOLDS_KEY};
