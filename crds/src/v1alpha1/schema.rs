//! Schemas that derive cannot express: open objects and name-safe strings.

use schemars::Schema;
use serde_json::json;

fn schema(value: serde_json::Value) -> Schema {
    // A literal JSON object is always a valid schema.
    Schema::try_from(value).expect("literal schema")
}

/// An object whose fields are kept as given (`x-kubernetes-preserve-unknown-fields`).
pub(crate) fn optional_open_object(_: &mut schemars::SchemaGenerator) -> Schema {
    schema(json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    }))
}

/// A lowercase DNS label short enough to prefix object names (`NAME-MODEL-k`).
pub(crate) fn short_name(_: &mut schemars::SchemaGenerator) -> Schema {
    schema(json!({
        "type": "string",
        "minLength": 1,
        "maxLength": 24,
        "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    }))
}

/// `nodePool.mps.daemon` as a plain string, so a spec that still says
/// `sidecar` meets the CEL rule's explanation rather than a bare enum error.
pub(crate) fn mps_daemon(_: &mut schemars::SchemaGenerator) -> Schema {
    schema(json!({
        "type": "string",
        "default": "devicePlugin",
    }))
}
