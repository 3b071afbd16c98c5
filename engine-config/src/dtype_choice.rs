//! `dtype: auto` (the default): bf16 on a CPU with native bf16 arithmetic
//! (AVX512-BF16 or AMX), f32 elsewhere. bf16 halves the bytes every decode
//! step streams (weights and KV), which is what bounds a CPU at small
//! batch; without native bf16 instructions libtorch emulates it and f32 is
//! faster. CUDA keeps f32 unless asked: its dtype is a per-deployment choice.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use tracing::info;

use super::placement::{DType, DeviceSpec};
use super::string_enum::ParseEnumError;

/// A `dtype` as written in a config file or on a command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DTypeSetting {
    /// Chosen at start for the device (see the module docs).
    #[default]
    Auto,
    /// This dtype, whatever the device.
    Fixed(DType),
}

/// The CPU flags (as `/proc/cpuinfo` names them) that make bf16 native.
const NATIVE_BF16_FLAGS: [&str; 2] = ["avx512_bf16", "amx_bf16"];

/// The native-bf16 flags this CPU reports (empty when none, or when
/// `/proc/cpuinfo` cannot be read: not Linux, or a sandbox).
pub fn cpu_bf16_flags() -> &'static [&'static str] {
    static FLAGS: OnceLock<Vec<&'static str>> = OnceLock::new();
    FLAGS.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        bf16_flags_in(&text)
    })
}

/// The native-bf16 flags named on the first `flags` line of `cpuinfo`.
fn bf16_flags_in(cpuinfo: &str) -> Vec<&'static str> {
    let flags: Vec<&str> = cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, f)| f.split_whitespace().collect())
        .unwrap_or_default();
    NATIVE_BF16_FLAGS
        .into_iter()
        .filter(|want| flags.contains(want))
        .collect()
}

/// What `auto` picks on `device`, given the CPU's native-bf16 flags.
fn auto_for(device: DeviceSpec, bf16_flags: &[&str]) -> DType {
    match device {
        DeviceSpec::Cpu if !bf16_flags.is_empty() => DType::Bf16,
        _ => DType::F32,
    }
}

impl DTypeSetting {
    /// The dtype to run with on `device`; `auto` logs what it chose and why.
    pub fn resolve(self, device: DeviceSpec) -> DType {
        match self {
            Self::Fixed(d) => d,
            Self::Auto => {
                let flags = cpu_bf16_flags();
                let dtype = auto_for(device, flags);
                info!(
                    %device,
                    %dtype,
                    cpu_bf16 = %flags.join(","),
                    "dtype auto: bf16 on a CPU with native bf16 (avx512_bf16 or amx_bf16), f32 elsewhere"
                );
                dtype
            }
        }
    }
}

impl fmt::Display for DTypeSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Fixed(d) => d.fmt(f),
        }
    }
}

impl FromStr for DTypeSetting {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        s.parse::<DType>()
            .map(Self::Fixed)
            .map_err(|e| ParseEnumError {
                expected: format!("auto, {}", e.expected),
                ..e
            })
    }
}

impl<'de> serde::Deserialize<'de> for DTypeSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_auto_and_every_dtype() {
        assert_eq!("auto".parse::<DTypeSetting>().unwrap(), DTypeSetting::Auto);
        assert_eq!(
            "bf16".parse::<DTypeSetting>().unwrap(),
            DTypeSetting::Fixed(DType::Bf16)
        );
        let err = "f64".parse::<DTypeSetting>().unwrap_err().to_string();
        assert!(err.contains("auto, f32"), "{err}");
        assert_eq!(DTypeSetting::Fixed(DType::F16).to_string(), "f16");
        assert_eq!(DTypeSetting::default().to_string(), "auto");
    }

    #[test]
    fn auto_is_bf16_only_on_a_cpu_with_native_bf16() {
        let amx = "processor\t: 0\nflags\t\t: fpu sse2 avx512f amx_bf16 amx_tile\n";
        let avx = "flags\t: fpu avx512f avx512_bf16\nflags : other\n";
        let plain = "flags\t: fpu sse2 avx2 avx512f\n";
        assert_eq!(bf16_flags_in(amx), vec!["amx_bf16"]);
        assert_eq!(bf16_flags_in(avx), vec!["avx512_bf16"]);
        assert!(bf16_flags_in(plain).is_empty() && bf16_flags_in("").is_empty());
        assert_eq!(auto_for(DeviceSpec::Cpu, &bf16_flags_in(amx)), DType::Bf16);
        assert_eq!(auto_for(DeviceSpec::Cpu, &bf16_flags_in(plain)), DType::F32);
        assert_eq!(auto_for(DeviceSpec::Cuda(0), &["amx_bf16"]), DType::F32);
        // An explicit dtype always wins.
        let fixed = DTypeSetting::Fixed(DType::F32);
        assert_eq!(fixed.resolve(DeviceSpec::Cpu), DType::F32);
    }
}
