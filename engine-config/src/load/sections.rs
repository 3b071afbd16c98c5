//! The group-wide sections: `system`, `transport`, `gateway` and
//! `generation_config`.

use std::path::Path;

use super::{positive, resolve_path, Env};
use crate::env_expand::expand_env;
use crate::error::ConfigError;
use crate::gateway::GatewayConfig;
use crate::generation::GenerationDefaults;
use crate::raw::{RawGateway, RawGeneration, RawSystem, RawTransport};
use crate::system::KvBudget;
use crate::system::SystemConfig;
use crate::transport::{
    check_address, TcpTransport, TransportConfig, TransportKind, DEFAULT_CONNECT_TIMEOUT_MS,
    DEFAULT_PEER_TIMEOUT_MS,
};

/// The `system:` block, and the KV budget it sets explicitly (if any).
pub(super) fn build_system(
    raw: &RawSystem,
) -> Result<(SystemConfig, Option<KvBudget>), ConfigError> {
    let defaults = SystemConfig::default();
    let system = SystemConfig {
        block_size: positive(raw.block_size, defaults.block_size, "system.block_size")?,
        max_batched_tokens: positive(
            raw.max_batched_tokens,
            defaults.max_batched_tokens,
            "system.max_batched_tokens",
        )?,
        max_batch_size: positive(
            raw.max_batch_size,
            defaults.max_batch_size,
            "system.max_batch_size",
        )?,
        enable_prefix_cache: raw
            .enable_prefix_cache
            .unwrap_or(defaults.enable_prefix_cache),
        cuda_graphs: raw.cuda_graphs.unwrap_or(defaults.cuda_graphs),
        threads: match raw.threads {
            Some(0) => {
                return Err(ConfigError::invalid(
                    "system.threads",
                    "must be > 0 (got 0)",
                ))
            }
            t => t,
        },
    };
    let kv_budget = kv_budget(
        raw.mem_fraction_static,
        raw.kv_cache_tokens,
        system.block_size,
        "system",
    )?;
    Ok((system, kv_budget))
}

/// The KV budget that `{prefix}.mem_fraction_static` or
/// `{prefix}.kv_cache_tokens` sets (at most one; `None`: neither).
pub(super) fn kv_budget(
    fraction: Option<f64>,
    tokens: Option<usize>,
    block_size: usize,
    prefix: &str,
) -> Result<Option<KvBudget>, ConfigError> {
    match (fraction, tokens) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            format!("{prefix}.kv_cache_tokens"),
            "`mem_fraction_static` and `kv_cache_tokens` are mutually exclusive (set one)",
        )),
        (Some(f), None) if f > 0.0 && f <= 1.0 => Ok(Some(KvBudget::Fraction(f))),
        (Some(f), None) => Err(ConfigError::invalid(
            format!("{prefix}.mem_fraction_static"),
            format!("must be in (0, 1] (got {f})"),
        )),
        (None, Some(t)) if t >= block_size => Ok(Some(KvBudget::Tokens(t))),
        (None, Some(t)) => Err(ConfigError::invalid(
            format!("{prefix}.kv_cache_tokens"),
            format!("must hold at least one block of {block_size} tokens (got {t})"),
        )),
        (None, None) => Ok(None),
    }
}

pub(super) fn build_transport(
    raw: Option<RawTransport>,
    names: &[String],
    env: Env,
) -> Result<TransportConfig, ConfigError> {
    let Some(raw) = raw else {
        return Ok(TransportConfig::InProc);
    };
    let kind = raw
        .kind
        .ok_or_else(|| ConfigError::invalid("transport.kind", "required (inproc or tcp)"))?;
    match kind {
        TransportKind::InProc => {
            let tcp_only = [
                ("addresses", raw.addresses.is_some()),
                ("connect_timeout_ms", raw.connect_timeout_ms.is_some()),
                ("peer_timeout_ms", raw.peer_timeout_ms.is_some()),
            ];
            if let Some((field, _)) = tcp_only.iter().find(|(_, given)| *given) {
                return Err(ConfigError::invalid(
                    format!("transport.{field}"),
                    "only applies to kind tcp (kind is inproc)",
                ));
            }
            Ok(TransportConfig::InProc)
        }
        TransportKind::Tcp => {
            let given = raw.addresses.ok_or_else(|| {
                ConfigError::invalid(
                    "transport.addresses",
                    format!(
                        "required for kind tcp: one host:port per model ({})",
                        names.join(", ")
                    ),
                )
            })?;
            let mut addresses: Vec<Option<String>> = vec![None; names.len()];
            for (name, address) in given.0 {
                let key = format!("transport.addresses.{name}");
                let index = names.iter().position(|n| *n == name).ok_or_else(|| {
                    ConfigError::invalid(
                        &key,
                        format!("\"{name}\" is not a model (models: {})", names.join(", ")),
                    )
                })?;
                // `${VAR}` lets one file serve every group of a StatefulSet
                // (e.g. the pod's ordinal in a peer's DNS name).
                let address =
                    expand_env(&address, env).map_err(|m| ConfigError::invalid(&key, m))?;
                check_address(&address).map_err(|m| ConfigError::invalid(&key, m))?;
                if let Some(other) = addresses
                    .iter()
                    .position(|a| a.as_deref() == Some(&address))
                {
                    return Err(ConfigError::invalid(
                        &key,
                        format!(
                            "\"{address}\" is also the address of model \"{}\"",
                            names[other]
                        ),
                    ));
                }
                addresses[index] = Some(address);
            }
            let missing: Vec<&str> = names
                .iter()
                .zip(&addresses)
                .filter(|(_, a)| a.is_none())
                .map(|(n, _)| n.as_str())
                .collect();
            if !missing.is_empty() {
                return Err(ConfigError::invalid(
                    "transport.addresses",
                    format!("missing an address for model(s): {}", missing.join(", ")),
                ));
            }
            let timeout =
                |value: Option<u64>, default: u64, key: &str| match value.unwrap_or(default) {
                    0 => Err(ConfigError::invalid(key, "must be > 0 (got 0)")),
                    v => Ok(v),
                };
            Ok(TransportConfig::Tcp(TcpTransport {
                addresses: addresses.into_iter().flatten().collect(),
                connect_timeout_ms: timeout(
                    raw.connect_timeout_ms,
                    DEFAULT_CONNECT_TIMEOUT_MS,
                    "transport.connect_timeout_ms",
                )?,
                peer_timeout_ms: timeout(
                    raw.peer_timeout_ms,
                    DEFAULT_PEER_TIMEOUT_MS,
                    "transport.peer_timeout_ms",
                )?,
            }))
        }
    }
}

