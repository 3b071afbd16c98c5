//! Sizing the KV pool from a memory fraction or a token budget.

use tch::Device;

use crate::device::cuda_mem_info;
use crate::error::EngineError;

pub use crate::config::KvBudget;

fn host_available_bytes() -> Result<u64, EngineError> {
    let path = std::path::Path::new("/proc/meminfo");
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kb| kb * 1024)
        .ok_or_else(|| {
            EngineError::InvalidDevice("cannot read MemAvailable from /proc/meminfo".into())
        })
}

/// Blocks the pool gets under `budget`.
pub fn num_blocks(
    budget: KvBudget,
    device: Device,
    bytes_per_block: usize,
    block_size: usize,
) -> Result<usize, EngineError> {
    let blocks = match budget {
        KvBudget::Tokens(tokens) => tokens.div_ceil(block_size),
        KvBudget::Fraction(f) => {
            if !(f > 0.0 && f <= 1.0) {
                return Err(EngineError::InvalidDevice(format!(
                    "kv_cache_fraction must be in (0, 1], got {f}"
                )));
            }
            let available = match device {
                Device::Cuda(i) => cuda_mem_info(i)?.0,
                _ => host_available_bytes()?,
            };
            ((available as f64 * f) as usize) / bytes_per_block.max(1)
        }
    };
    if blocks == 0 {
        return Err(EngineError::InvalidDevice(format!(
            "the KV budget {budget:?} leaves no room for a single block of {bytes_per_block} bytes"
        )));
    }
    Ok(blocks)
}

/// What one model needs of a device's static memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFootprint {
    /// Bytes of its weights.
    pub weight_bytes: u64,
    /// KV bytes of one token over all layers.
    pub kv_bytes_per_token: u64,
}

/// Plans the KV caches of the models that share one device under
/// `mem_fraction_static` (SGLang's meaning: weights plus KV take at most
/// `fraction` of the device's total memory; activations and CUDA graphs use
/// the rest). After the weights, every model gets the same number of KV
/// tokens: a routed request keeps KV in each model it visits, so the pool
/// that runs out first bounds the group.
pub fn plan_kv_tokens(
    total_bytes: u64,
    fraction: f64,
    models: &[ModelFootprint],
) -> Result<usize, EngineError> {
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(EngineError::InvalidDevice(format!(
            "mem_fraction_static must be in (0, 1], got {fraction}"
        )));
    }
    let budget = (total_bytes as f64 * fraction) as u64;
    let weights: u64 = models.iter().map(|m| m.weight_bytes).sum();
    let per_token: u64 = models
        .iter()
        .map(|m| m.kv_bytes_per_token)
        .sum::<u64>()
        .max(1);
    let left = budget.checked_sub(weights).ok_or_else(|| {
        EngineError::InvalidDevice(format!(
            "mem_fraction_static {fraction} of {} GiB leaves no room for the KV cache: \
             the weights alone take {:.1} GiB",
            total_bytes >> 30,
            weights as f64 / (1u64 << 30) as f64
        ))
    })?;
    Ok((left / per_token) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_static_budget_pays_weights_then_equal_kv_tokens() {
        let gib = 1u64 << 30;
        let small = ModelFootprint {
            weight_bytes: gib,
            kv_bytes_per_token: 100 * 1024,
        };
        let large = ModelFootprint {
            weight_bytes: 16 * gib,
            kv_bytes_per_token: 150 * 1024,
        };
        // 0.5 x 140 GiB = 70 GiB; 53 GiB left over 250 KiB per routed token.
        let tokens = plan_kv_tokens(140 * gib, 0.5, &[small, large]).unwrap();
        assert_eq!(tokens, (53 * gib / (250 * 1024)) as usize);
        let err = plan_kv_tokens(16 * gib, 0.5, &[small, large]).unwrap_err();
        assert!(err.to_string().contains("weights alone"), "{err}");
        assert!(plan_kv_tokens(gib, 0.0, &[small]).is_err());
    }

    #[test]
    fn token_budget_rounds_up_to_blocks() {
        assert_eq!(
            num_blocks(KvBudget::Tokens(33), Device::Cpu, 100, 16).unwrap(),
            3
        );
    }

    #[test]
    fn fraction_uses_host_memory_and_validates() {
        assert!(num_blocks(KvBudget::Fraction(0.01), Device::Cpu, 1 << 20, 16).unwrap() > 0);
        assert!(num_blocks(KvBudget::Fraction(1.5), Device::Cpu, 1, 16).is_err());
        assert!(num_blocks(KvBudget::Tokens(0), Device::Cpu, 1, 16).is_err());
    }
}
