//! How the subservers of a group overlap their steps: the type lives in
//! `protocol`, which the operator and tuner share without linking libtorch.

pub use protocol::ExecutionMode;
