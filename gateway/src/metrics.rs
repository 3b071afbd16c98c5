//! Gateway metrics, Prometheus text. Names follow vLLM where vLLM has the
//! metric (`vllm:` prefix, label `model_name`), so existing dashboards and
//! KEDA triggers work unchanged; TokenRouter's own carry `tokenrouter_`
//! (the subservers' metrics, appended by `/metrics` in `serve`, use that
//! prefix too and never share a name with these). The names, with their
//! types and labels, live in `protocol::metrics::gateway`.

use prometheus::proto::LabelPair;
use prometheus::{
    exponential_buckets, Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use protocol::metrics::gateway::*;

/// The label naming the served group of an in-process subserver's sample
/// when one process serves several groups.
pub const GROUP_LABEL: &str = "group";

/// Every collector of the gateway.
#[derive(Clone)]
pub struct GatewayMetrics {
    registry: Registry,
    model_name: String,
    /// Requests running.
    pub running: IntGaugeVec,
    /// Requests queued.
    pub waiting: IntGaugeVec,
    /// Time to first token.
    pub ttft: HistogramVec,
    /// Time between tokens of one sequence.
    pub itl: HistogramVec,
    /// Request start to last byte.
    pub e2e: HistogramVec,
    /// Successful requests by finish reason.
    pub success: IntCounterVec,
    /// Prompt tokens.
    pub prompt_tokens: IntCounterVec,
    /// Generated tokens.
    pub generation_tokens: IntCounterVec,
    /// HTTP answers by route and status.
    pub http: IntCounterVec,
    /// Failures by error type.
    pub errors: IntCounterVec,
    /// Generated tokens by writer.
    pub by_model: IntCounterVec,
    /// Large-model share.
    pub large_share: Gauge,
    /// Writer switches.
    pub switches: IntCounterVec,
    /// Groups by state.
    pub groups: GaugeVec,
}

fn latency_buckets() -> Vec<f64> {
    // 0.5 ms .. ~70 s.
    exponential_buckets(0.0005, 2.0, 18).unwrap_or_default()
}

impl GatewayMetrics {
    /// Registers everything in a new registry; `model_name` labels the vLLM metrics.
    pub fn new(model_name: &str) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let m = ["model_name"];
        let hist = |name: &str, help: &str| {
            HistogramVec::new(
                HistogramOpts::new(name, help).buckets(latency_buckets()),
                &m,
            )
        };
        let me = Self {
            model_name: model_name.to_string(),
            running: IntGaugeVec::new(Opts::new(NUM_REQUESTS_RUNNING, "Requests generating."), &m)?,
            waiting: IntGaugeVec::new(
                Opts::new(NUM_REQUESTS_WAITING, "Requests queued for a slot."),
                &m,
            )?,
            ttft: hist(TTFT, "Time to first token, seconds.")?,
            itl: hist(
                ITL,
                "Time between consecutive tokens of a sequence, seconds.",
            )?,
            e2e: hist(E2E, "Request latency, seconds.")?,
            success: IntCounterVec::new(
                Opts::new(REQUEST_SUCCESS, "Requests that finished."),
                &["model_name", "finished_reason"],
            )?,
            prompt_tokens: IntCounterVec::new(Opts::new(PROMPT_TOKENS, "Prompt tokens."), &m)?,
            generation_tokens: IntCounterVec::new(
                Opts::new(GENERATION_TOKENS, "Generated tokens."),
                &m,
            )?,
            http: IntCounterVec::new(
                Opts::new(HTTP_REQUESTS, "HTTP answers by route and status."),
                &["route", "status"],
            )?,
            errors: IntCounterVec::new(
                Opts::new(REQUEST_ERRORS, "Failed requests by error type."),
                &["error_type"],
            )?,
            by_model: IntCounterVec::new(
                Opts::new(
                    TOKENS_BY_MODEL,
                    "Generated tokens by the model that wrote them.",
                ),
                &["model"],
            )?,
            large_share: Gauge::new(
                LARGE_SHARE,
                "Share of generated tokens written by large (non-entry) models.",
            )?,
            switches: IntCounterVec::new(
                Opts::new(SWITCHES, "Changes of writer between consecutive tokens."),
                &m,
            )?,
            groups: GaugeVec::new(
                Opts::new(GROUPS, "Groups behind the gateway by state."),
                &["state"],
            )?,
            registry,
        };
        me.registry.register(Box::new(me.running.clone()))?;
        me.registry.register(Box::new(me.waiting.clone()))?;
        me.registry.register(Box::new(me.ttft.clone()))?;
        me.registry.register(Box::new(me.itl.clone()))?;
        me.registry.register(Box::new(me.e2e.clone()))?;
        me.registry.register(Box::new(me.success.clone()))?;
        me.registry.register(Box::new(me.prompt_tokens.clone()))?;
        me.registry
            .register(Box::new(me.generation_tokens.clone()))?;
        me.registry.register(Box::new(me.http.clone()))?;
        me.registry.register(Box::new(me.errors.clone()))?;
        me.registry.register(Box::new(me.by_model.clone()))?;
        me.registry.register(Box::new(me.large_share.clone()))?;
        me.registry.register(Box::new(me.switches.clone()))?;
        me.registry.register(Box::new(me.groups.clone()))?;
        Ok(me)
    }

    /// The `model_name` label value.
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    /// Counts one finished sequence's tokens (`by_model[i]` by member `names[i]`).
    pub fn count_tokens(&self, names: &[String], entry: u16, by_model: &[usize], switches: usize) {
        for (i, &n) in by_model.iter().enumerate() {
            if n > 0 {
                let name = names.get(i).map(String::as_str).unwrap_or("unknown");
                self.by_model.with_label_values(&[name]).inc_by(n as u64);
            }
        }
        self.switches
            .with_label_values(&[&self.model_name])
            .inc_by(switches as u64);
        let mut total = 0u64;
        let mut large = 0u64;
        for (i, name) in names.iter().enumerate() {
            let v = self.by_model.with_label_values(&[name]).get();
            total += v;
            if i != entry as usize {
                large += v;
            }
        }
        if total > 0 {
            self.large_share.set(large as f64 / total as f64);
        }
    }

    /// Prometheus text of the gateway's registry plus `extra` registries,
    /// each named by its group. With more than one, every extra sample
    /// gets a `group` label and same-named families are merged (one
    /// `# TYPE` line per name, as the text format requires).
    pub fn render(&self, extra: &[(String, Registry)]) -> String {
        let encoder = TextEncoder::new();
        let mut out = Vec::new();
        let mut families = self.registry.gather();
        let labelled = extra.len() > 1;
        for (group, r) in extra {
            for mut family in r.gather() {
                if labelled {
                    for metric in family.mut_metric() {
                        let mut labels = metric.take_label();
                        let mut pair = LabelPair::default();
                        pair.set_name(GROUP_LABEL.to_string());
                        pair.set_value(group.clone());
                        labels.push(pair);
                        metric.set_label(labels);
                    }
                }
                match families.iter_mut().find(|f| f.name() == family.name()) {
                    Some(same) => same.mut_metric().extend(family.take_metric()),
                    None => families.push(family),
                }
            }
        }
        if let Err(e) = encoder.encode(&families, &mut out) {
            tracing::warn!(error = %e, "metrics encoding failed");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_and_names() {
        let m = GatewayMetrics::new("tr").unwrap();
        let names = vec!["quick".to_string(), "reference".to_string()];
        m.count_tokens(&names, 0, &[3, 1], 2);
        assert!((m.large_share.get() - 0.25).abs() < 1e-9);
        m.running.with_label_values(&["tr"]).set(1);
        m.ttft.with_label_values(&["tr"]).observe(0.01);
        let text = m.render(&[]);
        for name in [
            NUM_REQUESTS_RUNNING,
            TTFT,
            LARGE_SHARE,
            TOKENS_BY_MODEL,
            SWITCHES,
        ] {
            assert!(text.contains(name), "{name} missing in\n{text}");
        }
        assert!(text.contains("model=\"reference\"} 1"));
    }
}
