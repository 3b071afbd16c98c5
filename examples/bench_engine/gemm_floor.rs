//! The GEMM floor of one decode step: the step's weight matmuls alone, at
//! the model's shapes and dtype, through libtorch's plain `linear` (the call
//! transformers makes) and through our runner's projection
//! (`subserver::model::linear`: for bf16 on the CPU, weights packed at
//! load for oneDNN or for `kernels::gemm`, per CPU). Our step cannot be faster than our floor, so transformers'
//! step time over it bounds how far our engine can lead transformers.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use loadgen::page::Page;
use subserver::config::DType;
use subserver::model::config::ModelConfig;
use subserver::model::linear::{Gemm, Linear};
use tch::{Device, Kind, Tensor};

/// Timed repetitions after the warm-up.
const ITERS: usize = 20;
const WARMUP: usize = 3;

/// Milliseconds of one decode step's weight GEMMs at `batch` sequences:
/// per layer the fused QKV, the output projection, the fused gate/up and
/// the down projection, then the LM head. Attention, norms and RoPE are
/// left out: this is a lower bound on a step, not an estimate of one.
pub fn step_ms(cfg: &ModelConfig, dtype: DType, batch: usize, gemm: Gemm) -> Result<f64> {
    let kind = Kind::from(dtype);
    let h = cfg.hidden_size as i64;
    let q = (cfg.num_attention_heads * cfg.head_dim()) as i64;
    let kv = (cfg.kv_heads() * cfg.head_dim()) as i64;
    let inter = cfg.intermediate_size as i64;
    let weight = |out: i64, inp: i64| -> Result<Linear> {
        Ok(Linear::new(
            Tensor::f_randn([out, inp], (kind, Device::Cpu))?,
            None,
            gemm,
        )?)
    };
    // Every layer its own weights, so the step streams as many bytes from
    // memory as a real one does.
    let layers: Vec<[Linear; 4]> = (0..cfg.num_hidden_layers)
        .map(|_| {
            Ok([
                weight(q + 2 * kv, h)?,
                weight(h, q)?,
                weight(2 * inter, h)?,
                weight(h, inter)?,
            ])
        })
        .collect::<Result<_>>()?;
    let head = weight(cfg.vocab_size as i64, h)?;
    let x = Tensor::f_randn([batch as i64, h], (kind, Device::Cpu))?;
    let attn_out = Tensor::f_randn([batch as i64, q], (kind, Device::Cpu))?;
    let act = Tensor::f_randn([batch as i64, inter], (kind, Device::Cpu))?;
    let step = || -> Result<()> {
        for [qkv, o, gate_up, down] in &layers {
            drop(qkv.forward(&x)?);
            drop(o.forward(&attn_out)?);
            drop(gate_up.forward(&x)?);
            drop(down.forward(&act)?);
        }
        drop(head.forward(&x)?);
        Ok(())
    };
    for _ in 0..WARMUP {
        step()?;
    }
    let t0 = Instant::now();
    for _ in 0..ITERS {
        step()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e3 / ITERS as f64)
}

/// The highest engine / transformers throughput ratio any engine on these
/// GEMMs can reach: transformers' step time over the GEMM floor.
pub fn ceiling(transformers_tok_s: f64, batch: usize, floor_ms: f64) -> f64 {
    let theirs_ms = batch as f64 * 1e3 / transformers_tok_s;
    theirs_ms / floor_ms
}

