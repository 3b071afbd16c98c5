//! The simulated backend: a `ModelRunner` with no tensors. A step takes the
//! configured time on the real clock (sleep, then spin for the last stretch so
//! short steps stay precise) and yields seeded tokens. It keeps a real
//! `KvManager`, so admission, preemption and block accounting are exercised
//! exactly as with libtorch. The scheduler cannot tell it from the tch runner.
//! The step time may grow with the tokens a step brings (prefill) and with
//! the context its sequences span, so long answers and re-prefilled returns
//! cost what they cost an engine.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use tch::Tensor;

use crate::error::EngineError;
use crate::kv::KvManager;
use crate::runner::{ModelRunner, RunnerInfo, StepBatch, StepOutput};

/// Step time as a function of the batch.
pub trait StepLatency: Send {
    /// Milliseconds a step of `batch` requests with `new_tokens` tokens
    /// takes, when the requests span `context_tokens` positions in all
    /// (cached and new).
    fn step_ms(&self, batch: usize, new_tokens: usize, context_tokens: usize) -> f64;
}

impl StepLatency for crate::config::LatencyModel {
    fn step_ms(&self, batch: usize, new_tokens: usize, context_tokens: usize) -> f64 {
        self.step_ms_in_context(batch, new_tokens, context_tokens)
    }
}

