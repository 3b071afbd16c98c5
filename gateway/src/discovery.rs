//! Where the remote groups are: `gateway.groups` from the config plus
//! `gateway.groups_file` (one URL per line, `#` comments; a mounted
//! ConfigMap), re-read when it changes so the list reloads without a restart.
//! An entry `dns://NAME:PORT` (e.g. a headless Service of the entry pods)
//! stands for one group per address NAME resolves to, re-resolved every few
//! seconds.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::backend::remote::RemoteBackend;
use crate::backend::Backend;
use crate::state::Gateway;

/// How often the groups file is checked.
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// How often `dns://` entries are resolved again.
const DNS_EVERY: Duration = Duration::from_secs(5);

/// Expands `dns://NAME:PORT` entries into one `http://ADDR:PORT` per address;
/// other entries pass through. An entry that does not resolve adds nothing.
pub async fn expand(entries: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for e in entries {
        match e.strip_prefix("dns://") {
            Some(target) => match tokio::net::lookup_host(target).await {
                Ok(addrs) => {
                    let mut found: Vec<String> = addrs.map(|a| format!("http://{a}")).collect();
                    found.sort();
                    out.extend(found);
                }
                Err(err) => tracing::warn!(%target, error = %err, "cannot resolve groups"),
            },
            None => out.push(e.clone()),
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|u| seen.insert(u.clone()));
    out
}

/// URLs in a groups file's text.
pub fn parse_urls(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.trim_end_matches('/').to_string())
        .collect()
}

/// Keeps the gateway's pool in line with the configured groups. Dropping it
/// stops the watcher (and the tasks it [holds](Self::hold)).
pub struct Discovery {
    task: JoinHandle<()>,
    held: Vec<JoinHandle<()>>,
}

impl Discovery {
    /// Stops `task` with the watcher: a task that lives off the groups
    /// found (the text-side loader).
    pub fn hold(&mut self, task: JoinHandle<()>) {
        self.held.push(task);
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.task.abort();
        for t in &self.held {
            t.abort();
        }
    }
}

struct State {
    gw: Arc<Gateway>,
    fixed: Vec<String>,
    file: Option<PathBuf>,
    client: reqwest::Client,
    backends: HashMap<String, Arc<RemoteBackend>>,
    last_text: Option<String>,
    last_urls: Option<Vec<String>>,
}

impl State {
    fn read_file(path: &Path) -> Option<String> {
        match std::fs::read_to_string(path) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the groups file");
                None
            }
        }
    }

    /// Re-reads the file (and resolves `dns://` entries); applies the list
    /// when it changed.
    async fn refresh(&mut self) {
        let mut entries = self.fixed.clone();
        // Unreadable (e.g. mid-update of a ConfigMap): keep the last text.
        if let Some(t) = self.file.as_deref().and_then(Self::read_file) {
            self.last_text = Some(t);
        }
        if let Some(t) = &self.last_text {
            entries.extend(parse_urls(t));
        }
        let urls = expand(&entries).await;
        if self.last_urls.as_ref() == Some(&urls) {
            return;
        }
        self.last_urls = Some(urls.clone());
        let mut next = HashMap::new();
        let mut list: Vec<Arc<dyn Backend>> = Vec::new();
        for url in urls {
            if next.contains_key(&url) {
                continue;
            }
            let b = self
                .backends
                .get(&url)
                .cloned()
                .unwrap_or_else(|| Arc::new(RemoteBackend::new(&url, self.client.clone())));
            list.push(b.clone());
            next.insert(url, b);
        }
        tracing::info!(groups = ?next.keys().collect::<Vec<_>>(), "groups loaded");
        self.backends = next;
        self.gw.primary().pool.set_backends(list);
    }
}

/// The client of the subservers: it carries the control endpoints' bearer
/// token (`TOKENROUTER_ADMIN_TOKEN[_FILE]`) when one is configured.
fn subserver_client() -> reqwest::Client {
    let token = match protocol::access::AdminToken::from_env() {
        Ok(token) => token,
        Err(e) => {
            tracing::error!(error = %e, "no admin token: remote groups will refuse requests");
            None
        }
    };
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(value) = token.and_then(|t| {
        let mut v = reqwest::header::HeaderValue::from_str(&t.header_value()).ok()?;
        v.set_sensitive(true);
        Some(v)
    }) {
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap_or_default()
}

/// Loads `fixed` plus the file's groups into `gw`'s pool, then watches the
/// file and re-resolves `dns://` entries (needs a tokio runtime).
pub async fn start(gw: Arc<Gateway>, fixed: Vec<String>, file: Option<PathBuf>) -> Discovery {
    let mut state = State {
        gw,
        fixed: fixed
            .into_iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect(),
        file,
        client: subserver_client(),
        backends: HashMap::new(),
        last_text: None,
        last_urls: None,
    };
    state.refresh().await;
    let dns = state.fixed.iter().any(|u| u.starts_with("dns://"));
    let task = tokio::spawn(async move {
        if state.file.is_none() && !dns {
            return;
        }
        // Without a file only DNS answers can change.
        let every = if state.file.is_some() {
            WATCH_EVERY
        } else {
            DNS_EVERY
        };
        let mut since_dns = Duration::ZERO;
        loop {
            tokio::time::sleep(every).await;
            since_dns += every;
            let text = state.file.as_deref().and_then(State::read_file);
            let changed = text.is_some() && text != state.last_text;
            let has_dns = dns
                || state
                    .last_text
                    .as_deref()
                    .is_some_and(|t| t.contains("dns://"));
            if changed || (has_dns && since_dns >= DNS_EVERY) {
                state.refresh().await;
                since_dns = Duration::ZERO;
            }
        }
    });
    Discovery {
        task,
        held: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dns_entries_expand_to_one_group_per_address() {
        let urls = expand(&[
            "dns://localhost:4321".to_string(),
            "http://a:1".to_string(),
            "http://a:1".to_string(),
        ])
        .await;
        assert!(
            urls.contains(&"http://127.0.0.1:4321".to_string()),
            "{urls:?}"
        );
        assert_eq!(urls.iter().filter(|u| *u == "http://a:1").count(), 1);
        assert!(expand(&["dns://no-such-host.invalid:1".to_string()])
            .await
            .is_empty());
    }

    #[test]
    fn urls_from_text() {
        assert_eq!(
            parse_urls("# groups\nhttp://a:1/\n\n  http://b:2  # second\n"),
            vec!["http://a:1".to_string(), "http://b:2".into()]
        );
    }
}
