//! The `ModelRunner` seam.
