//! Where the remote groups are: `gateway.groups` from the config plus
//! `gateway.groups_file` (one URL per line, `#` comments; a mounted
//! ConfigMap), re-read when it changes so the list reloads without a restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::backend::remote::RemoteBackend;
use crate::backend::Backend;
use crate::server::Gateway;

/// How often the groups file is checked.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// URLs in a groups file's text.
pub fn parse_urls(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.trim_end_matches('/').to_string())
        .collect()
}

/// Keeps the gateway's pool in line with the configured groups. Dropping it
/// stops the watcher.
pub struct Discovery {
    task: JoinHandle<()>,
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    gw: Arc<Gateway>,
    fixed: Vec<String>,
    file: Option<PathBuf>,
    client: reqwest::Client,
    backends: HashMap<String, Arc<RemoteBackend>>,
    last_text: Option<String>,
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

    /// Re-reads the file; applies the list when it changed (or the first time).
    fn refresh(&mut self, first: bool) {
        let text = self.file.as_deref().and_then(Self::read_file);
        if !first && (text.is_none() || text == self.last_text) {
            // Unreadable (e.g. mid-update of a ConfigMap) or unchanged: keep the list.
            return;
        }
        let mut urls = self.fixed.clone();
        if let Some(t) = &text {
            urls.extend(parse_urls(t));
        }
        urls.dedup();
        self.last_text = text;
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
        self.gw.pool.set_backends(list);
    }
}

/// Loads `fixed` plus the file's groups into `gw`'s pool now, then watches
/// the file (needs a tokio runtime).
pub fn start(gw: Arc<Gateway>, fixed: Vec<String>, file: Option<PathBuf>) -> Discovery {
    let mut state = State {
        gw,
        fixed: fixed
            .into_iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect(),
        file,
        client: reqwest::Client::new(),
        backends: HashMap::new(),
        last_text: None,
    };
    state.refresh(true);
    let task = tokio::spawn(async move {
        if state.file.is_none() {
            return;
        }
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            state.refresh(false);
        }
    });
    Discovery { task }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_from_text() {
        assert_eq!(
            parse_urls("# groups\nhttp://a:1/\n\n  http://b:2  # second\n"),
            vec!["http://a:1".to_string(), "http://b:2".into()]
        );
    }
}
