//! What ME's direct route saves, counted on the simulated backend: the
//! same requests through a three-model ME group with the pen holder
//! drawing the next writer (`direct: true`) and with every position drawn at
//! the home (`direct: false`, the detour). Requests run one at a time in
//! `async` mode, so every step holds one request and the step counts are
//! exact, not timings: `make bench-me` prints them and writes
//! `docs/results/me-direct.md`; a unit test checks the same run.

use std::time::{Duration, Instant};

use policies::{build_in, Placement, PolicyEnv};
use subserver::config::LatencyModel;
use subserver::engine::EngineLimits;
use subserver::peer::message::ModelIdx;
use subserver::runner::sim::SimRunner;
use subserver::sampling::SamplingParams;
use subserver::scheduler::batching::ExecutionMode;
use subserver::scheduler::client::StreamEvent;
use subserver::scheduler::group::{Group, GroupSettings, MemberSpec};

/// What to run.
#[derive(Debug, Clone)]
pub struct MeRouteOptions {
    /// ME weights, one per model (model 0 is the entry).
    pub weights: Vec<f64>,
    /// Requests, each with its own sampling seed (see `run_seed`) and prompt.
    pub requests: u64,
    /// Output tokens per request.
    pub max_tokens: usize,
    /// Request `i` has sampling seed `run_seed << 32 | i` (ME draws from it).
    pub run_seed: u64,
}

impl Default for MeRouteOptions {
    fn default() -> Self {
        Self {
            weights: vec![0.5, 0.3, 0.2],
            requests: 16,
            max_tokens: 64,
            run_seed: 0,
        }
    }
}

/// Counts of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct MeRouteRun {
    /// Forward steps per model.
    pub steps: Vec<u64>,
    /// Hand-overs the home passed from one guest to another without a step.
    pub passed_on: u64,
    /// Routing decisions `decisions[from][to]` (`to == from`: stayed).
    pub decisions: Vec<Vec<u64>>,
    /// Peer messages sent, all models together.
    pub messages: u64,
    /// Every request's `(token, writer)` sequence, in request order.
    pub outputs: Vec<Vec<(u32, ModelIdx)>>,
}

impl MeRouteRun {
    /// Output tokens written by each model.
    pub fn tokens_by_model(&self) -> Vec<usize> {
        let mut by = vec![0; self.steps.len()];
        for &(_, w) in self.outputs.iter().flatten() {
            by[w as usize] += 1;
        }
        by
    }

    /// Decisions at a guest naming another guest (hand-overs that skip the home).
    pub fn guest_to_guest(&self) -> u64 {
        let mut n = 0;
        for (from, row) in self.decisions.iter().enumerate().skip(1) {
            for (to, &c) in row.iter().enumerate().skip(1) {
                if to != from {
                    n += c;
                }
            }
        }
        n
    }
}

/// Runs the requests through a fresh group; `direct` is ME's switch.
pub fn run(opts: &MeRouteOptions, direct: bool) -> Result<MeRouteRun, String> {
    let n = opts.weights.len();
    let kwargs = serde_json::json!({
        "weights": opts.weights,
        "seed": 0,
        "direct": direct,
    });
    let mut members = Vec::with_capacity(n);
    for m in 0..n {
        let latency = LatencyModel::linear(0.0, 0.0, 0.0).map_err(|e| e.to_string())?;
        let runner = SimRunner::new(
            "sim",
            1000,
            vec![0],
            Box::new(latency),
            1 << 16,
            16,
            m as u64,
        )
        .map_err(|e| e.to_string())?
        .with_logits(true);
        let at = Placement {
            model: m as ModelIdx,
            num_models: n,
            entry: 0,
        };
        members.push(MemberSpec {
            name: format!("m{m}"),
            runner: Box::new(runner),
            policy: build_in("ME", &kwargs, at, &PolicyEnv::default())
                .map_err(|e| e.to_string())?,
            tokenizer: None,
            thresholds: vec![1],
        });
    }
    let settings = GroupSettings {
        mode: ExecutionMode::Async,
        limits: EngineLimits {
            max_batched_tokens: 256,
            max_batch_size: 8,
        },
        ..GroupSettings::default()
    };
    let group = Group::start(members, settings);
    let mut outputs = Vec::new();
    for i in 0..opts.requests {
        let mut params = SamplingParams::greedy(opts.max_tokens);
        params.seed = Some((opts.run_seed << 32) | i);
        let prompt = vec![1 + i as u32, 2, 3, 4, 5];
        let (_, mut rx) = group.submit(prompt, params);
        outputs.push(collect(&mut rx)?);
    }
    // A request ends at its home before its guests hear the release; wait
    // for every model to be idle so the counts are final.
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..n).any(|m| group.stats(m as ModelIdx).kv_requests > 0) {
        if Instant::now() > deadline {
            return Err("a model still holds a request after every request ended".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats: Vec<_> = (0..n).map(|m| group.stats(m as ModelIdx)).collect();
    Ok(MeRouteRun {
        steps: stats.iter().map(|s| s.steps).collect(),
        passed_on: stats[0].passed_on,
        decisions: stats.iter().map(|s| s.decisions.clone()).collect(),
        messages: stats.iter().map(|s| s.messages).sum(),
        outputs,
    })
}

fn collect(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
) -> Result<Vec<(u32, ModelIdx)>, String> {
    let mut out = Vec::new();
    loop {
        match rx.blocking_recv() {
            Some(StreamEvent::Token { token, writer, .. }) => out.push((token, writer)),
            Some(StreamEvent::Finished { .. }) => return Ok(out),
            Some(StreamEvent::Failed(e)) => return Err(e.to_string()),
            None => return Err("the request's stream closed without an outcome".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Same seeds, same writers, same tokens; the direct route passes the
    /// pen guest to guest and the home steps less.
    #[test]
    fn the_direct_route_keeps_every_writer_and_token_and_saves_home_steps() {
        let opts = MeRouteOptions {
            requests: 6,
            max_tokens: 40,
            ..MeRouteOptions::default()
        };
        let detour = run(&opts, false).unwrap();
        let direct = run(&opts, true).unwrap();
        assert_eq!(direct.outputs, detour.outputs, "writers or tokens changed");
        for out in &direct.outputs {
            assert_eq!(out.len(), opts.max_tokens);
        }
        let by = direct.tokens_by_model();
        assert!(by.iter().all(|&k| k > 0), "some model never wrote: {by:?}");
        assert_eq!(detour.passed_on, 0);
        assert_eq!(detour.guest_to_guest(), 0);
        assert!(direct.passed_on > 0, "no guest -> guest hand-over");
        // A guest that wrote the last token may have drawn a guest for a
        // position that never comes.
        assert!(direct.passed_on <= direct.guest_to_guest());
        assert!(
            direct.steps[0] < detour.steps[0],
            "home steps: direct {} vs detour {}",
            direct.steps[0],
            detour.steps[0]
        );
        // A guest steps once per token it writes either way.
        assert_eq!(direct.steps[1..], detour.steps[1..]);
        // Exact and repeatable: a second run counts the same.
        assert_eq!(run(&opts, true).unwrap(), direct);
    }
}
