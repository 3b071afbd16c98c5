//! OpenAI wire types: what clients send ([`request`]) and the objects the
//! gateway answers with ([`response`], with the routing extensions
//! `token_sources`, `usage.completion_tokens_by_model`, `usage.switches`).

pub mod request;
pub mod response;

pub use request::{ChatRequest, CompletionRequest, Endpoint};
