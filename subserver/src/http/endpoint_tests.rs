//! The endpoints over real sockets on 127.0.0.1:0, with a test double of
//! [`AdminApi`] (the seam under test) and the real metrics registry.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use prometheus::Registry;
use serde_json::{json, Value};

use super::*;
use crate::metrics::{exposition, names, SubserverMetrics};

/// Thresholds in a mutex, a switchable health, a fixed snapshot; refuses
/// any B above 64 (so the subserver-side 400 path is exercised).
struct FakeAdmin {
    table: Mutex<ThresholdTable>,
    health: Mutex<Result<(), String>>,
    live: Mutex<Result<(), String>>,
}

impl FakeAdmin {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            table: Mutex::new(
                [
                    ("quick".to_string(), vec![1, 1, 2]),
                    ("reference".to_string(), vec![1, 2, 2]),
                ]
                .into(),
            ),
            health: Mutex::new(Ok(())),
            live: Mutex::new(Ok(())),
        })
    }
}

impl AdminApi for FakeAdmin {
    fn alive(&self) -> Result<(), String> {
        self.live.lock().unwrap().clone()
    }
    fn healthy(&self) -> Result<(), String> {
        self.health.lock().unwrap().clone()
    }
    fn thresholds(&self) -> ThresholdTable {
        self.table.lock().unwrap().clone()
    }
    fn set_thresholds(&self, t: ThresholdTable) -> Result<ThresholdTable, String> {
        if let Some((m, _)) = t.iter().find(|(_, bs)| bs.iter().any(|&b| b > 64)) {
            return Err(format!("threshold for `{m}` above the max batch 64"));
        }
        let mut table = self.table.lock().unwrap();
        table.extend(t);
        Ok(table.clone())
    }
    fn snapshot(&self) -> Value {
        let table = self.table.lock().unwrap();
        let models: serde_json::Map<String, Value> = table
            .keys()
            .map(|m| {
                (
                    m.clone(),
                    json!({"running": 1, "waiting": 2, "pending": 0, "kv_usage": 0.5}),
                )
            })
            .collect();
        json!({ "models": models })
    }
}

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

struct Fixture {
    server: SubserverHttp,
    admin: Arc<FakeAdmin>,
    metrics: SubserverMetrics,
    client: reqwest::Client,
}

impl Fixture {
    fn start() -> Self {
        let registry = Registry::new();
        let metrics = SubserverMetrics::new(&registry).unwrap();
        let admin = FakeAdmin::new();
        let server = SubserverHttp::start(localhost(), admin.clone(), registry).unwrap();
        Self {
            server,
            admin,
            metrics,
            client: reqwest::Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.local_addr())
    }

    async fn get(&self, path: &str) -> (u16, String, Option<String>) {
        let resp = self.client.get(self.url(path)).send().await.unwrap();
        unpack(resp).await
    }

    async fn put(&self, path: &str, body: &str) -> (u16, String, Option<String>) {
        let resp = self
            .client
            .put(self.url(path))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        unpack(resp).await
    }
}

async fn unpack(resp: reqwest::Response) -> (u16, String, Option<String>) {
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string());
    (status, resp.text().await.unwrap(), ct)
}

