//! The OpenAI-compatible HTTP surface in front of routed model groups.
//!
//! One request, in order: [`auth`] checks the API key, [`openai`] parses the
//! body, [`validate`] turns it into token ids and sampling parameters (or a
//! 400 naming the field), [`pool`] picks the healthy group with the fewest
//! requests in flight, [`admission`] takes a slot there (or queues, or
//! answers 429), a [`backend::Backend`] runs it, and [`generate`] streams
//! ([`sse`]) or collects the answer. [`metrics`] counts everything,
//! [`shutdown`] drains on SIGTERM.
//!
//! Backends: `backend::inproc` (the group in this process, `tokenrouter
//! serve`; feature `inproc`, the only part that links libtorch) and
//! [`backend::remote`] (a group in other processes, reached at
//! its entry subserver's `/internal/generate`). [`app`] assembles a gateway
//! from an engine config; [`discovery`] keeps the remote group list in line
//! with the config, a watched file and DNS.

pub mod admission;
pub mod app;
pub mod auth;
pub mod backend;
pub mod cli;
pub mod conn;
pub mod discovery;
pub mod error;
pub mod fuzz_entry;
pub mod generate;
pub mod listen;
pub mod metrics;
pub mod openai;
pub mod pool;
pub mod routes;
pub mod server;
pub mod shutdown;
pub mod sse;
pub mod state;
pub mod text;
pub mod text_source;
pub mod validate;

pub use error::ApiError;
pub use server::GatewayServer;
pub use state::{Gateway, GatewayOptions};
