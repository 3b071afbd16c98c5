//! What the operator reads from the pods over HTTP: the gateways' load (for
//! autoscaling) and a draining group's in-flight work (for scale-down).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tuner::metrics::parse_exposition;

/// Gateway gauges whose sum is the load (vLLM's names).
pub const LOAD_METRICS: [&str; 2] = ["vllm:num_requests_running", "vllm:num_requests_waiting"];
/// Subserver gauges whose sum is a group's in-flight work.
pub const INFLIGHT_METRICS: [&str; 3] = [
    "tokenrouter_num_requests_running",
    "tokenrouter_num_requests_waiting",
    "tokenrouter_num_requests_pending",
];

/// Sum of the named metrics' samples in an exposition text, or `None` when
/// the text does not parse or has none of them.
pub fn sum_metrics(text: &str, names: &[&str]) -> Option<f64> {
    let samples = parse_exposition("metrics", text).ok()?;
    let mut seen = false;
    let total = samples
        .iter()
        .filter(|s| names.contains(&s.name.as_str()))
        .inspect(|_| seen = true)
        .map(|s| s.value)
        .sum();
    seen.then_some(total)
}

/// HTTP reads of pod metrics.
#[derive(Clone)]
pub struct HttpProbe {
    http: reqwest::Client,
}

impl HttpProbe {
    /// A client with a short timeout (a slow pod must not stall reconciles).
    pub fn new(timeout: Duration) -> Self {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .unwrap_or_default();
        Self { http }
    }

    async fn get(&self, url: &str, token: Option<&str>) -> Option<String> {
        let mut req = self.http.get(url);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.ok()?;
        if !resp.status().is_success() {
            return None;
        }
        resp.text().await.ok()
    }

    /// Running + waiting requests over every ready gateway pod, or `None`
    /// when there is no ready pod or one of them does not answer (the
    /// autoscaler then holds the count rather than act on half the load).
    pub async fn gateway_load(&self, pods: &Api<Pod>, selector: &str, port: i32) -> Option<u64> {
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .ok()?;
        let ips: Vec<String> = list
            .items
            .iter()
            .filter(|p| is_ready(p))
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        if ips.is_empty() {
            return None;
        }
        let mut total = 0.0;
        for ip in ips {
            let text = self
                .get(&format!("http://{ip}:{port}/metrics"), None)
                .await?;
            total += sum_metrics(&text, &LOAD_METRICS)?;
        }
        Some(total.max(0.0).round() as u64)
    }

    /// In-flight requests at a group's entry (`base` is its admin URL), or
    /// `None` when it does not answer.
    pub async fn inflight(&self, base: &str, token: Option<&str>) -> Option<u64> {
        let text = self.get(&format!("{base}/metrics"), token).await?;
        Some(sum_metrics(&text, &INFLIGHT_METRICS)?.max(0.0).round() as u64)
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_only_the_named_gauges() {
        let text = "# TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{model_name=\"default\"} 3\n\
                    vllm:num_requests_waiting{model_name=\"default\"} 4\n\
                    vllm:num_requests_swapped 100\n";
        assert_eq!(sum_metrics(text, &LOAD_METRICS), Some(7.0));
        assert_eq!(sum_metrics("other 1\n", &LOAD_METRICS), None);
        assert_eq!(sum_metrics("not metrics at all {", &LOAD_METRICS), None);
    }
}
