//! The operator's command line (`tokenrouter-operator`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use tracing::warn;
use warp::Filter;

use crate::build::network::NetworkAccess;
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
    /// Give every resource a NetworkPolicy that closes its serving pods'
    /// peer and admin ports to all but its own pods and the operator.
    /// Needs `--operator-namespace` (the operator's pod namespace).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub network_policy: bool,
    /// Put a finalizer on every resource and delete what it owns before it
    /// goes: only for clusters without a garbage collector. Off, the owner
    /// references remove everything, and an uninstalled operator never
    /// leaves resources (and their namespaces) stuck terminating.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub cleanup_finalizer: bool,
    /// The namespace the operator's pod runs in (downward API).
    #[arg(long, env = "POD_NAMESPACE")]
    pub operator_namespace: Option<String>,
    /// Labels of the operator's pods, `key=value,...`, which the policies admit.
    #[arg(long, value_delimiter = ',', value_parser = parse_label,
          default_value = "app.kubernetes.io/name=tokenrouter-operator")]
    pub operator_pod_labels: Vec<(String, String)>,
    /// Namespaces whose pods may scrape the serving pods' admin port.
    #[arg(long, value_delimiter = ',')]
    pub metrics_namespaces: Vec<String>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected key=value, got {text:?}")),
    }
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
    /// Who the NetworkPolicies admit; `None` when switched off, or when the
    /// operator's namespace is unknown (run outside a pod, it could not be
    /// admitted, and its own probes would be shut out).
    pub fn network_access(&self) -> Option<NetworkAccess> {
        if !self.network_policy {
            return None;
        }
        let Some(ns) = self.operator_namespace.clone() else {
            warn!("no --operator-namespace (POD_NAMESPACE): rendering no NetworkPolicy");
            return None;
        };
        Some(NetworkAccess {
            operator_namespace: ns,
            operator_labels: self.operator_pod_labels.iter().cloned().collect(),
            metrics_namespaces: self.metrics_namespaces.clone(),
        })
    }

    /// The reconciler settings these arguments ask for.
    pub fn settings(&self) -> Settings {
        Settings {
            network: self.network_access(),
            drain: DrainPolicy {
                settle: Duration::from_secs(self.drain_settle_seconds),
                timeout: Duration::from_secs(self.drain_timeout_seconds),
            },
            autoscale_period: Duration::from_secs(self.autoscale_period_seconds.max(1)),
            cleanup_finalizer: self.cleanup_finalizer,
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: OperatorArgs,
    }

    fn parse(args: &[&str]) -> Result<OperatorArgs, clap::Error> {
        Cli::try_parse_from([&["op"][..], args].concat()).map(|c| c.args)
    }

    #[test]
    fn network_policy_needs_the_operator_namespace_and_can_be_switched_off() {
        let on = parse(&[
            "--operator-namespace=tokenrouter",
            "--operator-pod-labels=app.kubernetes.io/name=tokenrouter-operator,app.kubernetes.io/instance=tr",
            "--metrics-namespaces=monitoring",
        ])
        .unwrap()
        .network_access()
        .unwrap();
        assert_eq!(on.operator_namespace, "tokenrouter");
        assert_eq!(on.operator_labels.len(), 2);
        assert_eq!(on.operator_labels["app.kubernetes.io/instance"], "tr");
        assert_eq!(on.metrics_namespaces, ["monitoring"]);
        let off = parse(&["--operator-namespace=tokenrouter", "--network-policy=false"]).unwrap();
        assert_eq!(off.network_access(), None);
        let err = parse(&["--operator-pod-labels=nolabel"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("expected key=value"), "{err}");
    }
}
