//! Where a model runs and in which floating-point type its weights live.

use std::fmt;
use std::str::FromStr;

use super::string_enum::{string_enum, ParseEnumError};

/// A compute device: `cpu`, `cuda` (= `cuda:0`) or `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceSpec {
    /// The host CPU.
    Cpu,
    /// CUDA device with this ordinal.
    Cuda(usize),
}

impl DeviceSpec {
    /// True for any CUDA device.
    pub fn is_cuda(self) -> bool {
        matches!(self, Self::Cuda(_))
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for DeviceSpec {
    type Err = ParseEnumError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Self::Cuda(n)),
                _ => Err(ParseEnumError {
                    what: "device",
                    got: s.to_string(),
                    expected: "cpu, cuda, cuda:N".to_string(),
                }),
            },
        }
    }
}

impl<'de> serde::Deserialize<'de> for DeviceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for DeviceSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "tch")]
impl From<DeviceSpec> for tch::Device {
    fn from(d: DeviceSpec) -> Self {
        match d {
            DeviceSpec::Cpu => tch::Device::Cpu,
            DeviceSpec::Cuda(n) => tch::Device::Cuda(n),
        }
    }
}

string_enum! {
    /// The dtype of weights, activations and KV cache.
    pub enum DType as "dtype" {
        /// 32-bit IEEE float.
        F32 => "f32",
        /// bfloat16.
        Bf16 => "bf16",
        /// IEEE half.
        F16 => "f16",
    }
}

#[cfg(feature = "tch")]
impl From<DType> for tch::Kind {
    fn from(d: DType) -> Self {
        match d {
            DType::F32 => tch::Kind::Float,
            DType::Bf16 => tch::Kind::BFloat16,
            DType::F16 => tch::Kind::Half,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        assert_eq!(DeviceSpec::Cuda(3).to_string(), "cuda:3");
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert_eq!(err.got, bad);
            assert!(err.to_string().contains("cpu, cuda, cuda:N"), "{err}");
        }
    }

    #[test]
    fn dtypes_parse() {
        assert_eq!("bf16".parse::<DType>().unwrap(), DType::Bf16);
        assert!("fp32".parse::<DType>().is_err());
    }

    #[cfg(feature = "tch")]
    #[test]
    fn dtypes_map_to_torch_kinds() {
        assert_eq!(
            tch::Kind::from("bf16".parse::<DType>().unwrap()),
            tch::Kind::BFloat16
        );
        assert_eq!(tch::Kind::from(DType::F16), tch::Kind::Half);
        assert_eq!(tch::Kind::from(DType::F32), tch::Kind::Float);
    }
}
