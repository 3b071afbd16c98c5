//! `tokenrouter bench` against servers that close keep-alive connections
//! (llama.cpp's `llama-server` closes the connection after every streamed
//! response although its headers promise keep-alive): a request that went
//! out on a reused connection and got no response byte never reached the
//! server's handler, so the load generator retries it and counts the retry
//! apart; a server that drops requests, or breaks off a response, still
//! fails them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use loadgen::bench::{run, RunSettings, Summary};
use loadgen::client::{Endpoint, RequestSpec};
use loadgen::dataset::Prompt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the test server treats a connection.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Answers, then waits for the next request on the connection and
    /// closes it unread: the worst case of a server closing a connection it
    /// advertised as keep-alive, deterministic.
    CloseOnNextRequest,
    /// Answers, then closes at once (what llama-server does): the client's
    /// next request races the close.
    CloseAfterResponse,
    /// Reads each request and closes without a response: a broken server.
    DropRequest,
    /// Sends the head and one token, then closes: a server dying mid-answer.
    DropMidStream,
}

/// Requests the server answered (a full response) or broke off (its head
/// sent); a request answered twice would show here as one too many.
#[derive(Default)]
struct Counts {
    answered: AtomicUsize,
    broken: AtomicUsize,
}

/// Reads one request (head and Content-Length body); `None` at EOF.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                return Some(head);
            }
        }
        let mut chunk = [0u8; 4096];
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One chunk of a chunked body.
fn chunk(data: &str) -> String {
    format!("{:x}\r\n{data}\r\n", data.len())
}

const HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
Transfer-Encoding: chunked\r\nKeep-Alive: timeout=5, max=100\r\n\r\n";

/// A streamed chat answer of three tokens, as llama-server writes it.
fn answer() -> String {
    let mut s = String::from(HEAD);
    for t in ["a", "b", "c"] {
        let ev = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n");
        s.push_str(&chunk(&ev));
    }
    s.push_str(&chunk("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":2}}\n\n"));
    s.push_str(&chunk("data: [DONE]\n\n"));
    s.push_str("0\r\n\r\n");
    s
}

/// Serves one request on the connection, then closes it the way `mode` says
/// (every mode closes a connection after its first request).
async fn serve_conn(mut sock: TcpStream, mode: Mode, counts: Arc<Counts>) {
    let mut buf = Vec::new();
    let Some(head) = read_request(&mut sock, &mut buf).await else {
        return;
    };
    if !head.starts_with("POST") {
        // `bench` scrapes /metrics; this server has none.
        let _ = sock
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        return;
    }
    match mode {
        Mode::DropRequest => {}
        Mode::DropMidStream => {
            let ev = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
            let _ = sock
                .write_all(format!("{HEAD}{}", chunk(ev)).as_bytes())
                .await;
            counts.broken.fetch_add(1, Ordering::SeqCst);
        }
        Mode::CloseOnNextRequest | Mode::CloseAfterResponse => {
            if sock.write_all(answer().as_bytes()).await.is_err() {
                return;
            }
            counts.answered.fetch_add(1, Ordering::SeqCst);
            if let Mode::CloseOnNextRequest = mode {
                // Wait for the next request's first byte, then close.
                let mut one = [0u8; 1];
                let _ = sock.read(&mut one).await;
            }
        }
    }
}

/// Starts the server; returns its URL and counters.
async fn server(mode: Mode) -> (String, Arc<Counts>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("local address"));
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve_conn(sock, mode, c.clone()));
        }
    });
    (url, counts)
}

fn settings(url: String, concurrency: usize) -> RunSettings {
    RunSettings {
        spec: RequestSpec {
            base_url: url,
            model: "m".into(),
            endpoint: Endpoint::Chat,
            temperature: 0.0,
            ignore_eos: false,
            api_key: None,
        },
        concurrency,
        num_prompts: 12,
        warmup: 2,
        max_tokens: 3,
        seed: 1,
        progress: false,
    }
}

fn prompts() -> Arc<Vec<Prompt>> {
    Arc::new(
        (0..4)
            .map(|i| Prompt {
                text: format!("prompt {i}"),
                reference: None,
                max_tokens: None,
                kind: None,
                aliases: Vec::new(),
            })
            .collect(),
    )
}

/// One bench run at N against a fresh server; a deadline only catches hangs.
async fn bench(mode: Mode, n: usize) -> (Summary, Arc<Counts>) {
    let (url, counts) = server(mode).await;
    let s = settings(url, n);
    let (_, summary) = tokio::time::timeout(Duration::from_secs(60), run(&s, prompts(), None))
        .await
        .expect("bench hung");
    (summary, counts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_a_closed_keep_alive_connection_are_retried_and_counted_apart() {
    for n in [1, 4] {
        let (s, counts) = bench(Mode::CloseOnNextRequest, n).await;
        assert_eq!(
            (s.completed, s.failed),
            (12, 0),
            "N={n}: {:?}",
            s.first_error
        );
        // Every measured request past a client's first went out on a
        // reused connection that the server then closed unread: one retry
        // each (N clients, or fewer if one got no request).
        assert!(
            (12 - n..12).contains(&s.client_retries),
            "N={n}: {}",
            s.client_retries
        );
        // Each request was answered once (warm-up included): none twice.
        assert_eq!(counts.answered.load(Ordering::SeqCst), 14, "N={n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_closing_after_each_response_fails_no_request() {
    for n in [1, 4] {
        let (s, counts) = bench(Mode::CloseAfterResponse, n).await;
        assert_eq!(
            (s.completed, s.failed),
            (12, 0),
            "N={n}: {:?}",
            s.first_error
        );
        assert_eq!(counts.answered.load(Ordering::SeqCst), 14, "N={n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn genuine_server_failures_stay_failures() {
    let (s, _) = bench(Mode::DropRequest, 4).await;
    assert_eq!((s.completed, s.failed, s.client_retries), (0, 12, 0));
    assert!(s.first_error.is_some());
    // Response bytes arrived before the break: never retried.
    let (s, counts) = bench(Mode::DropMidStream, 4).await;
    assert_eq!((s.completed, s.failed, s.client_retries), (0, 12, 0));
    assert_eq!(counts.broken.load(Ordering::SeqCst), 14);
}
