//! Headless Chromium driven over the DevTools protocol, so a test reads a
//! page's DOM once the page says it is settled (an event), never after a
//! virtual-time budget that a slow machine may spend before the page is done.

use std::net::TcpStream;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::WebSocket;

use crate::{Proc, HANG};

/// A headless Chromium with one DevTools connection to its browser target;
/// killed on drop.
pub struct Browser {
    _proc: Proc,
    ws: WebSocket<TcpStream>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromium` (or `chromium-browser`) headless and connects to it.
    /// Panics with the fix when neither is installed.
    pub fn start() -> Self {
        let exe = ["chromium", "chromium-browser"]
            .into_iter()
            .find(|c| Command::new(c).arg("--version").output().is_ok())
            .expect("chromium is missing: run `make test` (it installs Debian chromium)");
        let profile = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank");
        let mut proc = Proc::spawn("chromium", cmd);
        let url = proc.wait_after("DevTools listening on ");
        let ws = connect(&url);
        Self {
            _proc: proc,
            ws,
            next_id: 0,
            _profile: profile,
        }
    }

    /// Opens `url` in a new tab, polls `settled` (a JavaScript expression)
    /// until it is true, and returns the tab's `outerHTML` then. Only a hang
    /// reaches [`HANG`].
    pub fn dom_when(&mut self, url: &str, settled: &str) -> String {
        let target = self.call(None, "Target.createTarget", json!({ "url": url }));
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        );
        let session = attached["sessionId"].as_str().unwrap().to_string();
        let deadline = Instant::now() + HANG;
        // Until the tab commits `url`, `settled` runs on about:blank: false.
        let guard = format!("location.href !== 'about:blank' && !!({settled})");
        while self.eval(&session, &guard) != Value::Bool(true) {
            assert!(
                Instant::now() < deadline,
                "hang: {url} never reached `{settled}` in {HANG:?}:\n{}",
                self.eval(&session, "document.documentElement.outerHTML")
            );
            sleep(Duration::from_millis(100));
        }
        let dom = self.eval(&session, "document.documentElement.outerHTML");
        dom.as_str().unwrap().to_string()
    }

    /// The value of `expression` in the page of `session`.
    fn eval(&mut self, session: &str, expression: &str) -> Value {
        let out = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true }),
        );
        out["result"]["value"].clone()
    }

    /// Sends one command and returns its `result`, skipping the events that
    /// arrive before it.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap_or_else(|e| panic!("DevTools {method}: {e}"));
        loop {
            let frame = self
                .ws
                .read()
                .unwrap_or_else(|e| panic!("DevTools {method}: no answer: {e}"));
            let Ok(text) = frame.to_text() else { continue };
            let Ok(reply) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            if reply["id"].as_u64() != Some(id) {
                continue;
            }
            if let Some(err) = reply.get("error") {
                panic!("DevTools {method} failed: {err}");
            }
            return reply["result"].clone();
        }
    }
}

/// Opens the browser's DevTools WebSocket at `url` (`ws://host:port/path`);
/// a read that waits [`HANG`] is a hang.
fn connect(url: &str) -> WebSocket<TcpStream> {
    let addr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let stream = TcpStream::connect(&addr).unwrap_or_else(|e| panic!("DevTools at {addr}: {e}"));
    stream.set_read_timeout(Some(HANG)).unwrap();
    let (ws, _) = tungstenite::client(url, stream)
        .unwrap_or_else(|e| panic!("DevTools handshake at {url}: {e}"));
    ws
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_read_once_its_script_settles() {
        // A data: URL whose script settles after a timer: the DOM read must
        // show the late text, which a fixed dump could miss.
        let page = "data:text/html,<body><script>setTimeout(()=>{document.body.dataset.state='done';document.body.append('late')},300)</script></body>";
        let mut b = Browser::start();
        let dom = b.dom_when(page, "document.body.dataset.state === 'done'");
        assert!(dom.contains("late"), "{dom}");
    }
}
