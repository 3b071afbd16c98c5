//! What the soak reads off the process and the group: RSS, descriptors,
//! load, invariants, gauges that must be idle, and the settle wait.

use std::time::{Duration, Instant};

use gateway::Gateway;
use subserver::service::Service;

use super::SETTLE;

/// Resident set size of this process (KiB; 0 when unreadable).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Every model's internal invariant check (run on its scheduler thread
/// between steps); one line per broken one.
pub async fn invariants(service: &Service) -> Vec<String> {
    let group = service.group().clone();
    tokio::task::spawn_blocking(move || {
        (0..group.names().len())
            .filter_map(|m| group.check_invariants(m as u16, SETTLE).err())
            .collect()
    })
    .await
    .unwrap_or_else(|e| vec![format!("invariant check task: {e}")])
}

/// Gauges that must read 0 when nothing is held: the subservers'
/// (from their registry) and the gateway's (from a `/metrics` scrape).
pub async fn busy_gauges(service: &Service, metrics_url: &str) -> Vec<String> {
    use subserver::metrics::names as sub;
    let mut left = Vec::new();
    for family in service.registry().gather() {
        let name = family.name();
        if ![
            sub::NUM_REQUESTS_RUNNING,
            sub::NUM_REQUESTS_WAITING,
            sub::NUM_REQUESTS_PENDING,
            sub::KV_CACHE_USAGE_PERC,
        ]
        .contains(&name)
        {
            continue;
        }
        for m in family.get_metric() {
            let v = m.get_gauge().get_value();
            if v != 0.0 {
                let labels: Vec<String> = m
                    .get_label()
                    .iter()
                    .map(|l| format!("{}={}", l.name(), l.value()))
                    .collect();
                left.push(format!("{name}{{{}}} = {v}", labels.join(",")));
            }
        }
    }
    let text = match reqwest::get(metrics_url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => return vec![format!("gateway /metrics: {e}")],
    };
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting"] {
        let values: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        if values.is_empty() {
            left.push(format!("gateway /metrics has no {name}"));
        }
        if values.iter().any(|&v| v != 0.0) {
            left.push(format!("gateway {name} = {values:?}"));
        }
    }
    left
}

/// Waits until the gateway and every model hold nothing; the leftovers
/// when `SETTLE` runs out.
pub async fn settle(gw: &Gateway, service: &Service) -> Vec<String> {
    let models = service.group().names().len();
    let t0 = Instant::now();
    loop {
        let mut left = Vec::new();
        if gw.in_flight() != 0 {
            left.push(format!("gateway slots in use: {}", gw.in_flight()));
        }
        for m in 0..models {
            let s = service.group().stats(m as u16);
            if s.kv_requests != 0 || s.kv_available_blocks != s.kv_blocks {
                left.push(format!(
                    "model {m}: {} requests hold KV, {} of {} blocks free",
                    s.kv_requests, s.kv_available_blocks, s.kv_blocks
                ));
            }
            if s.running + s.waiting + s.pending != 0 || s.active != 0 {
                left.push(format!(
                    "model {m}: running {} waiting {} pending {} active {}",
                    s.running, s.waiting, s.pending, s.active
                ));
            }
        }
        if service.group().active() != 0 {
            left.push(format!("group active: {}", service.group().active()));
        }
        if left.is_empty() || t0.elapsed() > SETTLE {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
