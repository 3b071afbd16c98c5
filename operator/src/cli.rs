//! The operator's command line, shared by `tokenrouter-operator` and
//! `tokenrouter operator`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use warp::Filter;

use crate::groups::DrainPolicy;
use crate::metrics::Metrics;
use crate::{names, Context, Settings};

/// Reconciles TokenRouterDeployments into serving groups and a gateway.
#[derive(clap::Args, Debug, Clone)]
pub struct OperatorArgs {
    /// Watch only this namespace (default: all).
    #[arg(long, env = "TOKENROUTER_OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Serve `/metrics` and `/healthz` here (port 0 picks a free one).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Apply the CRD at start (the Helm chart installs it instead).
    #[arg(long)]
    pub install_crd: bool,
    /// Least seconds between unlisting a group and removing its pods.
    #[arg(long, default_value_t = 90)]
    pub drain_settle_seconds: u64,
    /// Remove an unlisted group after this long even if it is still busy.
    #[arg(long, default_value_t = 600)]
    pub drain_timeout_seconds: u64,
    /// Seconds between autoscaling decisions.
    #[arg(long, default_value_t = 15)]
    pub autoscale_period_seconds: u64,
}

async fn install_crd(client: Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let crd = crds::crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(names::FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    Ok(())
}

impl OperatorArgs {
    /// The reconciler settings these arguments ask for.
    pub fn settings(&self) -> Settings {
        Settings {
            drain: DrainPolicy {
                settle: Duration::from_secs(self.drain_settle_seconds),
                timeout: Duration::from_secs(self.drain_timeout_seconds),
            },
            autoscale_period: Duration::from_secs(self.autoscale_period_seconds.max(1)),
            ..Settings::default()
        }
    }
}

/// Runs the operator until SIGTERM or ctrl-c.
pub async fn run_async(args: OperatorArgs) -> anyhow::Result<()> {
    let client = Client::try_default().await?;
    if args.install_crd {
        install_crd(client.clone()).await?;
    }
    let metrics = Metrics::new()?;
    let ctx = Arc::new(Context::new(client, metrics.clone(), args.settings()));
    let metrics_route = warp::path!("metrics").map(move || metrics.render());
    let health = warp::path!("healthz").map(|| "ok");
    let (addr, server) =
        warp::serve(metrics_route.or(health)).try_bind_ephemeral(args.metrics_addr)?;
    // Scripts and tests read the bound address from this line.
    eprintln!("tokenrouter-operator listening on http://{addr}");
    let server = tokio::spawn(server);
    crate::run(ctx, args.namespace).await;
    server.abort();
    Ok(())
}

/// [`run_async`] on a new multi-threaded runtime.
pub fn run(args: OperatorArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run_async(args))
}