/// `gateway:`; without `gateway.port` the entry model's official `port`
/// (where the official server listens) is the gateway's port.
pub(super) fn build_gateway(
    raw: RawGateway,
    entry_port: Option<u16>,
    base_dir: &Path,
    env: Env,
) -> Result<GatewayConfig, ConfigError> {
    let defaults = GatewayConfig::default();
    let non_empty = |value: Option<String>, default: String, key: &str| {
        let value = value.unwrap_or(default);
        if value.trim().is_empty() {
            Err(ConfigError::invalid(key, "must not be empty"))
        } else {
            Ok(value)
        }
    };
    Ok(GatewayConfig {
        host: non_empty(raw.host, defaults.host, "gateway.host")?,
        port: raw.port.or(entry_port).unwrap_or(defaults.port),
        api_keys_file: raw
            .api_keys_file
            .map(|p| resolve_path(&p, base_dir, env, "gateway.api_keys_file"))
            .transpose()?,
        max_inflight: positive(
            raw.max_inflight,
            defaults.max_inflight,
            "gateway.max_inflight",
        )?,
        max_queue: raw.max_queue.unwrap_or(defaults.max_queue),
        max_body_bytes: positive(
            raw.max_body_bytes,
            defaults.max_body_bytes,
            "gateway.max_body_bytes",
        )?,
        served_model_name: non_empty(
            raw.served_model_name,
            defaults.served_model_name,
            "gateway.served_model_name",
        )?,
        api_keys_env: raw
            .api_keys_env
            .map(|v| non_empty(Some(v), String::new(), "gateway.api_keys_env"))
            .transpose()?,
        drain_timeout_ms: raw.drain_timeout_ms.unwrap_or(defaults.drain_timeout_ms),
        close_notice_ms: raw.close_notice_ms.unwrap_or(defaults.close_notice_ms),
        retry_after_s: raw.retry_after_s.unwrap_or(defaults.retry_after_s),
        group_wait_ms: raw.group_wait_ms.unwrap_or(defaults.group_wait_ms),
        groups: raw
            .groups
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, g)| non_empty(Some(g), String::new(), &format!("gateway.groups[{i}]")))
            .collect::<Result<_, _>>()?,
        groups_file: raw
            .groups_file
            .map(|p| resolve_path(&p, base_dir, env, "gateway.groups_file"))
            .transpose()?,
        text_side: raw.text_side.unwrap_or(defaults.text_side),
    })
}

/// The `generation_config:` block (vLLM's `--override-generation-config`),
/// range-checked by `SamplingParams::validate`; errors name
/// `generation_config.<field>`.
pub(super) fn build_generation(
    raw: Option<RawGeneration>,
) -> Result<GenerationDefaults, ConfigError> {
    const KEY: &str = "generation_config";
    let Some(raw) = raw else {
        return Ok(GenerationDefaults::default());
    };
    if raw.repetition_penalty.is_some() {
        return Err(ConfigError::unsupported(
            format!("{KEY}.repetition_penalty"),
            "this engine has no repetition penalty",
        ));
    }
    let defaults = GenerationDefaults {
        temperature: raw.temperature.map(|x| x as f32),
        top_p: raw.top_p.map(|x| x as f32),
        top_k: raw
            .top_k
            .map(|k| GenerationDefaults::top_k_from(k, &format!("{KEY}.top_k")))
            .transpose()?,
        min_p: raw.min_p.map(|x| x as f32),
    };
    defaults.validate(KEY)?;
    Ok(defaults)
}
