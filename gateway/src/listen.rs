//! What `serve` and `gateway` share once their gateway is built: a tokio
//! runtime, the listening socket, the "listening on" line scripts and tests
//! read, and a drain on SIGTERM or ctrl-c.

use std::future::Future;
use std::io::Write;

use anyhow::{Context, Result};

/// The multi-threaded runtime the gateway runs on.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("gateway")
        .build()
        .context("starting the tokio runtime")
}

/// Binds `gw` at `host:port`, announces `"{name}: listening on http://ADDR"`
/// on stdout, serves until a stop signal, then drains in-flight requests.
pub async fn serve_until_signal(
    gw: std::sync::Arc<crate::Gateway>,
    host: &str,
    port: u16,
    name: &str,
) -> Result<()> {
    let server = crate::GatewayServer::bind(gw, &format!("{host}:{port}")).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{name}: listening on http://{}", server.local_addr())?;
    out.flush()?;
    drop(out);
    crate::shutdown::signal().await;
    server.drain().await;
    Ok(())
}

/// Runs `fut` to completion on a fresh gateway runtime.
pub fn block_on<T>(fut: impl Future<Output = Result<T>>) -> Result<T> {
    runtime()?.block_on(fut)
}
