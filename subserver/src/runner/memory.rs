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

#[cfg(test)]
mod tests {
    use super::*;

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
