//! `tokenrouter.io/v1alpha1`.

pub mod cel;
mod schema;
mod spec;
mod status;

pub use spec::*;
pub use status::*;
