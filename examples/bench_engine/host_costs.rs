//! What one row of logits costs on the host: the routing signals before
//! (a chain of tensor ops) and now (one host pass), and the sampler.

use std::time::Instant;

use anyhow::Result;
use rand::{Rng, SeedableRng};
use subserver::sampling::signals::row_stats;
use subserver::sampling::{Sampler, SamplingParams};

/// Mean microseconds of `f` over `iters` calls.
fn micros(iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / iters as f64)
}

/// What one row of `vocab` logits costs on the host: the routing signals as
/// the chain of tensor ops the policies ran before (log-softmax, exp, mul,
/// sum) and as the one host pass they run now, and the sampler (greedy; and
/// temperature 0.8 with top-k 50, top-p 0.95, min-p 0.01).
pub fn sampling_costs(vocab: usize) -> Result<Vec<Vec<String>>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let row: Vec<f32> = (0..vocab).map(|_| rng.random_range(-8.0f32..8.0)).collect();
    let t = tch::Tensor::from_slice(&row).view([1, vocab as i64]);
    let iters = 200;
    let chain = micros(iters, || {
        let logp = t.f_log_softmax(-1, tch::Kind::Float)?;
        let h = logp
            .f_exp()?
            .f_mul(&logp)?
            .f_sum_dim_intlist(-1, false, tch::Kind::Float)?;
        let _ = Vec::<f32>::try_from(&h.f_neg()?)?;
        Ok(())
    })?;
    let pass = micros(iters, || {
        std::hint::black_box(row_stats(&row));
        Ok(())
    })?;
    let mut greedy = Sampler::new(&SamplingParams::greedy(1), 0);
    let greedy_us = micros(iters, || {
        greedy.sample(&row)?;
        Ok(())
    })?;
    let params = SamplingParams {
        temperature: 0.8,
        top_k: 50,
        top_p: 0.95,
        min_p: 0.01,
        seed: Some(1),
        ..SamplingParams::default()
    };
    let mut random = Sampler::new(&params, 0);
    let random_us = micros(iters, || {
        random.sample(&row)?;
        Ok(())
    })?;
    Ok(vec![
        vec![
            "normalized entropy: tensor-op chain (before)".into(),
            format!("{chain:.1}"),
        ],
        vec![
            "routing signals: one host pass (now: entropy, max prob, argmax, log-sum-exp)".into(),
            format!("{pass:.1}"),
        ],
        vec!["sampling: greedy".into(), format!("{greedy_us:.1}")],
        vec![
            "sampling: temperature 0.8, top-k 50, top-p 0.95, min-p 0.01".into(),
            format!("{random_us:.1}"),
        ],
    ])
}
