//! Where a group's metrics come from (its pods' `/metrics`, or Prometheus) and where its
//! thresholds go (each pod's `PUT /admin/thresholds`, with the operator's bearer token).

use super::window::Scrape;
use super::RetuneError;
use std::collections::BTreeMap;
use tuner::metrics::estimate::{
    CONCURRENCY, CREDITED, DECISIONS, SECONDS_BY_BATCH, STEPS_BY_BATCH,
};
use tuner::metrics::{MetricSeries, MetricsText, Sample};

/// One pod of a group: its admin base URL (`http://10.0.0.7:9400`) and the models it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodTarget {
    /// Admin base URL, without a trailing slash.
    pub admin_url: String,
    /// Models served by the pod (one with `podPerModel`, all with `podPerGroup`).
    pub models: Vec<String>,
}

/// Scrapes every pod's `/metrics`, once per distinct admin URL (the models of a
/// `podPerGroup` pod share one), keyed by that URL.
pub async fn scrape_pods(
    client: &reqwest::Client,
    pods: &[PodTarget],
    token: Option<&str>,
) -> Result<Scrape, RetuneError> {
    let mut out = Scrape::new();
    for pod in pods {
        if out.contains_key(&pod.admin_url) {
            continue;
        }
        let url = format!("{}/metrics", pod.admin_url);
        let text = send(with_token(client.get(&url), token), &url).await?;
        let series = MetricSeries::from_texts(&[MetricsText { source: url, text }])?;
        out.insert(pod.admin_url.clone(), series);
    }
    Ok(out)
}

/// The same series from Prometheus: the increase of each counter over `window_s`, summed by
/// the labels the estimator reads, over the series matching `selector` (PromQL label
/// matchers without braces, e.g. `namespace="llm",pod=~"chat-(quick|reference)-0"`).
pub async fn query_prometheus(
    client: &reqwest::Client,
    base_url: &str,
    selector: &str,
    window_s: u64,
) -> Result<MetricSeries, RetuneError> {
    let mut samples = Vec::new();
    let counters = [
        (DECISIONS, "model, to"),
        (CREDITED, "model, to"),
        (STEPS_BY_BATCH, "model, batch_size"),
        (SECONDS_BY_BATCH, "model, batch_size"),
    ];
    for (name, by) in counters {
        let query = format!("sum by ({by}) (increase({name}{{{selector}}}[{window_s}s]))");
        samples.extend(prometheus_vector(client, base_url, &query, name).await?);
    }
    let query = format!("max by (model) ({CONCURRENCY}{{{selector}}})");
    samples.extend(prometheus_vector(client, base_url, &query, CONCURRENCY).await?);
    Ok(MetricSeries::from_samples(samples))
}

/// Runs an instant query and names every sample of its vector `name`.
async fn prometheus_vector(
    client: &reqwest::Client,
    base_url: &str,
    query: &str,
    name: &str,
) -> Result<Vec<Sample>, RetuneError> {
    let url = format!("{}/api/v1/query", base_url.trim_end_matches('/'));
    let fail = |reason: String| RetuneError::Prometheus {
        query: query.to_string(),
        reason,
    };
    let body = send(client.get(&url).query(&[("query", query)]), &url).await?;
    let json: serde_json::Value = serde_json::from_str(&body).map_err(|e| fail(e.to_string()))?;
    if json["status"] != "success" {
        return Err(fail(format!(
            "status {} ({})",
            json["status"], json["error"]
        )));
    }
    let result = json["data"]["result"]
        .as_array()
        .ok_or_else(|| fail("no data.result vector in the answer".into()))?;
    result
        .iter()
        .map(|item| {
            let labels = item["metric"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| k.as_str() != "__name__")
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            let value = item["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| fail(format!("sample without a value: {item}")))?;
            Ok(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// Puts `table` (`model -> [B at n = 1, 2, ...]`) on every pod, each getting the lists of
/// the models it serves. Stops at the first pod that refuses.
pub async fn push_thresholds(
    client: &reqwest::Client,
    pods: &[PodTarget],
    token: Option<&str>,
    table: &BTreeMap<String, Vec<usize>>,
) -> Result<(), RetuneError> {
    for pod in pods {
        let mine: BTreeMap<&String, &Vec<usize>> = table
            .iter()
            .filter(|(model, _)| pod.models.contains(model))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let url = format!("{}/admin/thresholds", pod.admin_url);
        let body = serde_json::json!({ "delayed_batching_threshold": mine });
        let request = client
            .put(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        send(with_token(request, token), &url).await?;
    }
    Ok(())
}

fn with_token(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => request.bearer_auth(t),
        None => request,
    }
}

async fn send(request: reqwest::RequestBuilder, url: &str) -> Result<String, RetuneError> {
    let fail = |reason: String| RetuneError::Http {
        url: url.to_string(),
        reason,
    };
    let response = request.send().await.map_err(|e| fail(e.to_string()))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| fail(e.to_string()))?;
    if !status.is_success() {
        return Err(fail(format!("HTTP {status}: {}", text.trim())));
    }
    Ok(text)
}
