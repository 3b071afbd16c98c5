//! `tp_size > 1` (the official layout's tensor-parallel width): we do not
//! shard models, so such a model runs whole on its one device. Start-up
//! says so with the memory the weights need there, and refuses only when
//! they cannot fit on that device.

use std::io::Read;
use std::path::Path;

use crate::config::{DType, DeviceSpec, ModelSpec};
use crate::model::dir::{ModelDir, WeightSource};
use crate::service::ServiceError;

const GIB: f64 = (1u64 << 30) as f64;

/// Parameters in the model directory's safetensors files (headers only),
/// or in its GGUF.
pub fn parameter_count(dir: &Path) -> Result<u64, String> {
    let files = match ModelDir::open(dir)
        .and_then(|d| d.weight_source())
        .map_err(|e| e.to_string())?
    {
        WeightSource::Safetensors(files) => files,
        WeightSource::Gguf(gguf) => {
            return model_files::gguf::GgufWeights::open(&gguf)
                .map(|w| w.parameter_count())
                .map_err(|e| e.to_string())
        }
    };
    let mut total = 0u64;
    for file in files {
        // The safetensors header: a little-endian u64 length, then JSON.
        let mut f = std::fs::File::open(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let mut header = vec![0u8; u64::from_le_bytes(len).min(100 << 20) as usize];
        f.read_exact(&mut header)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let meta: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| format!("{}: {e}", file.display()))?;
        total += meta
            .iter()
            .filter(|(k, _)| *k != "__metadata__")
            .filter_map(|(_, v)| v.get("shape")?.as_array().cloned())
            .map(|shape| shape.iter().filter_map(|d| d.as_u64()).product::<u64>())
            .sum::<u64>();
    }
    Ok(total)
}

fn dtype_bytes(dtype: DType) -> u64 {
    match dtype {
        DType::F32 => 4,
        DType::Bf16 | DType::F16 => 2,
    }
}

/// Warns that `spec` (with `tp_size > 1`) runs on one device and how much
/// its weights take there; errors when a CUDA device is too small for them.
/// `device_total` gives a CUDA device's total bytes (injected for tests).
pub fn check(
    spec: &ModelSpec,
    dir: &Path,
    device_total: impl Fn(usize) -> Option<u64>,
) -> Result<(), ServiceError> {
    if spec.tp_size <= 1 {
        return Ok(());
    }
    let params = parameter_count(dir).map_err(|e| {
        ServiceError::Unsupported(format!("model `{}`: sizing its weights: {e}", spec.name))
    })?;
    let need = params * dtype_bytes(spec.dtype);
    let total = match spec.device {
        DeviceSpec::Cuda(i) => device_total(i),
        DeviceSpec::Cpu => None,
    };
    if let Some(total) = total {
        if need >= total {
            return Err(ServiceError::Unsupported(format!(
                "model `{}`: tp_size {} asks for tensor parallelism, which is not implemented; \
                 whole, its weights need {:.1} GiB ({params} parameters as {}) and {} has {:.1} GiB",
                spec.name,
                spec.tp_size,
                need as f64 / GIB,
                spec.dtype,
                spec.device,
                total as f64 / GIB
            )));
        }
    }
    tracing::warn!(
        model = %spec.name,
        tp_size = spec.tp_size,
        device = %spec.device,
        weights_gib = format!("{:.1}", need as f64 / GIB),
        device_gib = total.map(|t| format!("{:.1}", t as f64 / GIB)),
        "tensor parallelism is not implemented: the model runs whole on one device"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KvBudget;

    fn spec(tp_size: usize, device: DeviceSpec) -> ModelSpec {
        ModelSpec {
            name: "reference".into(),
            path: None,
            hub_id: None,
            device,
            dtype: DType::Bf16,
            dtype_auto: false,
            tp_size,
            port: None,
            kv_budget: KvBudget::Tokens(16),
            sim: None,
        }
    }

    #[test]
    fn tp_size_above_one_runs_whole_and_refuses_only_what_cannot_fit() {
        let tmp = tempfile::tempdir().unwrap();
        // A 1000 x 1000 float32 tensor: 1e6 parameters, 2 MB as bf16.
        let data = vec![0u8; 4_000_000];
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![1000, 1000], &data)
                .unwrap();
        safetensors::serialize_to_file([("w", view)], None, &tmp.path().join("model.safetensors"))
            .unwrap();
        let config = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8,
            "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 1,
            "vocab_size": 10}"#;
        std::fs::write(tmp.path().join("config.json"), config).unwrap();
        assert_eq!(parameter_count(tmp.path()).unwrap(), 1_000_000);
        let big = |_| Some(80u64 << 30);
        let small = |_| Some(1_000_000u64);
        assert!(check(&spec(1, DeviceSpec::Cuda(0)), tmp.path(), small).is_ok());
        assert!(check(&spec(2, DeviceSpec::Cuda(0)), tmp.path(), big).is_ok());
        assert!(check(&spec(2, DeviceSpec::Cpu), tmp.path(), small).is_ok());
        let e = check(&spec(2, DeviceSpec::Cuda(0)), tmp.path(), small)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not implemented") && e.contains("1000000 parameters"),
            "{e}"
        );
    }
}
