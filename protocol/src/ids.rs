//! Identifiers every crate uses for requests and models.

/// Index of a model in its group (0 = the entry model).
pub type ModelIdx = u16;

/// Request id, unique within a group.
pub type Rid = u64;
