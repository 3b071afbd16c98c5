//! The file's shape, mirrored one to one for serde. Every struct denies
//! unknown keys, and every key is optional here: defaults and rules live in
//! `load`, where errors can name the key.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_yaml::Value;

use super::backend::Backend;
use super::dtype_choice::DTypeSetting;
use super::execution_mode::ExecutionMode;
use super::ordered_map::OrderedMap;
use super::placement::DeviceSpec;
use super::transport::TransportKind;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub model: Option<OrderedMap<RawModel>>,
    pub system: Option<RawSystem>,
    pub scheduler_class: Option<String>,
    pub scheduler_kwargs: Option<serde_json::Value>,
    pub delayed_batching_threshold: Option<Value>,
    pub tp_size: Option<usize>,
    pub backend: Option<Backend>,
    pub sim: Option<RawSimGroup>,
    pub device: Option<DeviceSpec>,
    pub dtype: Option<DTypeSetting>,
    pub execution_mode: Option<ExecutionMode>,
    pub max_batch_wait_ms: Option<f64>,
    pub fallback_on_peer_failure: Option<bool>,
    pub target_large_share: Option<f64>,
    pub transport: Option<RawTransport>,
    pub gateway: Option<RawGateway>,
    pub generation_config: Option<RawGeneration>,
}

/// `generation_config:` (vLLM's `--override-generation-config`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGeneration {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub repetition_penalty: Option<f64>,
}

/// One entry of `model:`: our keys and the official per-model ones.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub path: Option<String>,
    pub model_path: Option<String>,
    pub port: Option<u16>,
    pub tp_size: Option<usize>,
    pub scheduler_class: Option<String>,
    pub scheduler_kwargs: Option<serde_json::Value>,
    pub delayed_batching_threshold: Option<Value>,
    pub device: Option<DeviceSpec>,
    pub dtype: Option<DTypeSetting>,
    pub mem_fraction_static: Option<f64>,
    pub kv_cache_tokens: Option<usize>,
    pub sim: Option<RawSimModel>,
}

/// `model.<name>.sim`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSimModel {
    pub latency_ms: Option<RawLatency>,
    pub vocab_size: Option<usize>,
    pub logits: Option<bool>,
}

/// `model.<name>.sim.latency_ms`: the linear keys or `table`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLatency {
    pub base: Option<f64>,
    pub per_seq: Option<f64>,
    pub per_token: Option<f64>,
    pub per_context: Option<f64>,
    pub table: Option<Vec<(usize, f64)>>,
}

/// `system:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSystem {
    pub entry_model: Option<String>,
    pub mem_fraction_static: Option<f64>,
    pub kv_cache_tokens: Option<usize>,
    pub block_size: Option<usize>,
    pub max_batched_tokens: Option<usize>,
    pub max_batch_size: Option<usize>,
    pub enable_prefix_cache: Option<bool>,
    pub cuda_graphs: Option<bool>,
    pub threads: Option<usize>,
}

/// Top-level `sim:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSimGroup {
    pub seed: Option<u64>,
}

/// `transport:`, written either as a bare kind (`transport: inproc`) or as
/// a map.
#[derive(Debug, Default)]
pub(crate) struct RawTransport {
    pub kind: Option<TransportKind>,
    pub addresses: Option<OrderedMap<String>>,
    pub connect_timeout_ms: Option<u64>,
    pub peer_timeout_ms: Option<u64>,
}

/// The map form of `transport:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransportMap {
    kind: Option<TransportKind>,
    addresses: Option<OrderedMap<String>>,
    connect_timeout_ms: Option<u64>,
    peer_timeout_ms: Option<u64>,
}

impl<'de> Deserialize<'de> for RawTransport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawTransportVisitor)
    }
}

struct RawTransportVisitor;

impl<'de> Visitor<'de> for RawTransportVisitor {
    type Value = RawTransport;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`inproc`, `tcp`, or a map with `kind`")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RawTransport, E> {
        let kind = text.parse::<TransportKind>().map_err(E::custom)?;
        Ok(RawTransport {
            kind: Some(kind),
            ..RawTransport::default()
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawTransport, A::Error> {
        let m = RawTransportMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok(RawTransport {
            kind: m.kind,
            addresses: m.addresses,
            connect_timeout_ms: m.connect_timeout_ms,
            peer_timeout_ms: m.peer_timeout_ms,
        })
    }
}

/// `gateway:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGateway {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub api_keys_file: Option<String>,
    pub max_inflight: Option<usize>,
    pub max_queue: Option<usize>,
    pub max_body_bytes: Option<usize>,
    pub served_model_name: Option<String>,
    pub api_keys_env: Option<String>,
    pub drain_timeout_ms: Option<u64>,
    pub close_notice_ms: Option<u64>,
    pub group_wait_ms: Option<u64>,
    pub retry_after_s: Option<u64>,
    pub groups: Option<Vec<String>>,
    pub groups_file: Option<String>,
    pub text_side: Option<crate::gateway::TextSideSource>,
}

/// A short rendering of a YAML value for error messages.
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("`{n}`"),
        Value::String(s) => format!("\"{s}\""),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a map".to_string(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}
