//! The OpenAI-compatible HTTP surface in front of a routed model group.
