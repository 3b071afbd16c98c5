//! The Std. Serving baseline (the paper's fair baseline): one ordinary
//! single-model server per model, no peer protocol and no pending state, and
//! an external forwarder that asks for ONE token per call. Every call is a new
//! request (the servers reuse KV through their prefix caches); after each
//! token the same routing rule as TokenRouter's picks the next writer.
//!
//! `tokenrouter std-serving` runs it, and with `--serve` the gateway's
//! std-serving backend answers with it; `sim-bench` (crate `engine-bench`)
//! compares TokenRouter against it.

use tokio::sync::mpsc::UnboundedReceiver;

use crate::sampling::SamplingParams;
use crate::scheduler::client::{RequestError, StreamEvent};
use crate::scheduler::group::Group;
use policies::draw::uniform;

/// One single-model server per model (index = model index).
pub struct StdServers {
    /// Each is a one-member group running the `Single` policy.
    pub servers: Vec<Group>,
    /// End-of-sequence ids of the entry model (a forwarder asks each server
    /// for one token with `ignore_eos` and applies the stop rules itself).
    pub eos_ids: Vec<u32>,
}

impl StdServers {
    /// One ordinary single-model server per model of `cfg` (each a one-member
    /// group running the `Single` policy, eager steps), and the forwarding
    /// rule from the config's policy. Only Bernoulli routing (`Random`) is
    /// available to the forwarder so far.
    pub fn from_config(
        cfg: &crate::config::EngineConfig,
    ) -> Result<
        (Self, ForwardRule, Option<crate::tokenizer::TextTokenizer>),
        crate::service::ServiceError,
    > {
        use crate::service::ServiceError;
        let name = cfg.policy().name.as_str();
        if !matches!(name, "Random" | "Bernoulli") {
            return Err(ServiceError::Unsupported(format!(
                "std-serving forwards with Bernoulli routing; scheduler_class `{name}` is not available to it"
            )));
        }
        let kwargs = serde_json::Value::Object(cfg.policy().kwargs.clone());
        let probability = policies::kwarg_f64(&kwargs, "probability")?.unwrap_or(0.5);
        let seed = policies::kwarg_u64(&kwargs, "seed")?.unwrap_or(0);
        let entry = cfg.entry_index();
        let large = policies::kwarg_u64(&kwargs, "target")?
            .map(|t| t as usize)
            .unwrap_or(cfg.models().len().saturating_sub(1));
        let mut servers = Vec::new();
        let mut tokenizer = None;
        let mut eos_ids = Vec::new();
        for i in 0..cfg.models().len() {
            let (runner, tok) = crate::service::build::runner(cfg, i, i == entry)?;
            if i == entry {
                tokenizer = tok;
                eos_ids = runner.info().eos_ids.clone();
            }
            let member = crate::scheduler::group::MemberSpec {
                name: cfg.models()[i].name.clone(),
                runner,
                policy: Box::new(policies::single::SinglePolicy),
                tokenizer: None,
                thresholds: vec![1],
            };
            let settings = crate::scheduler::group::GroupSettings {
                mode: crate::config::ExecutionMode::Async,
                ..crate::scheduler::group::GroupSettings::default()
            };
            servers.push(Group::start(vec![member], settings));
        }
        let rule = ForwardRule {
            probability,
            seed,
            small: entry,
            large,
        };
        Ok((Self { servers, eos_ids }, rule, tokenizer))
    }
}

/// The routing rule the forwarder applies: R2R hand-over with a Bernoulli signal.
#[derive(Debug, Clone, Copy)]
pub struct ForwardRule {
    /// Probability the small model's token is rewritten by the large model.
    pub probability: f64,
    /// Seed mixed into each request's draws.
    pub seed: u64,
    /// The model that writes by default.
    pub small: usize,
    /// The model that rewrites.
    pub large: usize,
}

fn one_token(server: &Group, seq: &[u32], params: &SamplingParams) -> Result<u32, RequestError> {
    let mut p = params.clone();
    p.max_tokens = 1;
    let (_rid, mut rx): (_, UnboundedReceiver<StreamEvent>) = server.submit(seq.to_vec(), p);
    let mut token = None;
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            StreamEvent::Token { token: t, .. } => token = Some(t),
            StreamEvent::Finished { .. } => break,
            StreamEvent::Failed(e) => return Err(e),
        }
    }
    token.ok_or(RequestError::Engine(
        "a server finished without a token".into(),
    ))
}

