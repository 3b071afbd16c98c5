//! Where a run's compute went, per model, from the server's own counters:
//! each model's step seconds, steps and tokens fed through its forward
//! (`tokenrouter_step_seconds_by_batch_total`, `..._steps_by_batch_total`,
//! `tokenrouter_step_tokens_total`), scraped from `/metrics` before and
//! after the measured requests. Set against the output, they say why a
//! routed pair is or is not faster than one model alone: a handed-over
//! request makes the large model prefill everything the small one wrote
//! since its last turn, so it may feed nearly every token of the answer.

use std::collections::BTreeMap;

use protocol::metrics::subserver::{
    STEPS_BY_BATCH_TOTAL, STEP_SECONDS_BY_BATCH_TOTAL, STEP_TOKENS_TOTAL,
};
use serde::{Deserialize, Serialize};
use tuner::metrics::parse_exposition;

/// One model's work over a measured run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelWork {
    /// Seconds the model spent in steps.
    pub busy_s: f64,
    /// Steps it took.
    pub steps: f64,
    /// Tokens fed through its forward (prefill, catch-up and decode).
    pub tokens: f64,
}

/// Work by model name.
pub type WorkByModel = BTreeMap<String, ModelWork>;

/// Sums the three counters per `model` label in a `/metrics` text; `None`
/// when the text is not an exposition or holds none of them (a server
/// that is not ours).
pub fn parse(text: &str) -> Option<WorkByModel> {
    let samples = parse_exposition("/metrics", text).ok()?;
    let mut work = WorkByModel::new();
    for s in &samples {
        let Some(model) = s.label("model") else {
            continue;
        };
        let field: fn(&mut ModelWork) -> &mut f64 = match s.name.as_str() {
            STEP_SECONDS_BY_BATCH_TOTAL => |w| &mut w.busy_s,
            STEPS_BY_BATCH_TOTAL => |w| &mut w.steps,
            STEP_TOKENS_TOTAL => |w| &mut w.tokens,
            _ => continue,
        };
        *field(work.entry(model.to_string()).or_default()) += s.value;
    }
    (!work.is_empty()).then_some(work)
}

/// The work done between two scrapes (models absent before count from 0).
pub fn delta(before: &WorkByModel, after: &WorkByModel) -> WorkByModel {
    after
        .iter()
        .map(|(m, a)| {
            let b = before.get(m).copied().unwrap_or_default();
            let d = ModelWork {
                busy_s: a.busy_s - b.busy_s,
                steps: a.steps - b.steps,
                tokens: a.tokens - b.tokens,
            };
            (m.clone(), d)
        })
        .collect()
}

/// Scrapes `{base_url}/metrics`; `None` when the server has none of ours
/// (another engine, or an error: the run itself does not depend on it).
pub async fn scrape(
    client: &reqwest::Client,
    base_url: &str,
    api_key: Option<&str>,
) -> Option<WorkByModel> {
    let mut req = client.get(format!("{}/metrics", base_url.trim_end_matches('/')));
    if let Some(key) = api_key {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    parse(&resp.text().await.ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# TYPE tokenrouter_step_seconds_by_batch_total counter
tokenrouter_step_seconds_by_batch_total{model=\"quick\",batch_size=\"1\"} 1.5
tokenrouter_step_seconds_by_batch_total{model=\"quick\",batch_size=\"4\"} 0.5
tokenrouter_step_seconds_by_batch_total{model=\"reference\",batch_size=\"1\"} 3
tokenrouter_steps_by_batch_total{model=\"quick\",batch_size=\"1\"} 30
tokenrouter_steps_by_batch_total{model=\"quick\",batch_size=\"4\"} 5
tokenrouter_step_tokens_total{model=\"quick\"} 90
tokenrouter_step_tokens_total{model=\"reference\"} 70
vllm:generation_tokens_total{model_name=\"default\"} 50
";

    #[test]
    fn sums_each_models_counters_over_batch_sizes() {
        let w = parse(TEXT).unwrap();
        assert_eq!(
            w["quick"],
            ModelWork {
                busy_s: 2.0,
                steps: 35.0,
                tokens: 90.0
            }
        );
        assert_eq!(w["reference"].busy_s, 3.0);
        assert_eq!(w["reference"].steps, 0.0);
        assert!(parse("vllm:generation_tokens_total 3\n").is_none());
        assert!(parse("not { an exposition").is_none());
    }

    #[test]
    fn the_delta_counts_a_model_first_seen_after_from_zero() {
        let mut before = parse(TEXT).unwrap();
        before.remove("reference");
        let after = parse(&TEXT.replace("} 90", "} 100")).unwrap();
        let d = delta(&before, &after);
        assert_eq!(d["quick"].tokens, 10.0);
        assert_eq!(d["quick"].busy_s, 0.0);
        assert_eq!(d["reference"].tokens, 70.0);
    }
}
