//! `Sampler`: one request's token picker, with its own random stream.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

use super::filters::{draw, filter_candidates, Candidate, FilterParams};
use super::{SamplingError, SamplingParams};

/// Temperatures below this are greedy (vLLM's `_SAMPLING_EPS`): dividing
/// by them would overflow and the result is the argmax anyway.
pub const GREEDY_TEMPERATURE_EPS: f32 = 1e-5;

/// Picks the next token of one request from a row of logits.
///
/// Random sampling draws from a ChaCha20 stream seeded by the request's
/// `seed` (or the engine's fallback seed), one draw per step, so the same
/// seed and the same logits give the same tokens, batched or alone.
#[derive(Debug, Clone)]
pub struct Sampler {
    filter: FilterParams,
    rng: ChaCha20Rng,
    /// Reused candidate buffer: no allocation per step once warm.
    scratch: Vec<Candidate>,
}

impl Sampler {
    /// A sampler for `params` (validate them first with
    /// [`SamplingParams::validate`]; out-of-range values are not rejected
    /// here). `fallback_seed` seeds the stream when `params.seed` is `None`.
    pub fn new(params: &SamplingParams, fallback_seed: u64) -> Self {
        Self {
            filter: FilterParams {
                temperature: params.temperature,
                top_k: params.top_k,
                top_p: params.top_p,
                min_p: params.min_p,
            },
            rng: ChaCha20Rng::seed_from_u64(params.seed.unwrap_or(fallback_seed)),
            scratch: Vec::new(),
        }
    }

    /// Whether this sampler always takes the argmax.
    pub fn is_greedy(&self) -> bool {
        let t = self.filter.temperature;
        t.is_nan() || t < GREEDY_TEMPERATURE_EPS
    }

    /// The next token: the argmax (lowest id on ties) when greedy, else a
    /// draw after temperature, top-k, top-p and min-p filtering.
    ///
    /// `NaN` and `-inf` logits are never chosen; a row with no finite logit,
    /// an empty row, or a `+inf` logit is an error.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        if logits.is_empty() {
            return Err(SamplingError::EmptyLogits);
        }
        if self.is_greedy() {
            return greedy(logits);
        }
        let u: f64 = self.rng.random();
        filter_candidates(logits, &self.filter, &mut self.scratch)?;
        Ok(draw(&self.scratch, u))
    }
}

