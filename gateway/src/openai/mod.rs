//! OpenAI wire types: what clients send ([`request`]). Responses are
//! built in [`crate::generate`] (with the routing extensions
//! `token_sources`, `usage.completion_tokens_by_model`, `usage.switches`).

pub mod request;

pub use request::{ChatRequest, CompletionRequest, Endpoint};
