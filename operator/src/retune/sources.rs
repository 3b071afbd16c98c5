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
/// `podPerGroup` pod share one), keyed by that URL. A pod that fails is skipped (its
/// error returned beside the scrape): one restarting pod must not stop the round. Fails
/// only when no pod answers.
pub async fn scrape_pods(
    client: &reqwest::Client,
    pods: &[PodTarget],
    token: Option<&str>,
) -> Result<(Scrape, Vec<RetuneError>), RetuneError> {
    let mut out = Scrape::new();
    let mut failed = Vec::new();
    for pod in pods {
        if out.contains_key(&pod.admin_url) {
            continue;
        }
        let url = format!("{}/metrics", pod.admin_url);
        let series = match send(with_token(client.get(&url), token), &url).await {
            Ok(text) => MetricSeries::from_texts(&[MetricsText { source: url, text }])
                .map_err(RetuneError::from),
            Err(e) => Err(e),
        };
        match series {
            Ok(series) => {
                out.insert(pod.admin_url.clone(), series);
            }
            Err(e) => failed.push(e),
        }
    }
    match (out.is_empty(), failed.is_empty()) {
        (true, false) => Err(failed.swap_remove(0)),
        _ => Ok((out, failed)),
    }
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
/// the models it serves. A pod that refuses does not stop the others: the errors of those
/// that failed are returned (empty: every pod has the table).
pub async fn push_thresholds(
    client: &reqwest::Client,
    pods: &[PodTarget],
    token: Option<&str>,
    table: &BTreeMap<String, Vec<usize>>,
) -> Vec<RetuneError> {
    let mut failed = Vec::new();
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
        if let Err(e) = send(with_token(request, token), &url).await {
            failed.push(e);
        }
    }
    failed
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

#[cfg(test)]
mod tests {
    use super::*;
    use warp::Filter;

    /// A pod that answers `/metrics` and `PUT /admin/thresholds`; its URL.
    fn serve_pod() -> String {
        let metrics = warp::path!("metrics")
            .and(warp::get())
            .map(|| "tokenrouter_requests_total{model=\"small\"} 3\n");
        let put = warp::path!("admin" / "thresholds")
            .and(warp::put())
            .map(|| "{}");
        let (addr, server) = warp::serve(metrics.or(put)).bind_ephemeral(([127, 0, 0, 1], 0));
        tokio::spawn(server);
        format!("http://{addr}")
    }

    /// A URL where nothing listens (a pod that restarts).
    fn dead_pod() -> String {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        format!("http://{addr}")
    }

    fn target(url: &str) -> PodTarget {
        PodTarget {
            admin_url: url.to_string(),
            models: vec!["small".into()],
        }
    }

    /// `tuning.prometheusUrl: https://...` speaks TLS (the client has
    /// rustls): the server's first bytes are a TLS handshake record, not a
    /// refusal of the scheme before any connect.
    #[tokio::test]
    async fn an_https_prometheus_url_speaks_tls() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            use std::io::Read;
            let (mut conn, _) = listener.accept().unwrap();
            let mut first = [0u8; 3];
            conn.read_exact(&mut first).unwrap();
            first
        });
        let err = query_prometheus(&reqwest::Client::new(), &format!("https://{addr}"), "", 60)
            .await
            .unwrap_err();
        // Record type 22 (handshake), TLS major version 3.
        assert_eq!(server.join().unwrap()[..2], [0x16, 0x03], "{err}");
    }

    #[tokio::test]
    async fn one_failing_pod_is_skipped_not_fatal() {
        let client = reqwest::Client::new();
        let (good, dead) = (serve_pod(), dead_pod());
        let pods = [target(&dead), target(&good)];
        let (scrape, failed) = scrape_pods(&client, &pods, None).await.unwrap();
        assert_eq!(scrape.keys().collect::<Vec<_>>(), vec![&good]);
        assert_eq!(failed.len(), 1);
        assert!(failed[0].to_string().contains(&dead), "{}", failed[0]);
        let table = BTreeMap::from([("small".to_string(), vec![1, 2])]);
        let failed = push_thresholds(&client, &pods, None, &table).await;
        assert_eq!(failed.len(), 1, "the good pod got the table");
        // No pod answers: the round fails.
        let err = scrape_pods(&client, &[target(&dead)], None)
            .await
            .unwrap_err();
        assert_eq!(err.error_type(), "pod_error");
    }
}