/// Argmax over the finite logits, ties to the lowest id.
fn greedy(logits: &[f32]) -> Result<u32, SamplingError> {
    if let Some(i) = logits.iter().position(|&x| x == f32::INFINITY) {
        return Err(SamplingError::InfiniteLogit { token: i as u32 });
    }
    match kernels::argmax(logits) {
        Some(i) if logits[i as usize].is_finite() => Ok(i),
        _ => Err(SamplingError::NoFiniteLogits {
            vocab: logits.len(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(
        temperature: f32,
        top_k: usize,
        top_p: f32,
        min_p: f32,
        seed: Option<u64>,
    ) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            seed,
            ..SamplingParams::default()
        }
    }

    fn row(vocab: usize, salt: u32) -> Vec<f32> {
        (0..vocab as u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 1000) as f32 / 250.0)
            .collect()
    }

    #[test]
    fn greedy_takes_argmax_with_lowest_id_on_ties() {
        let mut s = Sampler::new(&SamplingParams::greedy(4), 0);
        assert!(s.is_greedy());
        assert_eq!(s.sample(&[0.1, 2.0, 2.0, -1.0]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, f32::NEG_INFINITY, -5.0]).unwrap(), 2);
        assert_eq!(
            s.sample(&[f32::NEG_INFINITY, f32::NAN]).unwrap_err(),
            SamplingError::NoFiniteLogits { vocab: 2 }
        );
        assert_eq!(
            s.sample(&[0.0, f32::INFINITY]).unwrap_err(),
            SamplingError::InfiniteLogit { token: 1 }
        );
        assert_eq!(s.sample(&[]).unwrap_err(), SamplingError::EmptyLogits);
        // Temperatures under the epsilon are greedy too.
        assert!(Sampler::new(&params(1e-6, 0, 1.0, 0.0, None), 0).is_greedy());
    }

    #[test]
    fn same_seed_same_logits_same_tokens() {
        let p = params(0.8, 50, 0.95, 0.01, Some(1234));
        let logits: Vec<Vec<f32>> = (0..64).map(|s| row(32_000, s)).collect();
        let run = |fallback| {
            let mut s = Sampler::new(&p, fallback);
            logits
                .iter()
                .map(|l| s.sample(l).unwrap())
                .collect::<Vec<u32>>()
        };
        let a = run(1);
        // The request seed wins over the fallback seed.
        assert_eq!(a, run(999));
        // A different seed gives a different stream.
        let mut other = Sampler::new(&params(0.8, 50, 0.95, 0.01, Some(4321)), 1);
        let b: Vec<u32> = logits.iter().map(|l| other.sample(l).unwrap()).collect();
        assert_ne!(a, b);
        // Without a request seed, the fallback seed decides.
        let p = params(0.8, 50, 0.95, 0.01, None);
        let mut x = Sampler::new(&p, 7);
        let mut y = Sampler::new(&p, 7);
        for l in &logits {
            assert_eq!(x.sample(l).unwrap(), y.sample(l).unwrap());
        }
    }

    #[test]
    fn samples_only_tokens_that_survive_filtering() {
        let logits = [0.0, 5.0, 4.9, 4.8, 1.0, f32::NEG_INFINITY];
        let mut s = Sampler::new(&params(1.0, 2, 1.0, 0.0, Some(3)), 0);
        for _ in 0..500 {
            let t = s.sample(&logits).unwrap();
            assert!(t == 1 || t == 2, "top_k=2 drew {t}");
        }
        let mut s = Sampler::new(&params(1.0, 0, 1.0, 0.5, Some(3)), 0);
        for _ in 0..500 {
            let t = s.sample(&logits).unwrap();
            // exp(4.8 - 5) = 0.82 >= 0.5; exp(1 - 5) < 0.5.
            assert!((1..=3).contains(&t), "min_p=0.5 drew {t}");
        }
    }

    #[test]
    fn empirical_frequencies_match_the_filtered_distribution() {
        // Probabilities 0.1, 0.2, 0.3, 0.4; top_k=3 renormalizes to 2/9, 3/9, 4/9.
        let logits: Vec<f32> = [0.1f64, 0.2, 0.3, 0.4]
            .iter()
            .map(|p| p.ln() as f32)
            .collect();
        let mut s = Sampler::new(&params(1.0, 3, 1.0, 0.0, Some(42)), 0);
        let n = 60_000;
        let mut counts = [0usize; 4];
        for _ in 0..n {
            counts[s.sample(&logits).unwrap() as usize] += 1;
        }
        assert_eq!(counts[0], 0);
        for (i, want) in [(1, 2.0 / 9.0), (2, 3.0 / 9.0), (3, 4.0 / 9.0)] {
            let got = counts[i] as f64 / n as f64;
            // 5 standard deviations of a binomial proportion at n = 60k is < 0.01.
            assert!((got - want).abs() < 0.01, "token {i}: {got} vs {want}");
        }
    }

    #[test]
    fn low_temperature_concentrates_and_high_temperature_spreads() {
        let logits = [0.0, 1.0];
        let freq_of_1 = |t: f32| {
            let mut s = Sampler::new(&params(t, 0, 1.0, 0.0, Some(5)), 0);
            (0..20_000)
                .filter(|_| s.sample(&logits).unwrap() == 1)
                .count() as f64
                / 20_000.0
        };
        // p(1) = 1 / (1 + e^{-1/T}): T=0.25 -> 0.982, T=1 -> 0.731, T=4 -> 0.562.
        assert!((freq_of_1(0.25) - 0.982).abs() < 0.01);
        assert!((freq_of_1(1.0) - 0.731).abs() < 0.015);
        assert!((freq_of_1(4.0) - 0.562).abs() < 0.015);
    }
}
