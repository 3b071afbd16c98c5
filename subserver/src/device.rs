//! Device and dtype selection, and making CUDA available at run time.

use std::str::FromStr;
use std::sync::OnceLock;

use tch::{Device, Kind};

use crate::error::EngineError;

/// Parses `cpu`, `cuda` or `cuda:N`.
pub fn parse_device(s: &str) -> Result<Device, EngineError> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Ok(Device::Cuda(n)),
            _ => Err(EngineError::InvalidDevice(format!(
                "unknown device `{s}` (expected cpu, cuda or cuda:N)"
            ))),
        },
    }
}

/// Makes sure a requested device can be used. For CUDA this loads
/// `libtorch_cuda.so` with `RTLD_GLOBAL` when the binary was linked without it
/// (CPU build machines), so one binary serves both CPU and GPU hosts.
pub fn ensure_device(device: Device) -> Result<(), EngineError> {
    let Device::Cuda(index) = device else {
        return Ok(());
    };
    if !tch::Cuda::is_available() {
        load_torch_cuda()?;
    }
    let count = tch::Cuda::device_count();
    if count <= 0 {
        return Err(EngineError::InvalidDevice(
            "CUDA requested but no CUDA device is visible (is this libtorch built with CUDA, \
             and is a GPU present?)"
                .into(),
        ));
    }
    if index as i64 >= count {
        return Err(EngineError::InvalidDevice(format!(
            "cuda:{index} requested but only {count} CUDA device(s) are visible"
        )));
    }
    Ok(())
}

fn load_torch_cuda() -> Result<(), EngineError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // SAFETY: loading libtorch_cuda only runs its static initialisers,
            // which register the CUDA backend with the already-loaded libtorch.
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some("libtorch_cuda.so"),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                )
            };
            match lib {
                Ok(lib) => {
                    // Keep it loaded for the life of the process.
                    std::mem::forget(lib);
                    Ok(())
                }
                Err(e) => Err(format!("cannot load libtorch_cuda.so: {e}")),
            }
        })
        .clone()
        .map_err(EngineError::InvalidDevice)
}

/// Free and total bytes of CUDA device `index`, from the CUDA runtime that
/// libtorch ships (`cudaMemGetInfo`).
pub fn cuda_mem_info(index: usize) -> Result<(u64, u64), EngineError> {
    type SetDevice = unsafe extern "C" fn(i32) -> i32;
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    ensure_device(Device::Cuda(index))?;
    let names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"];
    // SAFETY: loading the CUDA runtime has no side effects beyond its initialisers.
    let lib = names
        .iter()
        .find_map(|n| unsafe { libloading::Library::new(n) }.ok())
        .ok_or_else(|| {
            EngineError::InvalidDevice(
                "cannot load libcudart to size the KV cache; give a token budget instead".into(),
            )
        })?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both symbols have these C signatures in every CUDA runtime.
    let rc = unsafe {
        let set: libloading::Symbol<SetDevice> = lib
            .get(b"cudaSetDevice\0")
            .map_err(|e| EngineError::InvalidDevice(format!("cudaSetDevice: {e}")))?;
        let info: libloading::Symbol<MemGetInfo> = lib
            .get(b"cudaMemGetInfo\0")
            .map_err(|e| EngineError::InvalidDevice(format!("cudaMemGetInfo: {e}")))?;
        let rc = set(index as i32);
        if rc != 0 {
            rc
        } else {
            info(&mut free, &mut total)
        }
    };
    if rc != 0 {
        return Err(EngineError::InvalidDevice(format!(
            "cudaMemGetInfo failed with error {rc}"
        )));
    }
    Ok((free as u64, total as u64))
}

/// Sets libtorch's intra-op CPU threads.
pub fn set_cpu_threads(n: i32) {
    tch::set_num_threads(n.max(1));
}

/// Floating-point dtypes for weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// bfloat16.
    BF16,
    /// IEEE half.
    F16,
}

impl DType {
    /// The libtorch kind.
    pub fn kind(self) -> Kind {
        match self {
            Self::F32 => Kind::Float,
            Self::BF16 => Kind::BFloat16,
            Self::F16 => Kind::Half,
        }
    }

    /// The name used in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::BF16 => "bf16",
            Self::F16 => "f16",
        }
    }
}

impl FromStr for DType {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" | "float32" | "float" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::BF16),
            "f16" | "float16" | "half" => Ok(Self::F16),
            _ => Err(EngineError::InvalidDevice(format!(
                "unknown dtype `{s}` (expected f32, bf16 or f16)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
        assert_eq!(parse_device("cuda").unwrap(), Device::Cuda(0));
        assert_eq!(parse_device("cuda:3").unwrap(), Device::Cuda(3));
        assert!(parse_device("tpu").unwrap_err().to_string().contains("tpu"));
        assert!(parse_device("cuda:x").is_err());
    }

    #[test]
    fn parses_dtypes() {
        assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::BF16);
        assert!("int8"
            .parse::<DType>()
            .unwrap_err()
            .to_string()
            .contains("int8"));
    }
}
