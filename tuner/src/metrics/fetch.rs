//! Fetching metrics text: `http://` URLs with a blocking client, `file://` paths from disk
//! (recorded scrapes, offline tuning).

use super::exposition::MetricsText;
use crate::error::TunerError;
use std::time::Duration;

/// Reads every source, in order. Must not be called from inside an async runtime.
pub fn fetch_metrics(urls: &[String], timeout: Duration) -> Result<Vec<MetricsText>, TunerError> {
    let client = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| TunerError::Fetch {
            url: "(client)".into(),
            reason: e.to_string(),
        })?;
    urls.iter()
        .map(|url| {
            let fail = |reason: String| TunerError::Fetch {
                url: url.clone(),
                reason,
            };
            let text = if let Some(path) = url.strip_prefix("file://") {
                std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?
            } else {
                let response = client.get(url).send().map_err(|e| fail(e.to_string()))?;
                let status = response.status();
                if !status.is_success() {
                    return Err(fail(format!("HTTP status {status}")));
                }
                response.text().map_err(|e| fail(e.to_string()))?
            };
            tracing::debug!(url, bytes = text.len(), "fetched metrics");
            Ok(MetricsText {
                source: url.clone(),
                text,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn fetches_over_plain_http() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let read = stream.read(&mut request).unwrap();
            assert!(String::from_utf8_lossy(&request[..read]).starts_with("GET /metrics"));
            let body = "tokenrouter_active_concurrency 4\n";
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        });
        let url = format!("http://127.0.0.1:{port}/metrics");
        let texts = fetch_metrics(std::slice::from_ref(&url), Duration::from_secs(5)).unwrap();
        server.join().unwrap();
        assert_eq!(texts[0].source, url);
        assert_eq!(texts[0].text, "tokenrouter_active_concurrency 4\n");
    }

    #[test]
    fn unreachable_and_missing_sources_name_the_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = format!("http://127.0.0.1:{port}/metrics");
        let err = fetch_metrics(std::slice::from_ref(&url), Duration::from_secs(2)).unwrap_err();
        assert!(err.to_string().contains(&url), "{err}");
        let err = fetch_metrics(
            &["file:///nonexistent/metrics.txt".into()],
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/metrics.txt"),
            "{err}"
        );
    }
}
