//! A layer's elementwise work side by side: as ATen ops (the path before)
//! against the host passes of `kernels::layer_ops` (residual add and norm,
//! SwiGLU, the QKV epilogue with RoPE and the K/V writes), on the same bare
//! loop, with the libtorch calls each makes per step.

use anyhow::Result;
use engine_bench::profile::{decode_run_with, DecodePaths, DecodeRun};
use loadgen::page::Page;

use super::BareRuns;

/// libtorch calls per decode step of the bare forward before issue 22's
/// changes (fused norms, joint RoPE, K/V gathered once per step), counted
/// by the same `op_count` counter at commit 8f80e19 (the old decoder
/// instrumented; SmolLM2-135M, 30 layers), at every batch.
const OPS_BEFORE: u64 = 1786;

fn run(bare: &BareRuns<'_>, batch: usize, host: bool) -> Result<DecodeRun> {
    let paths = DecodePaths {
        host_elementwise: host,
        ..DecodePaths::default()
    };
    let run = decode_run_with(
        bare.model,
        bare.dtype,
        batch,
        bare.prompt,
        bare.steps,
        paths,
    );
    Ok(run?)
}

/// The page's section: per batch, one bare decode step and its libtorch
/// calls with the elementwise work as ATen ops and as host passes.
pub fn section(page: &mut Page, bare: &BareRuns<'_>) -> Result<()> {
    let (prompt, steps) = (bare.prompt, bare.steps);
    let mut rows = Vec::new();
    for &batch in bare.batches {
        let ops = run(bare, batch, false)?;
        let host = run(bare, batch, true)?;
        let per_token = |n: u64| format!("{n} ({:.1} / token)", n as f64 / batch as f64);
        rows.push(vec![
            batch.to_string(),
            per_token(OPS_BEFORE),
            per_token(ops.ops_per_step),
            per_token(host.ops_per_step),
            format!("{:.1}", ops.step_ms),
            format!("{:.1}", host.step_ms),
            format!("{:.2}x", ops.step_ms / host.step_ms),
        ]);
    }
    page.section("Elementwise work: ATen ops against host passes");
    page.para(&format!(
        "One bare decode step ({prompt}-token prompts, {steps} steps) with each layer's \
         elementwise work (residual adds and norms, SwiGLU, q/k norms, RoPE, the K/V writes) as \
         ATen ops (*ops*, the path before) and as one host pass each (*host*, \
         `kernels::layer_ops`, the default on the CPU); same weights, prompts and threads, one \
         run each. *libtorch calls*: ATen ops and views of one step's forward, counted by \
         `op_count`; *before* is the decoder before issue 22's changes (fused norms, joint RoPE, \
         K/V gathered once per step), counted by the same counter at the commit named in \
         `examples/bench_engine/host_ops.rs`."
    ));
    page.table(
        &[
            "batch",
            "libtorch calls / step before",
            "ops",
            "host",
            "ops ms",
            "host ms",
            "ops / host",
        ],
        &rows,
    );
    Ok(())
}
