//! Random weights made directly on the target device (no checkpoint on disk),
//! for benchmarks of models too big to write out (a 32B shape in GPU memory).
//! Same tensor plan as `gen-random`; values come from libtorch's generator,
//! so they differ from a written checkpoint (throughput does not depend on them).

use std::collections::HashMap;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use tch::{Device, Kind, Tensor};

use model_files::hf_config::ModelConfig;
use model_files::{tensor_specs, InitKind};
use subserver::error::EngineError;
use subserver::model::weights::Weights;

/// Every tensor `cfg` needs, initialised on `device` as `kind`.
pub fn random_weights(
    cfg: &ModelConfig,
    seed: i64,
    kind: Kind,
    device: Device,
) -> Result<Weights, EngineError> {
    tch::manual_seed(seed);
    let specs = tensor_specs(cfg);
    let bar = ProgressBar::new(specs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("random weights [{bar:30}] {pos}/{len} tensors ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut map = HashMap::with_capacity(specs.len());
    for spec in specs {
        let shape: Vec<i64> = spec.shape.iter().map(|&d| d as i64).collect();
        let t = match spec.init {
            InitKind::Normal { std } => {
                Tensor::f_randn(&shape, (kind, device))?.f_mul_scalar(std as f64)?
            }
            InitKind::OnePlusNormal { std } => Tensor::f_randn(&shape, (kind, device))?
                .f_mul_scalar(std as f64)?
                .f_add_scalar(1.0)?,
            InitKind::Zeros => Tensor::f_zeros(&shape, (kind, device))?,
        };
        map.insert(spec.name, t);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(Weights::from_map(Path::new("random"), map))
}
