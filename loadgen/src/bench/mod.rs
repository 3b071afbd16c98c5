//! `tokenrouter bench`: a closed-loop load generator. At concurrency N, N
//! clients each send a request, wait for its last token, and send the next,
//! until `num_prompts` requests are done. Each request has its own seed.

pub mod output;
pub mod record;
pub mod summary;
pub mod work;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use crate::client::{send, Outcome, RequestSpec};
use crate::conn::Link;
use crate::dataset::Prompt;
use crate::seeds::request_seed;
pub use record::RequestRecord;
pub use summary::Summary;

/// Settings of one closed-loop run.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// What every request shares.
    pub spec: RequestSpec,
    /// Active requests.
    pub concurrency: usize,
    /// Measured requests.
    pub num_prompts: usize,
    /// Unmeasured requests sent first (same concurrency).
    pub warmup: usize,
    /// Tokens per request unless the prompt says otherwise.
    pub max_tokens: usize,
    /// The run's seed; request i gets `request_seed(seed, i)`.
    pub seed: u64,
    /// Show a progress bar.
    pub progress: bool,
}

/// Sends `count` requests from `prompts` (cyclically, starting at `first`)
/// with `settings.concurrency` clients, each on its own keep-alive
/// connection; returns them in index order.
async fn closed_loop(
    settings: &RunSettings,
    prompts: &Arc<Vec<Prompt>>,
    first: usize,
    count: usize,
    bar: &ProgressBar,
) -> Vec<RequestRecord> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..settings.concurrency.max(1) {
        let (settings, prompts, next, bar) =
            (settings.clone(), prompts.clone(), next.clone(), bar.clone());
        workers.push(tokio::spawn(async move {
            let mut done = Vec::new();
            let mut link = Link::new(&settings.spec.base_url);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return done;
                }
                let index = first + i;
                let p = &prompts[index % prompts.len()];
                let max_tokens = p.max_tokens.unwrap_or(settings.max_tokens);
                let seed = request_seed(settings.seed, index as u64);
                let started = Instant::now();
                let out = match &mut link {
                    Ok(link) => send(link, &settings.spec, &p.text, max_tokens, seed).await,
                    Err(e) => Outcome {
                        error: Some(e.to_string()),
                        ..Outcome::default()
                    },
                };
                bar.inc(1);
                done.push(RequestRecord::new(
                    index,
                    settings.concurrency,
                    seed,
                    max_tokens,
                    started,
                    out,
                ));
            }
        }));
    }
    let mut all = Vec::new();
    for w in workers {
        if let Ok(mut part) = w.await {
            all.append(&mut part);
        }
    }
    all.sort_by_key(|r| r.index);
    all
}

/// Runs warm-up then the measured requests; returns the records and the
/// summary of the measured part.
pub async fn run(
    settings: &RunSettings,
    prompts: Arc<Vec<Prompt>>,
    large_model: Option<&str>,
) -> (Vec<RequestRecord>, Summary) {
    // Only for the /metrics scrapes; requests go over each client's Link.
    let client = reqwest::Client::new();
    let bar = if settings.progress {
        let bar = ProgressBar::new((settings.warmup + settings.num_prompts) as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} requests ({eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_prefix(format!("N={}", settings.concurrency));
        bar
    } else {
        ProgressBar::hidden()
    };
    // Warm-up prompts come after the measured ones in the cycle, so the
    // measured set is the same whatever the warm-up length.
    closed_loop(
        settings,
        &prompts,
        settings.num_prompts,
        settings.warmup,
        &bar,
    )
    .await;
    let key = settings.spec.api_key.as_deref();
    let before = work::scrape(&client, &settings.spec.base_url, key).await;
    let t0 = Instant::now();
    let records = closed_loop(settings, &prompts, 0, settings.num_prompts, &bar).await;
    let wall = t0.elapsed();
    let after = work::scrape(&client, &settings.spec.base_url, key).await;
    bar.finish_and_clear();
    let mut summary = Summary::of(&records, settings.concurrency, wall, large_model);
    if let (Some(b), Some(a)) = (before, after) {
        summary.work_by_model = work::delta(&b, &a);
    }
    (records, summary)
}
