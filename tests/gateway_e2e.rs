//! `tokenrouter serve` end to end, driven by real clients: the official
//! `openai` Python SDK, curl, and headless Chromium on `/ui`. Most tests
//! serve the simulated pair of `config/sim-gateway.yaml` (real scheduler,
//! SmolLM2 tokenizer); one serves the embedded default (real SmolLM2 pair).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::PathBuf;
use std::process::Command;

use test_support::{free_ports, spawn_subserver, Proc, HANG};

/// A `tokenrouter serve` child; killed on drop.
struct Served {
    proc: Proc,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

impl Served {
    /// Starts `serve` with `args` and waits for its "listening on" line.
    fn start(args: &[&str], dir: Option<tempfile::TempDir>, envs: &[(&str, &str)]) -> Self {
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        Self::spawn(&all, dir, envs)
    }

    /// Starts `tokenrouter ARGS` and waits for its "listening on" line.
    fn spawn(args: &[&str], dir: Option<tempfile::TempDir>, envs: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(common::binary());
        cmd.args(args)
            .env("TOKENROUTER_CACHE", common::cache_dir())
            // `info`: the gateway's group-list and group-health lines are events.
            .env("RUST_LOG", "info");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut proc = Proc::spawn(&format!("tokenrouter {args:?}"), cmd);
        let url = proc.wait_after("listening on ");
        Self {
            proc,
            url,
            _dir: dir,
        }
    }

    /// The sim group of `config/sim-gateway.yaml`.
    fn sim() -> Self {
        let cfg = repo().join("config/sim-gateway.yaml");
        Self::start(
            &["--config", cfg.to_str().unwrap(), "--port", "0"],
            None,
            &[],
        )
    }

    /// The sim group with `gateway:` replaced by `gateway_yaml` (indented body).
    fn sim_with_gateway(
        gateway_yaml: &str,
        extra_files: &[(&str, &str)],
        envs: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(repo().join("config/sim-gateway.yaml")).unwrap();
        let head = text.split("\ngateway:").next().unwrap();
        let cfg = dir.path().join("sim.yaml");
        std::fs::write(&cfg, format!("{head}\ngateway:\n{gateway_yaml}")).unwrap();
        for (name, body) in extra_files {
            std::fs::write(dir.path().join(name), body).unwrap();
        }
        let cfg = cfg.to_str().unwrap().to_string();
        Self::start(&["--config", &cfg, "--port", "0"], Some(dir), envs)
    }

    /// Sends SIGTERM and waits for the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        self.proc.terminate();
        self.proc.wait_exit()
    }

    /// Waits for the gateway's next "group list set" line: the list it
    /// answers `/health` from has been replaced.
    fn wait_group_list(&mut self, what: &str) {
        self.proc.wait_line(what, |l| l.contains("group list set"));
    }

