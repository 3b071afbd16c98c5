//! The weight GEMMs side by side in a whole step: our bare decode loop with
//! the projections on weights packed for oneDNN at load (the default for
//! bf16 on the CPU) against libtorch's plain `linear` (the path before, and
//! the one transformers takes), chosen through `TOKENROUTER_CPU_GEMM`.

use std::path::Path;

use anyhow::Result;
use loadgen::page::Page;
use subserver::bench::profile::decode_run;
use subserver::config::DType;
use subserver::model::linear::{Gemm, CPU_GEMM_ENV};
use tch::{Device, Kind};

/// Decode steps (ms) of one bare run with the CPU GEMM path `value`.
fn step_ms(
    model: &Path,
    dtype: DType,
    batch: usize,
    prompt: usize,
    steps: usize,
    value: &str,
) -> Result<f64> {
    // The bench is single-threaded here; the runner reads the variable at load.
    std::env::set_var(CPU_GEMM_ENV, value);
    let run = decode_run(model, dtype, batch, prompt, steps);
    std::env::remove_var(CPU_GEMM_ENV);
    Ok(run?.step_ms)
}

/// The page's section (nothing where the run's dtype is not packed).
pub fn section(
    page: &mut Page,
    model: &Path,
    dtype: DType,
    batches: &[usize],
    prompt: usize,
    steps: usize,
) -> Result<()> {
    if Gemm::for_weights(Kind::from(dtype), Device::Cpu)? != Gemm::Packed {
        return Ok(());
    }
    let mut rows = Vec::new();
    for &batch in batches {
        let plain = step_ms(model, dtype, batch, prompt, steps, "plain")?;
        let packed = step_ms(model, dtype, batch, prompt, steps, "packed")?;
        rows.push(vec![
            batch.to_string(),
            format!("{plain:.1}"),
            format!("{packed:.1}"),
            format!("{:.2}x", plain / packed),
        ]);
    }
    page.section("GEMMs: packed oneDNN weights against plain `linear`");
    page.para(&format!(
        "One bare decode step (ms, {prompt}-token prompts, {steps} steps) with the weight \
         matmuls through libtorch's plain `linear` (`{CPU_GEMM_ENV}=plain`: the path before, \
         and transformers' call) and through oneDNN on weights packed once at load \
         (`{CPU_GEMM_ENV}=packed`, the default for bf16 on the CPU); same weights, prompts and \
         threads, one run each."
    ));
    page.table(&["batch", "plain ms", "packed ms", "plain / packed"], &rows);
    Ok(())
}
