//! `tokenrouter subserver`: one model of a group in this process, talking TCP
//! to the others (one process or pod per model).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use subserver::config::EngineConfig;
use subserver::service::member::MemberService;

/// Arguments of `subserver`.
#[derive(Debug, clap::Args)]
pub struct SubserverArgs {
    /// Group config (YAML) with `transport: {kind: tcp, addresses: ...}`.
    #[arg(long)]
    config: PathBuf,
    /// The model this process serves.
    #[arg(long)]
    model: String,
    /// Address of `/metrics`, `/health` and `/admin/*` (default: the
    /// model's official `port` on all interfaces, when the config sets one).
    #[arg(long)]
    admin: Option<SocketAddr>,
}

/// Runs `subserver` until the process is stopped.
pub fn run(args: SubserverArgs) -> Result<()> {
    let cfg = EngineConfig::from_file(&args.config)?;
    let port = cfg
        .model_index(&args.model)
        .and_then(|i| cfg.model(i))
        .and_then(|m| m.port);
    let admin = args
        .admin
        .or_else(|| port.map(|p| SocketAddr::from(([0, 0, 0, 0], p))));
    let svc = MemberService::start(&cfg, &args.model, admin)?;
    eprintln!(
        "subserver `{}` running (model {} of {}){}",
        args.model,
        svc.member().index(),
        svc.member().names().len(),
        svc.admin_addr()
            .map(|a| format!(", admin on http://{a}"))
            .unwrap_or_default()
    );
    while svc.member().is_alive() {
        std::thread::park_timeout(std::time::Duration::from_secs(1));
    }
    anyhow::bail!("the scheduler of `{}` stopped", args.model)
}
