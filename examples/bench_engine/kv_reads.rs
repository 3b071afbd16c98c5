//! The attention's K/V reads side by side: the CPU paged kernel (reading
//! the pool in place through the block table) against the gathered path
//! it replaced for decode (a per-step copy of every item's context, padded
//! to the longest, then libtorch's attention), on the same bare loop.

use std::path::Path;

use anyhow::Result;
use engine_bench::profile::{decode_run_with, DecodePaths};
use loadgen::page::Page;
use subserver::config::DType;
use subserver::model::paged_cpu::CpuAttention;

/// The page's section: per (batch, prompt) point, one bare decode step in
/// both modes and their ratio.
pub fn section(
    page: &mut Page,
    model: &Path,
    dtype: DType,
    points: &[(usize, usize)],
    steps: usize,
) -> Result<()> {
    page.section("Attention: the paged kernel against the gathered path");
    page.para(
        "One bare decode step (ms) with the attention reading K/V the way it did before the \
         paged kernel (*gathered*: every item's context of every layer copied once per step, \
         padded to the longest, then libtorch's attention) and now (*paged*: the CPU kernel of \
         `kernels::paged_attention` reading the pool in place through each sequence's slot \
         table, on libtorch's OpenMP threads); same weights, prompts and threads, one run each.",
    );
    page.table(
        &[
            "batch",
            "context (prompt + decoded)",
            "gathered ms",
            "paged ms",
            "gathered / paged",
        ],
        &rows(model, dtype, points, steps)?,
    );
    Ok(())
}

fn rows(
    model: &Path,
    dtype: DType,
    points: &[(usize, usize)],
    steps: usize,
) -> Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    for &(batch, prompt) in points {
        let step = |reads| -> Result<f64> {
            let paths = DecodePaths {
                reads,
                ..DecodePaths::default()
            };
            Ok(decode_run_with(model, dtype, batch, prompt, steps, paths)?.step_ms)
        };
        let gathered = step(CpuAttention::Gather)?;
        let paged = step(CpuAttention::Paged)?;
        rows.push(vec![
            batch.to_string(),
            format!("{prompt} + {steps}"),
            format!("{gathered:.1}"),
            format!("{paged:.1}"),
            format!("{:.2}x", gathered / paged),
        ]);
    }
    Ok(rows)
}
