//! Per-request sampling parameters and their validation live in
//! `protocol` (the gateway validates with the same code); re-exported here.

pub use protocol::sampling::{ParamError, SamplingParams, MAX_TEMPERATURE, MAX_TOP_LOGPROBS};
