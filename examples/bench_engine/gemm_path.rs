//! The weight GEMMs side by side in a whole step: our bare decode loop with
//! the projections through libtorch's plain `linear` (the path before, and
//! the one transformers takes), oneDNN on weights packed at load, and
//! `kernels::gemm` (bf16 widened to f32 in registers, f32 FMAs), chosen
//! through `TOKENROUTER_CPU_GEMM`.

use anyhow::Result;
use engine_bench::profile::decode_run;
use loadgen::page::Page;
use subserver::model::linear::{Gemm, CPU_GEMM_ENV};
use tch::{Device, Kind};

use super::BareRuns;

/// The paths compared, as `TOKENROUTER_CPU_GEMM` names them.
const PATHS: [(&str, Gemm); 3] = [
    ("plain", Gemm::Plain),
    ("packed", Gemm::Packed),
    ("widened", Gemm::Widened),
];

/// Decode steps (ms) of one bare run with the CPU GEMM path `value`.
fn step_ms(bare: &BareRuns<'_>, batch: usize, value: &str) -> Result<f64> {
    // The bench is single-threaded here; the runner reads the variable at load.
    std::env::set_var(CPU_GEMM_ENV, value);
    let run = decode_run(bare.model, bare.dtype, batch, bare.prompt, bare.steps);
    std::env::remove_var(CPU_GEMM_ENV);
    Ok(run?.step_ms)
}

/// The page's section (nothing where the run's dtype is not packed).
pub fn section(page: &mut Page, bare: &BareRuns<'_>) -> Result<()> {
    let (prompt, steps) = (bare.prompt, bare.steps);
    let default = Gemm::for_weights(Kind::from(bare.dtype), Device::Cpu)?;
    if default == Gemm::Plain {
        return Ok(());
    }
    let mut rows = Vec::new();
    for &batch in bare.batches {
        let mut row = vec![batch.to_string()];
        let mut ms = Vec::new();
        for (value, gemm) in PATHS {
            let t = step_ms(bare, batch, value)?;
            ms.push((gemm, t));
            row.push(format!("{t:.1}"));
        }
        let of = |g: Gemm| ms.iter().find(|m| m.0 == g).map_or(f64::NAN, |m| m.1);
        row.push(format!("{:.2}x", of(Gemm::Plain) / of(default)));
        rows.push(row);
    }
    page.section("GEMMs: plain `linear`, oneDNN packed, widened f32 FMAs");
    page.para(&format!(
        "One bare decode step (ms, {prompt}-token prompts, {steps} steps) with the weight \
         matmuls through libtorch's plain `linear` (`{CPU_GEMM_ENV}=plain`: the path before, \
         and transformers' call), oneDNN on weights packed once at load (`packed`) and \
         `kernels::gemm` on weights packed once at load, bf16 widened to f32 in registers and \
         f32 FMAs (`widened`); same weights, prompts and threads, one run each. The default on \
         this machine is `{}` (widened on AVX-512 without AMX, packed elsewhere).",
        PATHS.iter().find(|p| p.1 == default).map_or("?", |p| p.0)
    ));
    page.table(
        &[
            "batch",
            "plain ms",
            "packed ms",
            "widened ms",
            "plain / default",
        ],
        &rows,
    );
    Ok(())
}
