//! What the operator reads from the pods over HTTP: the gateways' load (for
//! autoscaling) and a draining group's in-flight work (for scale-down).

use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
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

    /// Running + waiting requests over every ready gateway endpoint (from
    /// the gateway Service's EndpointSlices, as the endpoints controller
    /// publishes them), or `None` when there is no ready endpoint or one of
    /// them does not answer (the autoscaler then holds the count rather than
    /// act on half the load).
    pub async fn gateway_load(&self, slices: &Api<EndpointSlice>, service: &str) -> Option<u64> {
        let list = slices
            .list(&ListParams::default().labels(&format!("{SERVICE_NAME_LABEL}={service}")))
            .await
            .ok()?;
        let urls = ready_endpoints(&list.items, "http");
        if urls.is_empty() {
            return None;
        }
        let mut total = 0.0;
        for base in urls {
            let text = self.get(&format!("{base}/metrics"), None).await?;
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

/// The label the endpoints controller puts on a Service's EndpointSlices.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `http://ADDRESS:PORT` of every ready endpoint in `slices`, PORT being the
/// slice's port named `port_name` (IPv6 addresses bracketed). An endpoint
/// without a `ready` condition counts as ready, as the API documents.
pub fn ready_endpoints(slices: &[EndpointSlice], port_name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for slice in slices {
        let Some(port) = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(port_name))
            .and_then(|p| p.port)
        else {
            continue;
        };
        for ep in slice.endpoints.iter().flatten() {
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for addr in ep.addresses.iter().take(1) {
                let host = if addr.contains(':') {
                    format!("[{addr}]")
                } else {
                    addr.clone()
                };
                out.push(format!("http://{host}:{port}"));
            }
        }
    }
    out
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

    #[test]
    fn ready_endpoints_take_the_named_port_and_skip_unready_ones() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gw-abc", "labels": {SERVICE_NAME_LABEL: "gw"}},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9000}, {"name": "http", "port": 8000}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.3"]},
                {"addresses": ["fd00::4"], "conditions": {"ready": true}}
            ]
        }))
        .unwrap();
        assert_eq!(
            ready_endpoints(std::slice::from_ref(&slice), "http"),
            [
                "http://10.0.0.1:8000",
                "http://10.0.0.3:8000",
                "http://[fd00::4]:8000"
            ]
        );
        assert!(ready_endpoints(&[slice], "admin").is_empty());
    }
}
