//! Sizing the KV pool from a memory fraction or a token budget. On the CPU
//! the pool fits under the process's cgroup memory limit (a pod's limit)
//! beside its weights, so zero-filling it at load cannot be OOM-killed.

use tch::Device;
use tracing::warn;

use super::cgroup;
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

/// Share of a cgroup memory limit a CPU pool never takes: activations,
/// the allocator and the HTTP side need room beside weights and KV.
pub const CPU_HEADROOM: f64 = 0.1;

/// The host memory a CPU pool may use, read once when it is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    /// The cgroup memory limit (a pod's `resources.limits.memory`).
    pub limit: Option<u64>,
    /// Anonymous memory the process already holds (its weights).
    pub held: u64,
    /// `MemAvailable` (used without a limit).
    pub available: u64,
}

impl HostMemory {
    /// This process's figures.
    pub fn read() -> Result<Self, EngineError> {
        Ok(Self {
            limit: cgroup::memory_limit(),
            held: cgroup::resident_anon_bytes(),
            available: host_available_bytes()?,
        })
    }

    /// Bytes left under the limit beside what is held and the headroom
    /// (`None`: no limit).
    fn room(&self) -> Option<u64> {
        let limit = self.limit?;
        let headroom = (limit as f64 * CPU_HEADROOM) as u64;
        Some(limit.saturating_sub(self.held).saturating_sub(headroom))
    }

    /// KV bytes for `budget` (`bytes_per_token` per token). A fraction is
    /// of the limit (of `MemAvailable` without one), capped to the room
    /// beside the weights; an explicit token count that does not fit is an
    /// error, not an OOM kill when the pool is zero-filled.
    pub fn kv_bytes(&self, budget: KvBudget, bytes_per_token: u64) -> Result<u64, EngineError> {
        let mib = |b: u64| b >> 20;
        match (budget, self.limit, self.room()) {
            (KvBudget::Fraction(f), Some(limit), Some(room)) => {
                let want = (limit as f64 * f) as u64;
                if want > room {
                    warn!(
                        fraction = f,
                        limit_mib = mib(limit),
                        held_mib = mib(self.held),
                        kv_mib = mib(room),
                        "the KV fraction does not fit beside the weights under the memory \
                         limit: the pool takes what is left"
                    );
                }
                Ok(want.min(room))
            }
            (KvBudget::Fraction(f), _, _) => Ok((self.available as f64 * f) as u64),
            (KvBudget::Tokens(t), Some(limit), Some(room)) => {
                let want = t as u64 * bytes_per_token;
                if want > room {
                    return Err(EngineError::InvalidDevice(format!(
                        "a KV cache of {t} tokens takes {} MiB, but the memory limit of {} MiB \
                         leaves {} MiB beside the {} MiB already held (and {}% headroom): \
                         lower the KV budget or raise the limit",
                        mib(want),
                        mib(limit),
                        mib(room),
                        mib(self.held),
                        (CPU_HEADROOM * 100.0) as u32
                    )));
                }
                Ok(want)
            }
            (KvBudget::Tokens(t), _, _) => Ok(t as u64 * bytes_per_token),
        }
    }
}

/// Blocks the pool gets under `budget`.
pub fn num_blocks(
    budget: KvBudget,
    device: Device,
    bytes_per_block: usize,
    block_size: usize,
) -> Result<usize, EngineError> {
    if let KvBudget::Fraction(f) = budget {
        if !(f > 0.0 && f <= 1.0) {
            return Err(EngineError::InvalidDevice(format!(
                "kv_cache_fraction must be in (0, 1], got {f}"
            )));
        }
    }
    let blocks = match (budget, device) {
        (KvBudget::Tokens(tokens), Device::Cuda(_)) => tokens.div_ceil(block_size),
        (KvBudget::Fraction(f), Device::Cuda(i)) => {
            ((cuda_mem_info(i)?.0 as f64 * f) as usize) / bytes_per_block.max(1)
        }
        (budget, _) => host_blocks(&HostMemory::read()?, budget, bytes_per_block, block_size)?,
    };
    if blocks == 0 {
        return Err(EngineError::InvalidDevice(format!(
            "the KV budget {budget:?} leaves no room for a single block of {bytes_per_block} bytes"
        )));
    }
    Ok(blocks)
}

/// Blocks of a pool in host memory `mem`.
pub fn host_blocks(
    mem: &HostMemory,
    budget: KvBudget,
    bytes_per_block: usize,
    block_size: usize,
) -> Result<usize, EngineError> {
    let per_block = bytes_per_block.max(1) as u64;
    if let KvBudget::Tokens(tokens) = budget {
        // Whole blocks: the pool a token count asks for is rounded up.
        let blocks = tokens.div_ceil(block_size);
        let per_token = per_block.div_ceil(block_size.max(1) as u64);
        mem.kv_bytes(KvBudget::Tokens(blocks * block_size), per_token)?;
        return Ok(blocks);
    }
    Ok((mem.kv_bytes(budget, per_block)? / per_block) as usize)
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

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_cpu_pool_fits_under_the_pods_limit_beside_the_weights() {
        // A 2 GiB pod that holds 600 MiB of weights: 0.2 of the limit fits.
        let pod = HostMemory {
            limit: Some(2048 * MIB),
            held: 600 * MIB,
            available: 100_000 * MIB,
        };
        let blocks = host_blocks(&pod, KvBudget::Fraction(0.2), MIB as usize, 16).unwrap();
        assert_eq!(blocks as u64, (2048 * MIB / 5) / MIB);
        // 0.9 does not: the pool takes what is left beside weights and headroom.
        let blocks = host_blocks(&pod, KvBudget::Fraction(0.9), MIB as usize, 16).unwrap();
        let headroom = ((2048 * MIB) as f64 * CPU_HEADROOM) as u64;
        assert_eq!(blocks as u64, (2048 * MIB - 600 * MIB - headroom) / MIB);
        assert!(600 * MIB + blocks as u64 * MIB + headroom <= 2048 * MIB);
        // An explicit token count over the limit is refused, with the figures.
        let err = host_blocks(&pod, KvBudget::Tokens(16 * 2000), MIB as usize, 16).unwrap_err();
        assert!(
            err.to_string().contains("memory limit of 2048 MiB"),
            "{err}"
        );
        assert_eq!(
            host_blocks(&pod, KvBudget::Tokens(16 * 100), MIB as usize, 16).unwrap(),
            100
        );
        // Weights alone over the limit: no room for one block.
        let full = HostMemory {
            held: 2000 * MIB,
            ..pod
        };
        assert_eq!(
            host_blocks(&full, KvBudget::Fraction(0.2), MIB as usize, 16).unwrap(),
            0
        );
    }

    #[test]
    fn without_a_limit_a_fraction_is_of_available_memory() {
        let host = HostMemory {
            limit: None,
            held: 600 * MIB,
            available: 1000 * MIB,
        };
        assert_eq!(
            host_blocks(&host, KvBudget::Fraction(0.5), MIB as usize, 16).unwrap(),
            500
        );
        assert_eq!(
            host_blocks(&host, KvBudget::Tokens(16 * 5000), MIB as usize, 16).unwrap(),
            5000
        );
    }

    #[test]
    fn fraction_uses_host_memory_and_validates() {
        assert!(num_blocks(KvBudget::Fraction(0.01), Device::Cpu, 1 << 20, 16).unwrap() > 0);
        assert!(num_blocks(KvBudget::Fraction(1.5), Device::Cpu, 1, 16).is_err());
        assert!(num_blocks(KvBudget::Tokens(0), Device::Cpu, 1, 16).is_err());
    }
}
