//! Batch engine for one model.
