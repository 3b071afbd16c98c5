//! `string_enum!` and its error live in `protocol`, so every crate's closed
//! name sets parse and report the same way.

pub(crate) use protocol::string_enum;
pub use protocol::ParseEnumError;