    /// Waits for the gateway's next "group health changed" line with `up`.
    fn wait_group_health(&mut self, what: &str, up: bool) {
        self.proc.wait_line(what, |l| {
            l.contains("group health changed") && l.contains(&format!("up={up}"))
        });
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a program; asserts success and returns stdout.
fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

fn openai_suite(url: &str, extra: &[&str]) -> String {
    run_ok(
        Command::new(common::python())
            .arg(common::script("openai_suite.py"))
            .args(["--base-url", url])
            .args(extra),
        "openai suite",
    )
}

/// Asserts the suite's summary line: every check ran and passed (none
/// failed, none skipped). The count is parsed, so "10 failed" is no match.
fn assert_all_passed(out: &str) {
    let summary = out
        .lines()
        .rev()
        .find(|l| l.starts_with("openai "))
        .unwrap_or_else(|| panic!("no summary line:\n{out}"));
    let count = |what: &str| -> usize {
        summary
            .split(", ")
            .find_map(|part| part.rsplit(": ").next()?.strip_suffix(what))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{what}` count in {summary:?}"))
    };
    assert!(count(" passed") > 0, "{out}");
    assert_eq!(count(" failed"), 0, "{out}");
    assert_eq!(count(" skipped"), 0, "{out}");
    assert!(!out.contains("\nFAIL") && !out.contains("\nSKIP"), "{out}");
}

fn curl_suite(url: &str, extra: &[&str]) -> String {
    run_ok(
        Command::new("bash")
            .arg(repo().join("tests/curl_suite.sh"))
            .arg(url)
            .args(extra),
        "curl suite",
    )
}

#[test]
fn openai_sdk_suite_on_the_sim_group() {
    let s = Served::sim();
    let out = openai_suite(&s.url, &["--pinned", "--logprobs"]);
    assert_all_passed(&out);
}

#[test]
fn curl_suite_protocol_errors_and_metrics() {
    let s = Served::sim();
    let out = curl_suite(&s.url, &[]);
    assert!(
        out.contains("PASS huge_body") && out.contains("): 0 failed"),
        "{out}"
    );
}

#[test]
fn over_capacity_is_429_and_a_disconnect_frees_the_slot() {
    let s = Served::sim_with_gateway(
        "  port: 0\n  served_model_name: tokenrouter\n  max_inflight: 1\n  max_queue: 0\n  retry_after_s: 2\n",
        &[],
        &[],
    );
    let out = curl_suite(&s.url, &["overload"]);
    assert!(out.contains("PASS slot_freed_after_disconnect"), "{out}");
}

#[test]
fn api_keys_from_file_and_env() {
    let s = Served::sim_with_gateway(
        "  port: 0\n  served_model_name: tokenrouter\n  api_keys_file: keys.txt\n  api_keys_env: TR_E2E_KEYS\n",
        &[("keys.txt", "# keys\nsk-file-key\n")],
        &[("TR_E2E_KEYS", "sk-env-key")],
    );
    curl_suite(&s.url, &["auth", "sk-file-key"]);
    curl_suite(&s.url, &["auth", "sk-env-key"]);
    let out = openai_suite(
        &s.url,
        &["--api-key", "sk-env-key", "--only", "error_paths"],
    );
    assert!(out.contains("PASS error_paths"), "{out}");
    assert!(out.contains(": 1 passed, 0 failed, 0 skipped"), "{out}");
}

#[test]
fn route_trace_page_colours_tokens_in_headless_chromium() {
    let s = Served::sim();
    let url = format!("{}/ui?prompt=Hello%20there&autorun=1&max_tokens=64", s.url);
    // Read once the page says the stream ended (`data-state` done or error).
    let dom = test_support::chromium::Browser::start().dom_when(
        &url,
        "['done', 'error'].includes(document.body.dataset.state)",
    );
    assert!(
        dom.contains("data-state=\"done\""),
        "the answer did not finish:\n{dom}"
    );
    let spans: Vec<&str> = dom.split("<span class=\"tok\"").skip(1).collect();
    assert!(spans.len() >= 2, "too few token spans:\n{dom}");
    let writers: Vec<&str> = spans
        .iter()
        .filter_map(|s| s.split("data-writer=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(writers.len(), spans.len(), "every span names its writer");
    assert!(
        writers.iter().all(|w| ["quick", "reference"].contains(w)),
        "{writers:?}"
    );
    // Each writer has its own colour, and every span carries its writer's.
    let colour_of = |s: &str| {
        s.split("background: ")
            .nth(1)
            .and_then(|c| c.split(';').next())
            .map(str::to_string)
    };
    let mut colours = std::collections::BTreeMap::new();
    for (s, w) in spans.iter().zip(&writers) {
        let c = colour_of(s).unwrap_or_else(|| panic!("uncoloured span: {s}"));
        assert_eq!(
            colours.entry(*w).or_insert_with(|| c.clone()),
            &c,
            "one colour per writer"
        );
    }
    // The sim hands each token over with probability 0.35: in 64 tokens
    // both write (all-quick has probability 0.65^64, about 1e-12).
    assert_eq!(colours.len(), 2, "both writers appear: {colours:?}");
    let v: Vec<_> = colours.values().collect();
    assert_ne!(v[0], v[1], "the two writers share a colour");
    // Share and switch count, live.
    let tokens: usize = dom
        .split("data-tokens=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no token count shown:\n{dom}"));
    // The server's usage count: every token that carried text got a span.
    assert!(tokens >= spans.len(), "{tokens} < {}", spans.len());
    println!("writers of the {tokens} tokens: {colours:?}");
    assert!(
        dom.contains("switches"),
        "share and switches are shown:\n{dom}"
    );
}

/// Streams a completion with curl in the background, once its first
/// event arrived.
fn background_stream(url: &str, max_tokens: usize) -> Proc {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-N"])
        .arg(format!("{url}/v1/completions"))
        .args(["-H", "content-type: application/json", "-d"])
        .arg(format!(
            r#"{{"model":"tokenrouter","prompt":"x","max_tokens":{max_tokens},"stream":true}}"#
        ));
    let mut curl = Proc::spawn("curl stream", cmd);
    curl.wait_line("the stream's first event", |l| l.starts_with("data:"));
    curl
}

#[test]
fn sigterm_lets_in_flight_requests_finish() {
    let mut s = Served::sim();
    let mut curl = background_stream(&s.url, 150);
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    assert!(curl.wait_exit().success());
    let text = curl.stdout();
    assert!(
        text.contains("\"finish_reason\":\"length\"") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    // Nothing listens any more.
    let after = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{}/health", s.url))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&after.stdout), "000");
}

#[test]
fn sigterm_cancels_what_outlives_the_drain_deadline() {
    let mut s = Served::sim_with_gateway(
        "  port: 0\n  served_model_name: tokenrouter\n  drain_timeout_ms: 300\n",
        &[],
        &[],
    );
    let drain = std::time::Duration::from_millis(300);
    // Streaming already (its first event arrived), 100,000 tokens: minutes.
    let mut curl = background_stream(&s.url, 100_000);
    let t0 = std::time::Instant::now();
    let status = s.terminate();
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    curl.wait_exit();
    let text = curl.stdout();
    assert!(
        text.contains("event: error") && text.contains("shutting down"),
        "the stream ends with an error event: {}",
        &text[text.len().saturating_sub(400)..]
    );
    // The stream outlived the drain deadline: the process waited the whole
    // deadline for it, and it never finished on its own.
    assert!(
        took >= drain,
        "exited {took:?} after SIGTERM, before the {drain:?} drain deadline"
    );
    assert!(!text.contains("\"finish_reason\":\"length\""), "{text}");
    assert!(
        !text.contains("data: [DONE]"),
        "the stream was not cut: {text}"
    );
    // ... and was cut there, not run to its end (minutes) nor left to a
    // hang bound: the exit follows the deadline closely.
    assert!(
        took < drain + std::time::Duration::from_secs(10),
        "exited only {took:?} after SIGTERM"
    );
}

#[test]
fn embedded_default_real_smollm2_pair() {
    // No config: config/default.yaml, built in (only the port moves).
    common::model_dir("smollm2-135m");
    common::model_dir("smollm2-135m-l12-healed");
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd_args = vec!["--port", "0"];
    cmd_args.push("--host");
    cmd_args.push("127.0.0.1");
    let s = Served::start(&cmd_args, Some(cwd), &[]);
    let out = openai_suite(
        &s.url,
        &[
            "--mode",
            "real",
            "--served",
            "default",
            "--pinned",
            "--logprobs",
        ],
    );
    assert_all_passed(&out);
}

fn health(url: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
        ])
        .arg(format!("{url}/health"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn gateway_in_front_of_a_remote_group_reloads_its_group_list() {
    // One process per model (TCP hand-overs), the entry's ingress on its admin port.
    let dir = tempfile::tempdir().unwrap();
    let [tq, tr, admin] = free_ports();
    let text = std::fs::read_to_string(repo().join("config/sim-gateway.yaml")).unwrap();
    let head = text.split("\ngateway:").next().unwrap();
    let cfg = dir.path().join("split.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{head}\ntransport:\n  kind: tcp\n  addresses: {{quick: \"127.0.0.1:{tq}\", reference: \"127.0.0.1:{tr}\"}}\n\
             gateway:\n  port: 0\n  served_model_name: tokenrouter\n  groups_file: groups.txt\n"
        ),
    )
    .unwrap();
    let groups = dir.path().join("groups.txt");
    // At first only a group nobody serves.
    std::fs::write(&groups, "# groups\nhttp://127.0.0.1:1\n").unwrap();
    let (bin, cache) = (common::binary(), common::cache_dir());
    let envs = [("TOKENROUTER_CACHE", cache.to_str().unwrap())];
    let reference = spawn_subserver(&bin, &cfg, "reference", None, &envs);
    let _quick = spawn_subserver(&bin, &cfg, "quick", Some(admin), &envs);
    let entry = format!("http://127.0.0.1:{admin}");

    let cfg_s = cfg.to_str().unwrap().to_string();
    let mut gw = Served::spawn(&["gateway", "--config", &cfg_s, "--port", "0"], None, &[]);
    // The gateway answers, and with no healthy group yet.
    gw.wait_group_list("the first group list");
    assert_eq!(health(&gw.url), "503");
    // The list reloads without a restart; `dns://` names one group per address.
    std::fs::write(
        &groups,
        format!("http://127.0.0.1:1\ndns://localhost:{admin}\n"),
    )
    .unwrap();
    gw.wait_group_list("the list with the dns:// group");
    gw.wait_group_health("the dns:// group healthy", true);
    assert_eq!(health(&gw.url), "200");
    let out = openai_suite(&gw.url, &["--pinned", "--logprobs"]);
    assert_all_passed(&out);
    // A client that leaves cancels the request in the remote group too. It
    // streams, so the test sees the request running (its first event, the
    // entry's gauges above 0) before the client leaves: a request that never
    // started must not pass.
    let mut leaving = Command::new("curl")
        .args(["-s", "-N", "-H", "content-type: application/json"])
        .arg(format!("{}/v1/completions", gw.url))
        .args([
            "-d",
            r#"{"model":"tokenrouter","prompt":"x","max_tokens":50000,"stream":true}"#,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader lives until the client is killed: dropping the pipe would
    // end curl (SIGPIPE) and cancel the request before the gauges are read.
    let mut stream = std::io::BufReader::new(leaving.stdout.take().unwrap());
    {
        use std::io::BufRead;
        let first = (&mut stream)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("data: {"));
        assert!(first.is_some(), "the leaving client got no first event");
    }
    let running = Command::new("curl")
        .args(["-s", &format!("{entry}/metrics")])
        .output()
        .unwrap();
    let running = String::from_utf8_lossy(&running.stdout).to_string();
    let gauge = |name: &str| {
        running
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{{model=\"quick\"}} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Running on the entry, or pending there while the reference writes
    // (its KV kept at home): either way it started and holds blocks.
    assert!(
        gauge("tokenrouter_num_requests_running") + gauge("tokenrouter_num_requests_pending") > 0.0
            && gauge("tokenrouter_kv_cache_usage_perc") > 0.0,
        "the request was not running before the client left:\n{running}"
    );
    leaving.kill().unwrap();
    leaving.wait().unwrap();
    drop(stream);
    // Kept a poll: the entry's metrics are the only sign the cancel landed.
    let start = std::time::Instant::now();
    loop {
        let m = Command::new("curl")
            .args(["-s", &format!("{entry}/metrics")])
            .output()
            .unwrap();
        let m = String::from_utf8_lossy(&m.stdout).to_string();
        if m.contains("tokenrouter_kv_cache_usage_perc{model=\"quick\"} 0\n")
            && m.contains("tokenrouter_num_requests_running{model=\"quick\"} 0\n")
            && m.contains("tokenrouter_num_requests_waiting{model=\"quick\"} 0\n")
            && m.contains("tokenrouter_num_requests_pending{model=\"quick\"} 0\n")
        {
            break;
        }
        assert!(
            start.elapsed() < HANG,
            "hang: the remote request was not cancelled:\n{m}"
        );
        // Spaces the scrapes only; no outcome rides on its length.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // And shrinks again.
    std::fs::write(&groups, "http://127.0.0.1:1\n").unwrap();
    gw.wait_group_list("the shrunk list");
    assert_eq!(health(&gw.url), "503");
    // Back; then one subserver of the group dies: the group is skipped.
    std::fs::write(&groups, format!("{entry}\n")).unwrap();
    gw.wait_group_list("the list with the entry back");
    gw.wait_group_health("the entry's group healthy again", true);
    assert_eq!(health(&gw.url), "200");
    drop(reference);
    gw.wait_group_health("the group unhealthy once the reference died", false);
    assert_eq!(health(&gw.url), "503");
    let out = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-H",
            "content-type: application/json",
        ])
        .arg(format!("{}/v1/completions", gw.url))
        .args([
            "-d",
            r#"{"model":"tokenrouter","prompt":"x","max_tokens":2}"#,
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.ends_with("\n503") && out.contains("no healthy group"),
        "{out}"
    );
}

#[test]
fn std_serving_answers_behind_the_same_openai_endpoint() {
    // `tokenrouter std-serving --serve`: two single-model servers and the
    // one-token-per-call forwarder behind the gateway (what `make bench-cpu`
    // drives as its Std. Serving row), on the sim pair.
    let cfg = repo().join("config/sim-gateway.yaml");
    let served = Served::spawn(
        &[
            "std-serving",
            "--config",
            cfg.to_str().unwrap(),
            "--serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ],
        None,
        &[],
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(HANG)
        .build()
        .unwrap();
    let body = serde_json::json!({
        "model": "tokenrouter",
        "messages": [{"role": "user", "content": "Count to ten."}],
        "max_tokens": 48,
        "ignore_eos": true,
        "seed": 3,
    });
    let resp = client
        .post(format!("{}/v1/chat/completions", served.url))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().unwrap();
    let usage = &v["usage"];
    assert_eq!(usage["completion_tokens"], 48, "{v}");
    let by_model = usage["completion_tokens_by_model"].as_object().unwrap();
    let counts: Vec<u64> = ["quick", "reference"]
        .iter()
        .map(|m| by_model.get(*m).and_then(|c| c.as_u64()).unwrap_or(0))
        .collect();
    assert_eq!(counts.iter().sum::<u64>(), 48, "{v}");
    // Bernoulli(0.35) over 48 positions: both models write (0.65^48 < 1e-8).
    assert!(counts.iter().all(|&c| c > 0), "{v}");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!text.is_empty(), "{v}");
}
