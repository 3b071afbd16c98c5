//! One gateway serving two in-process routed groups (`serve --config A
//! --config B`): both names answer on their own group, members resolve,
//! `/v1/models` lists both with their sampling defaults, two groups of one
//! name are refused, and the defaults reach the engine.

#![cfg(feature = "inproc")]
#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::path::Path;

use serde_json::Value;
use subserver::config::EngineConfig;
use subserver::service::Service;
use test_support::HANG;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A sim pair without a tokenizer (token-id prompts) whose models emit
/// seeded logits (the scheduler samples), named `name`, with `extra` keys.
fn sim(name: &str, members: [&str; 2], extra: &str) -> EngineConfig {
    let [a, b] = members;
    let yaml = format!(
        "model:\n  \
           {a}: {{sim: {{latency_ms: {{base: 1.0}}, vocab_size: 1000, logits: true}}}}\n  \
           {b}: {{sim: {{latency_ms: {{base: 1.0}}, vocab_size: 1000, logits: true}}}}\n\
         system: {{entry_model: {a}, kv_cache_tokens: 16384}}\n\
         scheduler_class: Bernoulli\n\
         scheduler_kwargs: {{probability: 0.0}}\n\
         backend: sim\n\
         max_batch_wait_ms: 5\n\
         gateway: {{port: 0, served_model_name: {name}}}\n{extra}"
    );
    EngineConfig::from_yaml_str(&yaml, Path::new(".")).unwrap()
}

/// `default` (greedy by default) and `fast` (engine defaults); both have a
/// `reference` member, and `fast` has `tiny`.
async fn start() -> (gateway::GatewayServer, Vec<Service>) {
    let cfgs = [
        sim(
            "default",
            ["quick", "reference"],
            "generation_config: {temperature: 0, top_k: 20}\n",
        ),
        sim("fast", ["tiny", "reference"], ""),
    ];
    let (gw, services) = gateway::app::inproc_groups(&cfgs).unwrap();
    let server = gateway::GatewayServer::bind(gw, "127.0.0.1:0")
        .await
        .unwrap();
    (server, services)
}

/// One HTTP exchange: the status and the JSON body.
async fn call(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut c = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(HANG, c.read_to_end(&mut answer))
        .await
        .expect("the server answered")
        .unwrap();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text[9..12].parse().unwrap();
    let json = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| serde_json::from_str(b.trim()).unwrap_or(Value::Null))
        .unwrap();
    (status, json)
}

/// The member names the answer's usage counts tokens for: the group that ran it.
fn members_of(json: &Value) -> Vec<String> {
    let mut keys: Vec<String> = json["usage"]["completion_tokens_by_model"]
        .as_object()
        .unwrap_or_else(|| panic!("no usage by model: {json}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_group_names_answer_on_their_own_group() {
    let (server, _services) = start().await;
    let addr = server.local_addr();
    let body = |model: &str| format!(r#"{{"model":"{model}","prompt":[1,2,3],"max_tokens":3}}"#);
    for (model, group) in [
        ("fast", ["reference", "tiny"]),
        ("default", ["quick", "reference"]),
        ("quick", ["quick", "reference"]),
        // A member only `fast` has runs there; one both have, on the first.
        ("tiny", ["reference", "tiny"]),
        ("reference", ["quick", "reference"]),
    ] {
        let (status, json) = call(addr, "POST", "/v1/completions", &body(model)).await;
        assert_eq!(status, 200, "{model}: {json}");
        assert_eq!(json["model"], model);
        assert_eq!(members_of(&json), group, "{model}");
    }
    let (status, json) = call(addr, "POST", "/v1/completions", &body("nope")).await;
    assert_eq!(status, 404, "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_both_groups_and_their_members_with_defaults() {
    let (server, _services) = start().await;
    let (status, json) = call(server.local_addr(), "GET", "/v1/models", "").await;
    assert_eq!(status, 200, "{json}");
    let data = json["data"].as_array().unwrap();
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["default", "fast", "quick", "reference", "tiny"]);
    let by_id = |id: &str| data.iter().find(|m| m["id"] == id).unwrap();
    assert_eq!(by_id("default")["routing"], "token-level");
    assert_eq!(by_id("default")["object"], "model");
    assert_eq!(
        by_id("default")["sampling_defaults"],
        serde_json::json!({"temperature": 0.0, "top_p": 1.0, "top_k": 20, "min_p": 0.0})
    );
    assert_eq!(
        by_id("fast")["sampling_defaults"],
        serde_json::json!({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0})
    );
    assert_eq!(by_id("reference")["group"], "default");
    assert_eq!(by_id("reference")["routing"], "query-level");
    assert_eq!(by_id("tiny")["group"], "fast");
    // Sim members run in their dtype (`auto`: bf16 or f32 by CPU); the
    // group lists its members'.
    let p = by_id("reference")["precision"].as_str().unwrap();
    assert!(["bf16", "f32"].contains(&p), "{p}");
    assert_eq!(by_id("default")["precision"]["reference"], p);
    assert!(by_id("default")["precision"]["quick"].is_string());
}

#[test]
fn two_groups_of_one_name_are_refused() {
    let cfgs = [
        sim("tr", ["quick", "reference"], ""),
        sim("tr", ["tiny", "big"], ""),
    ];
    let err = gateway::app::inproc_groups(&cfgs).err().expect("refused");
    assert_eq!(err.error_type(), "duplicate_group");
    let msg = err.to_string();
    assert!(
        msg.contains("`tr`")
            && msg.contains("configs 1 and 2")
            && msg.contains("served_model_name"),
        "{msg}"
    );
}

/// The tokens of a completion (from its logprobs).
async fn tokens(addr: std::net::SocketAddr, model: &str, sampling: &str) -> Vec<Value> {
    let body = format!(
        r#"{{"model":"{model}","prompt":[5,6,7],"max_tokens":8,"seed":1,"logprobs":0{sampling}}}"#
    );
    let (status, json) = call(addr, "POST", "/v1/completions", &body).await;
    assert_eq!(status, 200, "{json}");
    json["choices"][0]["logprobs"]["tokens"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_defaults_reach_the_engine_and_the_requests_values_win() {
    let (server, _services) = start().await;
    let addr = server.local_addr();
    // `default`'s defaults: temperature 0 with top_k 20, i.e. greedy.
    let by_default = tokens(addr, "default", "").await;
    assert_eq!(by_default.len(), 8);
    let greedy = tokens(addr, "default", r#","temperature":0,"top_k":-1"#).await;
    assert_eq!(
        by_default, greedy,
        "temperature 0 with a default top_k is greedy"
    );
    // The request's own temperature wins: it samples.
    let sampled = tokens(addr, "default", r#","temperature":1.0,"top_k":-1"#).await;
    assert_ne!(sampled, greedy);
    // `fast` has no defaults: temperature 1, the same draw as asking for it.
    let fast = tokens(addr, "fast", "").await;
    let fast_t1 = tokens(addr, "fast", r#","temperature":1.0"#).await;
    assert_eq!(fast, fast_t1);
}