/// Writes up to `max_tokens` tokens for `prompt`, one call per token, and
/// reports each committed token (with its writer) to `on_token`. Returns when
/// done, when `on_token` returns false, or on error.
pub fn generate(
    servers: &StdServers,
    rule: ForwardRule,
    request_seed: u64,
    prompt: &[u32],
    max_tokens: usize,
    params: &SamplingParams,
    mut on_token: impl FnMut(u32, usize) -> bool,
) -> Result<Vec<u32>, RequestError> {
    let mut seq = prompt.to_vec();
    for _ in 0..max_tokens {
        let position = seq.len();
        let small_token = one_token(&servers.servers[rule.small], &seq, params)?;
        let (token, writer) = if uniform(request_seed ^ rule.seed, position, 0) < rule.probability {
            (
                one_token(&servers.servers[rule.large], &seq, params)?,
                rule.large,
            )
        } else {
            (small_token, rule.small)
        };
        seq.push(token);
        if !on_token(token, writer) {
            break;
        }
    }
    Ok(seq[prompt.len()..].to_vec())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::runner::sim::{SimRunner, StepLatency};
    use crate::scheduler::group::{GroupSettings, MemberSpec};

    /// Records each step's (new tokens, context) instead of timing it.
    struct Recorder(Arc<Mutex<Vec<(usize, usize)>>>);

    impl StepLatency for Recorder {
        fn step_ms(&self, _batch: usize, new_tokens: usize, context_tokens: usize) -> f64 {
            if let Ok(mut seen) = self.0.lock() {
                seen.push((new_tokens, context_tokens));
            }
            0.0
        }
    }

    const BLOCK: usize = 4;

    fn server(seen: &Arc<Mutex<Vec<(usize, usize)>>>, seed: u64) -> Group {
        let runner = SimRunner::new(
            "sim",
            100,
            vec![0],
            Box::new(Recorder(seen.clone())),
            4096,
            BLOCK,
            seed,
        )
        .unwrap();
        let member = MemberSpec {
            name: format!("m{seed}"),
            runner: Box::new(runner),
            policy: Box::new(policies::single::SinglePolicy),
            tokenizer: None,
            thresholds: vec![1],
        };
        let settings = GroupSettings {
            mode: crate::config::ExecutionMode::Async,
            ..GroupSettings::default()
        };
        Group::start(vec![member], settings)
    }

    #[test]
    fn every_call_prefills_what_its_server_has_not_cached() {
        let small_seen = Arc::new(Mutex::new(Vec::new()));
        let large_seen = Arc::new(Mutex::new(Vec::new()));
        let servers = StdServers {
            servers: vec![server(&small_seen, 1), server(&large_seen, 2)],
            eos_ids: vec![0],
        };
        let rule = ForwardRule {
            probability: 0.35,
            seed: 5,
            small: 0,
            large: 1,
        };
        let prompt: Vec<u32> = (1..=10).collect();
        let params = SamplingParams {
            ignore_eos: true,
            ..SamplingParams::greedy(1)
        };
        // The sequence length at each of the large model's turns.
        let mut large_calls = Vec::new();
        let mut len = prompt.len();
        let out = generate(&servers, rule, 9, &prompt, 40, &params, |_, writer| {
            if writer == rule.large {
                large_calls.push(len);
            }
            len += 1;
            true
        })
        .unwrap();
        assert_eq!(out.len(), 40);
        assert!(
            large_calls.len() >= 2,
            "the large model returns: {large_calls:?}"
        );
        // A call's prompt hits its server's prefix cache only in whole blocks
        // of what that server computed at its previous call (the prompt of
        // that call; its sampled token was never fed), so each return
        // prefills every token written since, rounded to the block.
        let expected: Vec<(usize, usize)> = large_calls
            .iter()
            .enumerate()
            .map(|(k, &l)| {
                let cached = if k == 0 {
                    0
                } else {
                    large_calls[k - 1] / BLOCK * BLOCK
                };
                (l - cached, l)
            })
            .collect();
        assert_eq!(*large_seen.lock().unwrap(), expected);
        // The small server sees every position, one call per token.
        let small = small_seen.lock().unwrap();
        assert_eq!(small.len(), 40);
        assert_eq!(small[0], (prompt.len(), prompt.len()));
        for (i, &(new, ctx)) in small.iter().enumerate().skip(1) {
            let l = prompt.len() + i;
            assert_eq!((new, ctx), (l - (l - 1) / BLOCK * BLOCK, l), "call {i}");
        }
    }
}
