//! `gateway.text_side: backend`: a gateway with no copy of the model's
//! directory (as the gateway pod runs, without a model volume) loads its
//! tokenizer, chat template and sampling defaults from a group's subserver
//! (`GET /internal/text-side`) and then renders and tokenizes exactly as a
//! gateway reading the directory; a group that cannot serve them leaves it
//! not ready, with requests refused by a 503 that says why.
//!
//! The group runs in this process (a sim pair speaking SmolLM2's
//! tokenizer, `config/sim-gateway.yaml`) with its real HTTP surface.

#![cfg(feature = "inproc")]
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use subserver::config::EngineConfig;
use subserver::service::Service;
use test_support::HANG;

fn config_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config")
}

/// `config/sim-gateway.yaml` up to its `gateway:` block.
fn sim_head() -> String {
    let text = std::fs::read_to_string(config_dir().join("sim-gateway.yaml")).unwrap();
    text.split("\ngateway:").next().unwrap().to_string()
}

/// A group of `head` in this process, serving its admin port.
fn start_group(head: &str) -> (Service, String) {
    let yaml = format!("{head}\ngateway: {{port: 0}}\n");
    let cfg = EngineConfig::from_yaml_str(&yaml, &config_dir()).unwrap();
    let service = Service::start(&cfg, Some("127.0.0.1:0".parse().unwrap())).unwrap();
    let url = format!("http://{}", service.admin_addr().unwrap());
    (service, url)
}

/// A remote gateway over `group` with config `head` and `gateway_extra`.
async fn start_gateway(
    head: &str,
    group: &str,
    gateway_extra: &str,
) -> (gateway::GatewayServer, gateway::discovery::Discovery) {
    let yaml = format!(
        "{head}\ngateway: {{port: 0, served_model_name: tokenrouter, \
         groups: [\"{group}\"]{gateway_extra}}}\n"
    );
    let cfg = EngineConfig::from_yaml_str(&yaml, &config_dir()).unwrap();
    let (gw, discovery) = gateway::app::remote(&cfg).await.unwrap();
    let server = gateway::GatewayServer::bind(gw, "127.0.0.1:0")
        .await
        .unwrap();
    (server, discovery)
}

async fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    let r = reqwest::get(format!("http://{addr}{path}")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Polls `/health` until `done` holds for its (status, body).
async fn wait_health(addr: SocketAddr, what: &str, done: impl Fn(u16, &Value) -> bool) -> Value {
    tokio::time::timeout(HANG, async {
        loop {
            let (status, body) = get(addr, "/health").await;
            if done(status, &body) {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("hang: {what}"))
}

fn conversation() -> Value {
    json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."}
    ])
}

/// What a gateway makes of the conversation: its prompt tokens (from
/// `/tokenize`), a chat completion's prompt token count, and the routed
/// model's sampling defaults (`/v1/models`).
async fn what_it_sends(addr: SocketAddr) -> (Vec<u64>, u64, Value) {
    let (status, tokens) = post(addr, "/tokenize", &json!({"messages": conversation()})).await;
    assert_eq!(status, 200, "{tokens}");
    let tokens: Vec<u64> = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    let chat =
        json!({"model": "tokenrouter", "messages": conversation(), "max_tokens": 4, "seed": 1});
    let (status, answer) = post(addr, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    let prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    let (_, models) = get(addr, "/v1/models").await;
    (
        tokens,
        prompt_tokens,
        models["data"][0]["sampling_defaults"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_the_models_directory_loads_its_text_side_from_a_group() {
    let head = sim_head();
    let (_group, url) = start_group(&head);

    // The gateway as `make run` has it: the entry model's directory.
    let (local, _d1) = start_gateway(&head, &url, "").await;
    wait_health(local.local_addr(), "the local gateway ready", |s, _| {
        s == 200
    })
    .await;
    let expected = what_it_sends(local.local_addr()).await;
    assert!(
        expected.0.len() > 10,
        "the template wraps the turns: {expected:?}"
    );

    // The gateway pod's view: the config names paths that do not exist here.
    let elsewhere = head.replace("${TOKENROUTER_CACHE:-../.cache}", "/nonexistent");
    assert_ne!(elsewhere, head);
    let (remote, _d2) = start_gateway(&elsewhere, &url, ", text_side: backend").await;
    wait_health(remote.local_addr(), "the text side loaded", |s, _| s == 200).await;
    let got = what_it_sends(remote.local_addr()).await;
    assert_eq!(got.0, expected.0, "the same chat template and tokenizer");
    assert_eq!(got.1, expected.1, "the same prompt tokens");
    assert_eq!(
        got.2, expected.2,
        "the entry's generation_config.json defaults too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_text_side_leaves_the_gateway_unready_with_the_reason() {
    // A sim group whose entry model has no directory: nothing to serve.
    let head = sim_head()
        .lines()
        .filter(|l| !l.trim_start().starts_with("path:"))
        .collect::<Vec<_>>()
        .join("\n");
    let (_group, url) = start_group(&head);
    let (gw, _d) = start_gateway(&head, &url, ", text_side: backend").await;
    let addr = gw.local_addr();
    let health = wait_health(addr, "the loader's failure in /health", |s, b| {
        s == 503
            && b["reason"]
                .as_str()
                .unwrap_or("")
                .contains("has no directory")
    })
    .await;
    assert!(
        health["reason"].as_str().unwrap().contains(&url),
        "names the group: {health}"
    );
    let chat = json!({"model": "tokenrouter", "messages": conversation(), "max_tokens": 4});
    let (status, answer) = post(addr, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["type"], "server_error", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("has not loaded the tokenizer") && message.contains("has no directory"),
        "{message}"
    );
    // Retries do not make it ready: two more of the loader's rounds end
    // (the event), and it is still unready.
    let text = gw.gateway().primary().text.clone();
    let seen = text.rounds_waiting();
    tokio::time::timeout(HANG, async {
        while text.rounds_waiting() < seen + 2 && !text.is_loaded() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("hang: the loader stopped retrying");
    assert!(!text.is_loaded(), "a retry made it ready");
    assert_eq!(get(addr, "/health").await.0, 503);
}