fn parse_json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Checks the OpenAI-style error body and returns its message.
fn error_message(body: &str) -> String {
    let v = parse_json(body);
    assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
    v["error"]["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn metrics_endpoint_serves_the_registry_as_text() {
    let f = Fixture::start();
    let quick = f.metrics.for_model("quick");
    quick.observe_step(2, 2, 0.01).unwrap();
    quick.add_tokens(9);
    let (status, body, ct) = f.get("/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(ct.as_deref(), Some("text/plain; version=0.0.4"));
    let e = exposition::parse(&body).unwrap_or_else(|err| panic!("{err}\n{body}"));
    assert_eq!(
        e.value(names::TOKENS_COMMITTED_TOTAL, &[("model", "quick")]),
        Some(9.0)
    );
    let count = format!("{}_count", names::STEP_LATENCY_SECONDS);
    assert_eq!(
        e.value(&count, &[("model", "quick"), ("batch_bucket", "2")]),
        Some(1.0)
    );
    // A later scrape sees later updates.
    quick.add_tokens(1);
    let (_, body, _) = f.get("/metrics").await;
    let e = exposition::parse(&body).unwrap();
    assert_eq!(
        e.value(names::TOKENS_COMMITTED_TOTAL, &[("model", "quick")]),
        Some(10.0)
    );
}

/// Liveness answers for the process alone: a peer down makes `/health`
/// 503 (not ready) while `/livez` stays 200 (no restart).
#[tokio::test]
async fn livez_ignores_peers_and_fails_only_for_this_process() {
    let f = Fixture::start();
    *f.admin.health.lock().unwrap() = Err("peers unreachable: reference".to_string());
    assert_eq!(f.get("/health").await.0, 503);
    let (status, body, _) = f.get("/livez").await;
    assert_eq!((status, parse_json(&body)), (200, json!({"status": "ok"})));
    *f.admin.live.lock().unwrap() = Err("the scheduler has stopped".to_string());
    let (status, body, _) = f.get("/livez").await;
    assert_eq!(status, 503);
    assert_eq!(
        parse_json(&body),
        json!({"status": "unhealthy", "reason": "the scheduler has stopped"})
    );
}

#[tokio::test]
async fn health_is_200_when_healthy_and_503_with_the_reason_otherwise() {
    let f = Fixture::start();
    let (status, body, ct) = f.get("/health").await;
    assert_eq!((status, parse_json(&body)), (200, json!({"status": "ok"})));
    assert_eq!(ct.as_deref(), Some("application/json"));
    *f.admin.health.lock().unwrap() = Err("scheduler thread for `quick` exited".to_string());
    let (status, body, _) = f.get("/health").await;
    assert_eq!(status, 503);
    assert_eq!(
        parse_json(&body),
        json!({"status": "unhealthy", "reason": "scheduler thread for `quick` exited"})
    );
}

#[tokio::test]
async fn thresholds_get_and_put_round_trip() {
    let f = Fixture::start();
    let (status, body, _) = f.get("/admin/thresholds").await;
    assert_eq!(status, 200);
    assert_eq!(
        parse_json(&body),
        json!({"delayed_batching_threshold": {"quick": [1, 1, 2], "reference": [1, 2, 2]}})
    );
    let (status, body, _) = f
        .put(
            "/admin/thresholds",
            r#"{"delayed_batching_threshold": {"reference": [1, 1, 3, 4]}}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let want =
        json!({"delayed_batching_threshold": {"quick": [1, 1, 2], "reference": [1, 1, 3, 4]}});
    assert_eq!(parse_json(&body), want);
    assert_eq!(f.admin.thresholds()["reference"], vec![1, 1, 3, 4]);
    let (_, body, _) = f.get("/admin/thresholds").await;
    assert_eq!(parse_json(&body), want);
}

#[tokio::test]
async fn bad_threshold_puts_are_400_and_change_nothing() {
    let f = Fixture::start();
    let before = f.admin.thresholds();
    let cases = [
        ("{not json", "not valid JSON"),
        (r#"{"delayed_batching_threshold": {}}"#, "is empty"),
        (
            r#"{"delayed_batching_threshold": {"quick": []}}"#,
            "`delayed_batching_threshold.quick` is empty",
        ),
        (
            r#"{"delayed_batching_threshold": {"quick": [2, 0]}}"#,
            "quick[1]` must be a positive integer, got 0",
        ),
        (
            r#"{"delayed_batching_threshold": {"quick": [-1]}}"#,
            "got -1",
        ),
        (
            r#"{"delayed_batching_threshold": {"huge": [1]}}"#,
            "unknown model `huge`",
        ),
        (
            r#"{"delayed_batching_threshold": {"quick": [1, 100]}}"#,
            "above the max batch 64",
        ),
    ];
    for (body, want) in cases {
        let (status, answer, _) = f.put("/admin/thresholds", body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = error_message(&answer);
        assert!(message.contains(want), "{body}: {message}");
    }
    assert_eq!(f.admin.thresholds(), before);
}

#[tokio::test]
async fn state_endpoint_returns_the_snapshot() {
    let f = Fixture::start();
    let (status, body, _) = f.get("/admin/state").await;
    assert_eq!(status, 200);
    assert_eq!(parse_json(&body), f.admin.snapshot());
    assert_eq!(parse_json(&body)["models"]["quick"]["waiting"], 2);
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let f = Fixture::start();
    let (status, body, _) = f.get("/nope").await;
    assert_eq!(status, 404);
    assert_eq!(parse_json(&body)["error"]["type"], "not_found_error");
    let resp = f.client.post(f.url("/metrics")).send().await.unwrap();
    let (status, body, _) = unpack(resp).await;
    assert_eq!(status, 405, "{body}");
    assert!(error_message(&body).contains("method not allowed"));
    let big = format!(
        r#"{{"delayed_batching_threshold": {{"quick": [{}1]}}}}"#,
        "1,".repeat(50_000)
    );
    let (status, body, _) = f.put("/admin/thresholds", &big).await;
    assert_eq!(status, 413, "{body}");
}

#[test]
fn drop_stops_the_server_and_closes_the_port() {
    let registry = Registry::new();
    let server = SubserverHttp::start(localhost(), FakeAdmin::new(), registry).unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);
    TcpStream::connect(addr).expect("server should accept before drop");
    drop(server);
    let err = TcpStream::connect(addr).expect_err("port still open after drop");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    // The port is free again.
    TcpListener::bind(addr).expect("port not released");
}

#[tokio::test]
async fn drop_with_a_kept_alive_client_connection_returns_promptly() {
    let f = Fixture::start();
    let addr = f.server.local_addr();
    // The client pools the connection (keep-alive) after this request.
    assert_eq!(f.get("/health").await.0, 200);
    // An idle kept-alive connection ends at once on stop: nothing waits for
    // the grace deadline (`stop` says whether any connection had to be cut).
    assert!(
        f.server.stop(),
        "graceful stop waited on an idle connection"
    );
    assert!(TcpStream::connect(addr).is_err());
    assert!(f
        .client
        .get(format!("http://{addr}/health"))
        .send()
        .await
        .is_err());
}

#[test]
fn bind_errors_name_the_address() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = SubserverHttp::start(addr, FakeAdmin::new(), Registry::new())
        .err()
        .expect("bound an address in use");
    assert!(
        matches!(err, HttpError::AddrInUse { addr: a } if a == addr),
        "{err:?}"
    );
    assert_eq!(err.to_string(), format!("address {addr} in use"));

    // Not a local address: a different, still precise, error.
    let foreign: SocketAddr = "192.0.2.1:0".parse().unwrap();
    let err = SubserverHttp::start(foreign, FakeAdmin::new(), Registry::new())
        .err()
        .expect("bound a foreign address");
    assert!(
        err.to_string()
            .starts_with("cannot listen on 192.0.2.1:0: "),
        "{err}"
    );
}

#[tokio::test]
async fn routing_threshold_without_a_knob_reads_null_and_refuses_a_put() {
    let f = Fixture::start();
    let (status, body, _) = f.get("/admin/routing_threshold").await;
    assert_eq!(
        (status, parse_json(&body)),
        (200, json!({"routing_threshold": null}))
    );
    let (status, body, _) = f
        .put("/admin/routing_threshold", r#"{"routing_threshold": 0.5}"#)
        .await;
    assert_eq!(status, 400);
    assert!(
        error_message(&body).contains("no live routing threshold"),
        "{body}"
    );
    let (status, body, _) = f.put("/admin/routing_threshold", r#"{"p": 0.5}"#).await;
    assert_eq!(status, 400);
    assert!(error_message(&body).contains("routing_threshold"), "{body}");
}

/// A request with an optional bearer token.
async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: Option<&str>,
) -> (u16, String, Option<String>) {
    let mut req = client.request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let auth = resp
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .map(|v| v.to_str().unwrap().to_string());
    (resp.status().as_u16(), resp.text().await.unwrap(), auth)
}

#[tokio::test]
async fn control_endpoints_take_the_bearer_token() {
    let registry = Registry::new();
    let access = ControlAccess {
        token: AdminToken::new("tok-123"),
        bind: None,
    };
    let server =
        SubserverHttp::start_secured(localhost(), FakeAdmin::new(), registry, None, access)
            .unwrap();
    let client = reqwest::Client::new();
    let url = |p: &str| format!("http://{}{p}", server.local_addr());
    use reqwest::Method;
    for (method, path) in [
        (Method::GET, "/admin/thresholds"),
        (Method::PUT, "/admin/thresholds"),
        (Method::GET, "/admin/routing_threshold"),
        (Method::PUT, "/admin/routing_threshold"),
        (Method::GET, "/admin/state"),
        (Method::POST, "/internal/generate"),
    ] {
        for token in [None, Some("wrong"), Some("tok-1234")] {
            let (status, body, auth) = call(&client, method.clone(), url(path), token).await;
            assert_eq!(status, 401, "{method} {path} with {token:?}: {body}");
            assert_eq!(auth.as_deref(), Some("Bearer"));
            assert!(error_message(&body).contains("bearer token"), "{body}");
        }
    }
    let (status, body, _) = call(&client, Method::GET, url("/admin/state"), Some("tok-123")).await;
    assert_eq!(status, 200, "{body}");
    // The right token reaches the endpoint (its own 400/503, not 401).
    let (status, body, _) = call(
        &client,
        Method::POST,
        url("/internal/generate"),
        Some("tok-123"),
    )
    .await;
    assert_ne!(status, 401, "{body}");
    // Metrics and health stay open.
    for path in ["/metrics", "/health"] {
        assert_eq!(call(&client, Method::GET, url(path), None).await.0, 200);
    }
}

#[tokio::test]
async fn control_endpoints_can_have_their_own_listener() {
    let access = ControlAccess {
        token: None,
        bind: Some(localhost()),
    };
    let server =
        SubserverHttp::start_secured(localhost(), FakeAdmin::new(), Registry::new(), None, access)
            .unwrap();
    let control = server.control_addr().expect("a control listener");
    assert_ne!(control, server.local_addr());
    let client = reqwest::Client::new();
    let main = |p: &str| format!("http://{}{p}", server.local_addr());
    let (status, body, _) = call(&client, reqwest::Method::GET, main("/admin/state"), None).await;
    assert_eq!(status, 403, "{body}");
    assert!(error_message(&body).contains("loopback"), "{body}");
    assert_eq!(
        call(&client, reqwest::Method::GET, main("/health"), None)
            .await
            .0,
        200
    );
    let (status, body, _) = call(
        &client,
        reqwest::Method::GET,
        format!("http://{control}/admin/thresholds"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(server.stop());
    // Both ports are closed after the stop.
    assert!(TcpStream::connect(control).is_err());

    // Off loopback without a token: refused before binding anything.
    let unguarded = ControlAccess {
        token: None,
        bind: Some("0.0.0.0:0".parse().unwrap()),
    };
    let err = SubserverHttp::start_secured(
        localhost(),
        FakeAdmin::new(),
        Registry::new(),
        None,
        unguarded,
    )
    .err()
    .expect("an unguarded control listener was accepted");
    assert!(err.to_string().contains("TOKENROUTER_ADMIN_TOKEN"), "{err}");
}