/// The page's section: the GEMM floor per batch against our bare step and
/// transformers' step (`steps`: batch, bare step ms, transformers tok/s of
/// every run), and, where the transformers target is `missed`, why, from those numbers.
pub fn section(
    page: &mut Page,
    model: &Path,
    batches: &[usize],
    dtype: DType,
    steps: &[(usize, f64, f64)],
    missed: bool,
) -> Result<()> {
    let cfg = subserver::model::dir::ModelDir::open(model)?.config;
    let mean = |b: usize, f: fn(&(usize, f64, f64)) -> f64| {
        super::mean(&steps.iter().filter(|s| s.0 == b).map(f).collect::<Vec<_>>())
    };
    let ours = Gemm::for_weights(Kind::from(dtype), Device::Cpu)?;
    let mut rows = Vec::new();
    let mut at16 = None;
    for &b in batches {
        let plain = step_ms(&cfg, dtype, b, Gemm::Plain)?;
        let floor = step_ms(&cfg, dtype, b, ours)?;
        let (bare_ms, hf) = (mean(b, |s| s.1), mean(b, |s| s.2));
        let ceiling = ceiling(hf, b, floor);
        if b == 16 {
            at16 = Some((floor, bare_ms, b as f64 * 1e3 / hf, ceiling));
        }
        rows.push(vec![
            b.to_string(),
            format!("{plain:.1}"),
            format!("{floor:.1}"),
            format!("{bare_ms:.1}"),
            format!("{:.0}%", 100.0 * floor / bare_ms),
            format!("{:.1}", b as f64 * 1e3 / hf),
            format!("{ceiling:.2}x"),
        ]);
    }
    page.section("The GEMM floor");
    page.para(&format!(
        "One decode step's weight matmuls alone (per layer the fused QKV, the output \
             projection, the fused gate/up and the down projection, then the LM head; random \
             weights of the model's shapes in the run's dtype, every layer its own); mean of \
             20 steps after 3 warm-ups, same threads. *Plain*: libtorch's `linear`, the call \
             transformers makes. *Ours*: our runner's projection, here {}. Attention, norms \
             and RoPE are left out, so the floor is a lower bound on any step built on these \
             GEMMs. *Ceiling*: transformers' step over our floor, the most our engine can lead \
             it by. Step times are the means of the runs above.",
        match ours {
            Gemm::Packed => "oneDNN on weights packed at load (`subserver::model::linear`)",
            Gemm::Widened =>
                "`kernels::gemm` on weights packed at load: bf16 widened to f32 in registers, \
                 f32 FMAs (`subserver::model::linear`)",
            Gemm::Plain => "the same plain `linear`",
            // Random weights of a safetensors shape are never GGUF blocks.
            Gemm::Quantized => "`kernels::quant` on the GGUF's own blocks",
        }
    ));
    page.table(
        &[
            "batch",
            "plain GEMMs ms / step",
            "our GEMM floor ms / step",
            "our bare step ms",
            "floor / our bare step",
            "transformers step ms",
            "ceiling: engine / transformers",
        ],
        &rows,
    );
    if let Some((floor, bare, theirs, ceiling)) = at16.filter(|_| missed) {
        let target = super::targets::target("engine.vs_transformers_min")?;
        let goal = theirs / target;
        let why = if ceiling < target {
            format!(
                "the GEMMs alone already take more than that, so no engine on these GEMMs can \
                 meet it: it needs cheaper GEMMs (fewer bytes per weight, as llama.cpp's 4-bit \
                 blocks). Our bare step spends another {:.1} ms around them.",
                bare - floor
            )
        } else {
            format!(
                "that leaves {:.1} ms for everything else in the forward (attention over the \
                 paged KV, norms, RoPE, KV writes), which our bare step spends {:.1} ms on now: \
                 the target needs that cut by {:.0}%, and the engine's own overhead on top to \
                 vanish.",
                goal - floor,
                bare - floor,
                100.0 * (1.0 - (goal - floor) / (bare - floor).max(1e-9))
            )
        };
        page.para(&format!(
            "Why the {t}x target is not met: {t}x transformers at batch 16 is a step of {goal:.1} ms. \
             The weight GEMMs alone take {floor:.1} ms ({:.0}% of our bare step of {bare:.1} ms; \
             ceiling {ceiling:.2}x); {why}",
            100.0 * floor / bare,
            t = target,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_their_step_over_the_floor() {
        // 16 sequences at 320 tok/s: a 50 ms step; a 40 ms floor leaves 1.25x.
        assert!((ceiling(320.0, 16, 40.0) - 1.25).abs() < 1e-12);
    }
}
