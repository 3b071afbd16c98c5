//! `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`: the device memory an MPS client may
//! use, per device (`0=40960M`, several comma separated: `0=1G,1=512M`).
//! CUDA enforces it on allocations but `cudaMemGetInfo` still reports the
//! whole device, so the KV plan reads it and sizes against the smaller of
//! the two. (The NVIDIA device plugin sets its per-client cap as the MPS
//! daemon's default instead, which no client can read; the operator passes
//! that share through the memory fraction it renders.)

use std::collections::BTreeMap;

use crate::error::EngineError;

/// The environment variable.
pub const ENV: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";

/// Parsed limits: bytes per device ordinal. Entries keyed by a GPU UUID
/// (`GPU-…`, `MIG-…`) are kept apart: this process cannot map them to an
/// ordinal, so they do not cap the plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedLimits {
    /// Bytes per device ordinal.
    pub by_ordinal: BTreeMap<usize, u64>,
    /// Devices named by UUID (not applied).
    pub by_uuid: Vec<String>,
}

impl PinnedLimits {
    /// The limit of device `index`, if one is set.
    pub fn of(&self, index: usize) -> Option<u64> {
        self.by_ordinal.get(&index).copied()
    }
}

fn invalid(value: &str, why: &str) -> EngineError {
    EngineError::InvalidDevice(format!(
        "{ENV}={value:?} is malformed ({why}): expected DEVICE=SIZE[,DEVICE=SIZE...], \
         SIZE a whole number followed by M, MB, G or GB (e.g. 0=40960M)"
    ))
}

/// Bytes of one size (`40960M`, `40G`, `512MB`).
fn size(value: &str, text: &str) -> Result<u64, EngineError> {
    let text = text.trim();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let shift = match unit.to_ascii_uppercase().as_str() {
        "M" | "MB" => 20,
        "G" | "GB" => 30,
        _ => return Err(invalid(value, &format!("unit of `{text}`"))),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| invalid(value, &format!("number in `{text}`")))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| invalid(value, &format!("`{text}` overflows")))
}

/// Parses the variable's value.
pub fn parse(value: &str) -> Result<PinnedLimits, EngineError> {
    let mut out = PinnedLimits::default();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (device, amount) = item
            .split_once('=')
            .ok_or_else(|| invalid(value, &format!("`{item}` has no `=`")))?;
        let device = device.trim();
        let bytes = size(value, amount)?;
        if let Ok(index) = device.parse::<usize>() {
            if out.by_ordinal.insert(index, bytes).is_some() {
                return Err(invalid(value, &format!("device {index} given twice")));
            }
        } else if device.starts_with("GPU-") || device.starts_with("MIG-") {
            out.by_uuid.push(device.to_string());
        } else {
            return Err(invalid(value, &format!("device `{device}`")));
        }
    }
    if out.by_ordinal.is_empty() && out.by_uuid.is_empty() {
        return Err(invalid(value, "no device"));
    }
    Ok(out)
}

/// The limits from the environment (`None` when the variable is unset).
pub fn from_env() -> Result<Option<PinnedLimits>, EngineError> {
    match std::env::var(ENV) {
        Ok(v) => parse(&v).map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(invalid("?", "not UTF-8")),
    }
}

/// The memory the plan may size against on device `index`: the device's
/// total, capped by its pinned limit when one is set.
pub fn capped_total(total: u64, limits: Option<&PinnedLimits>, index: usize) -> u64 {
    limits
        .and_then(|l| l.of(index))
        .map_or(total, |limit| limit.min(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn parses_the_device_plugins_and_cudas_forms() {
        let one = parse("0=40960M").unwrap();
        assert_eq!(one.of(0), Some(40960 * MIB));
        assert_eq!(one.of(1), None);
        let two = parse("0=1G, 1=512MB").unwrap();
        assert_eq!((two.of(0), two.of(1)), (Some(GIB), Some(512 * MIB)));
        assert_eq!(parse("0=40gb").unwrap().of(0), Some(40 * GIB));
        let uuid = parse("GPU-0e1f=8G").unwrap();
        assert_eq!(uuid.by_uuid, ["GPU-0e1f"]);
        assert!(uuid.by_ordinal.is_empty());
    }

    #[test]
    fn malformed_values_are_refused_with_the_expected_form() {
        for bad in [
            "",
            "0",
            "0=",
            "0=40",
            "0=40T",
            "x=4G",
            "0=-1G",
            "0=1G,0=2G",
            "0=4.5G",
        ] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(
                err.contains(ENV) && err.contains("0=40960M"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_plan_sizes_against_the_smaller_of_device_and_limit() {
        let limits = parse("0=40960M").unwrap();
        let h100 = 81_559 * MIB;
        assert_eq!(capped_total(h100, Some(&limits), 0), 40_960 * MIB);
        // No limit for this device, or none at all: the whole device.
        assert_eq!(capped_total(h100, Some(&limits), 1), h100);
        assert_eq!(capped_total(h100, None, 0), h100);
        // A limit above the device does not raise it.
        let big = parse("0=200G").unwrap();
        assert_eq!(capped_total(h100, Some(&big), 0), h100);
    }

    #[test]
    fn kv_is_planned_from_the_clients_share() {
        use crate::runner::memory::{plan_kv_tokens, ModelFootprint};
        // Qwen3-8B in bf16 (8.19e9 parameters) as one of two MPS clients
        // on an 80 GB H100: 0.85 of the 40 GiB share, less 15.3 GiB of
        // weights, over 144 KiB of KV per token (36 layers x 8 heads x 128 x 2 x 2).
        let model = ModelFootprint {
            weight_bytes: 8_190_735_360 * 2,
            kv_bytes_per_token: 36 * 8 * 128 * 2 * 2,
        };
        let total = capped_total(81_559 * MIB, Some(&parse("0=40779M").unwrap()), 0);
        let tokens = plan_kv_tokens(total, 0.85, &[model]).unwrap();
        let expect = ((40_779 * MIB) as f64 * 0.85) as u64 - model.weight_bytes;
        assert_eq!(tokens as u64, expect / model.kv_bytes_per_token);
        assert!(tokens > 100_000, "{tokens}");
        // Against the whole device the plan would claim twice the share.
        let whole = plan_kv_tokens(81_559 * MIB, 0.85, &[model]).unwrap();
        assert!(whole > 2 * tokens);
    }
}
