//! `tokenrouter subserver`: one model of a group in this process, talking TCP
//! to the others (one process or pod per model), or with `--all-models` the
//! whole group in-process behind the same HTTP surface (one pod per group).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use subserver::config::EngineConfig;
use subserver::service::member::MemberService;
use subserver::service::Service;

/// Arguments of `subserver`.
#[derive(Debug, clap::Args)]
pub struct SubserverArgs {
    /// Group config (YAML) with `transport: {kind: tcp, addresses: ...}`.
    #[arg(long)]
    config: PathBuf,
    /// The model this process serves.
    #[arg(
        long,
        required_unless_present = "all_models",
        conflicts_with = "all_models"
    )]
    model: Option<String>,
    /// Serve every model of the group in this process (in-process transport),
    /// with the entry's `/internal/generate` on `--admin`.
    #[arg(long)]
    all_models: bool,
    /// Address of `/metrics`, `/health` and `/admin/*`.
    #[arg(long)]
    admin: Option<SocketAddr>,
}

/// Runs `subserver` until the process is stopped.
pub fn run(args: SubserverArgs) -> Result<()> {
    let cfg = EngineConfig::from_file(&args.config)?;
    let Some(model) = args.model else {
        return run_group(&cfg, args.admin);
    };
    let svc = MemberService::start(&cfg, &model, args.admin)?;
    eprintln!(
        "subserver `{}` running (model {} of {}){}",
        model,
        svc.member().index(),
        svc.member().names().len(),
        svc.admin_addr()
            .map(|a| format!(", admin on http://{a}"))
            .unwrap_or_default()
    );
    while svc.member().is_alive() {
        std::thread::park_timeout(std::time::Duration::from_secs(1));
    }
    anyhow::bail!("the scheduler of `{model}` stopped")
}

/// `--all-models`: the whole group in this process until it is stopped.
fn run_group(cfg: &EngineConfig, admin: Option<SocketAddr>) -> Result<()> {
    let svc = Service::start(cfg, admin)?;
    eprintln!(
        "subserver group running ({} models){}",
        cfg.model_names().len(),
        svc.admin_addr()
            .map(|a| format!(", admin on http://{a}"))
            .unwrap_or_default()
    );
    loop {
        std::thread::park();
    }
}