/// Sleeps until `deadline`: coarse sleep, then a short spin (sleep alone
/// overshoots by ~0.1 ms, which matters at 6 ms steps).
pub fn sleep_until(deadline: Instant) {
    const SPIN: Duration = Duration::from_micros(300);
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A runner that only takes time.
pub struct SimRunner {
    info: RunnerInfo,
    kv: KvManager,
    latency: Box<dyn StepLatency>,
    rng: ChaCha8Rng,
    seed: u64,
    logits: bool,
    emits_eos: bool,
    free: Option<Arc<AtomicBool>>,
}

impl SimRunner {
    /// A simulated model. Tokens are drawn uniformly from `[0, vocab)` minus the EOS ids.
    pub fn new(
        name: &str,
        vocab_size: usize,
        eos_ids: Vec<u32>,
        latency: Box<dyn StepLatency>,
        kv_tokens: usize,
        block_size: usize,
        seed: u64,
    ) -> Result<Self, EngineError> {
        let num_blocks = kv_tokens.div_ceil(block_size.max(1));
        let info = RunnerInfo {
            name: name.to_string(),
            vocab_size,
            hidden_size: 0,
            eos_ids,
            max_context: usize::MAX / 2,
            block_size,
            num_blocks,
        };
        Ok(Self {
            info,
            kv: KvManager::new(num_blocks, block_size, true)?,
            latency,
            rng: ChaCha8Rng::seed_from_u64(seed),
            seed,
            logits: false,
            emits_eos: false,
            free: None,
        })
    }

    /// Steps take no time while `free` is set: a benchmark uses it to bring
    /// its requests to a staggered start (long histories already prefilled)
    /// without spending minutes of simulated prefill that its steady state
    /// would never pay.
    pub fn with_free_while(mut self, free: Arc<AtomicBool>) -> Self {
        self.free = Some(free);
        self
    }

    /// Makes steps return seeded random logits instead of tokens, so the
    /// scheduler samples and logit-reading policies (entropy thresholds,
    /// logprobs) run. Each row's sharpness is drawn too (standard deviation
    /// `e^u`, u uniform in [-2, 2.5]), so the entropy of the rows spreads
    /// from near-uniform to near-certain and thresholds have something to cut.
    /// A row depends only on the runner's seed, the position it predicts
    /// and the token before it, never on what else is in the batch, what ran
    /// before or how the prompt was chunked or cached: the same request with
    /// the same sampling seed gets the same text.
    pub fn with_logits(mut self, on: bool) -> Self {
        self.logits = on;
        self
    }

    /// Lets the EOS ids be drawn like any other token (by default they never
    /// are, so requests run to `max_tokens`): for tests of what happens at EOS.
    pub fn with_eos_emitted(mut self, on: bool) -> Self {
        self.emits_eos = on;
        self
    }

    fn random_logits(&self, items: &[crate::runner::StepItem]) -> Result<Tensor, EngineError> {
        let v = self.info.vocab_size;
        let rows = items.len();
        let mut flat = Vec::with_capacity(rows * v);
        for item in items {
            let last = item.tokens.last().copied().unwrap_or(0);
            let position = item.start + item.tokens.len();
            let mut rng = ChaCha8Rng::seed_from_u64(row_seed(self.seed, position, last));
            let scale = rng.random_range(-2.0f32..2.5).exp();
            for t in 0..v {
                let z: f32 = rng.sample(StandardNormal);
                let masked = !self.emits_eos && self.info.eos_ids.contains(&(t as u32));
                flat.push(if masked { f32::NEG_INFINITY } else { z * scale });
            }
        }
        Ok(Tensor::f_from_slice(&flat)?.f_reshape([rows as i64, v as i64])?)
    }

    fn draw(&mut self) -> u32 {
        loop {
            let t = self.rng.random_range(0..self.info.vocab_size as u32);
            if self.emits_eos || !self.info.eos_ids.contains(&t) {
                return t;
            }
        }
    }
}

/// A 64-bit mix (FNV-1a) of the runner's seed, a position and a token.
fn row_seed(seed: u64, position: usize, token: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for x in [position as u64, u64::from(token)] {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

impl ModelRunner for SimRunner {
    fn info(&self) -> &RunnerInfo {
        &self.info
    }

    fn forward(&mut self, batch: &StepBatch) -> Result<StepOutput, EngineError> {
        let start = Instant::now();
        for item in &batch.items {
            self.kv.reserve(item.rid, item.start + item.tokens.len())?;
        }
        // Every item reads its whole sequence: what was cached before and
        // what this step brings (a prefill chunk, or one decode token).
        let context: usize = batch.items.iter().map(|i| i.start + i.tokens.len()).sum();
        let ms = self
            .latency
            .step_ms(batch.items.len(), batch.num_tokens(), context);
        let out = if self.logits {
            StepOutput {
                logits: Some(self.random_logits(&batch.items)?),
                hidden: None,
                tokens: None,
                entropy_sums: None,
            }
        } else {
            StepOutput {
                logits: None,
                hidden: None,
                tokens: Some((0..batch.items.len()).map(|_| self.draw()).collect()),
                entropy_sums: None,
            }
        };
        if !self
            .free
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            sleep_until(start + Duration::from_secs_f64(ms.max(0.0) / 1e3));
        }
        Ok(out)
    }

    fn kv(&mut self) -> &mut KvManager {
        &mut self.kv
    }

    fn kv_ref(&self) -> &KvManager {
        &self.kv
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LatencyModel;
    use crate::runner::StepItem;

    #[test]
    fn steps_take_the_configured_time_and_reserve_kv() {
        let lat = LatencyModel::linear(5.0, 1.0, 0.0).unwrap();
        let mut r = SimRunner::new("sim", 100, vec![0], Box::new(lat), 1024, 16, 1).unwrap();
        r.kv().admit(1, &[1, 2, 3]).unwrap();
        r.kv().admit(2, &[4]).unwrap();
        let batch = StepBatch {
            entropy_items: vec![],
            items: vec![
                StepItem {
                    rid: 1,
                    start: 0,
                    tokens: vec![1, 2, 3],
                },
                StepItem {
                    rid: 2,
                    start: 0,
                    tokens: vec![4],
                },
            ],
        };
        let t0 = Instant::now();
        let out = r.forward(&batch).unwrap();
        let took = t0.elapsed().as_secs_f64() * 1e3;
        // A step never returns early; how late it is depends on the load.
        assert!(took >= 7.0, "step took {took} ms, want at least 7");
        let toks = out.tokens.unwrap();
        assert_eq!(toks.len(), 2);
        assert!(toks.iter().all(|&t| t != 0 && t < 100));
        assert_eq!(r.kv_ref().num_requests(), 2);
    }

    /// Records the arguments of each step instead of timing anything.
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<(usize, usize, usize)>>>);

    impl StepLatency for Recorder {
        fn step_ms(&self, batch: usize, new_tokens: usize, context_tokens: usize) -> f64 {
            self.0
                .lock()
                .unwrap()
                .push((batch, new_tokens, context_tokens));
            0.0
        }
    }

    #[test]
    fn a_step_is_charged_for_its_context_and_new_tokens() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let rec = Box::new(Recorder(seen.clone()));
        let mut r = SimRunner::new("sim", 100, vec![0], rec, 4096, 16, 1).unwrap();
        r.kv().admit(1, &[1; 40]).unwrap();
        r.kv().admit(2, &[2; 3]).unwrap();
        // Request 1 decodes at position 40 (40 cached), request 2 prefills 3.
        r.forward(&StepBatch {
            entropy_items: vec![],
            items: vec![
                StepItem {
                    rid: 1,
                    start: 40,
                    tokens: vec![7],
                },
                StepItem {
                    rid: 2,
                    start: 0,
                    tokens: vec![2, 2, 2],
                },
            ],
        })
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![(2, 4, 41 + 3)]);
        // And the model charges it: 1 ms per 1,000 context tokens.
        let lat = LatencyModel::linear(1.0, 0.0, 0.0)
            .unwrap()
            .with_per_context(0.001)
            .unwrap();
        assert!((StepLatency::step_ms(&lat, 2, 4, 44_000) - 45.0).abs() < 1e-9);
    }

    #[test]
    fn a_logits_row_depends_on_its_item_only() {
        let mk = || {
            let lat = LatencyModel::linear(0.0, 0.0, 0.0).unwrap();
            let mut r = SimRunner::new("s", 50, vec![], Box::new(lat), 256, 16, 9)
                .unwrap()
                .with_logits(true);
            for rid in [1, 7, 8] {
                r.kv().admit(rid, &[1]).unwrap();
            }
            r
        };
        let item = |rid, tokens: Vec<u32>| StepItem {
            rid,
            start: 0,
            tokens,
        };
        let (mut a, mut b) = (mk(), mk());
        // `b` ran another step first and batches the item behind another.
        b.forward(&StepBatch {
            entropy_items: vec![],
            items: vec![item(7, vec![3, 4])],
        })
        .unwrap();
        let la = a
            .forward(&StepBatch {
                entropy_items: vec![],
                items: vec![item(1, vec![5, 6, 7])],
            })
            .unwrap()
            .logits
            .unwrap();
        let lb = b
            .forward(&StepBatch {
                entropy_items: vec![],
                items: vec![item(8, vec![2]), item(1, vec![5, 6, 7])],
            })
            .unwrap()
            .logits
            .unwrap();
        let row = |t: &Tensor, i: i64| Vec::<f32>::try_from(t.get(i)).unwrap();
        assert_eq!(row(&la, 0), row(&lb, 1));
        assert_ne!(row(&lb, 0), row(&lb, 1));
    }

    #[test]
    fn same_seed_same_tokens() {
        let mk = || {
            SimRunner::new(
                "s",
                50,
                vec![],
                Box::new(LatencyModel::linear(0.0, 0.0, 0.0).unwrap()),
                64,
                16,
                9,
            )
            .unwrap()
        };
        let (mut a, mut b) = (mk(), mk());
        let draws_a: Vec<u32> = (0..20).map(|_| a.draw()).collect();
        let draws_b: Vec<u32> = (0..20).map(|_| b.draw()).collect();
        assert_eq!(draws_a, draws_b);
    }
}
