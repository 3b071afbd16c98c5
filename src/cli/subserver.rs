//! `tokenrouter subserver`: one model of a group in this process, talking TCP
//! to the others (one process or pod per model), or with `--all-models` the
//! whole group in-process behind the same HTTP surface (one pod per group).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use subserver::config::EngineConfig;
use subserver::http::{AdminToken, ControlAccess};
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
    /// Address of `/metrics`, `/health` and (unless `--control`) `/admin/*`
    /// and `/internal/generate` (with `--model`, default: the model's
    /// official `port` on all interfaces, when the config sets one).
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// Serve `/admin/*` and `/internal/generate` on this address instead;
    /// without a token it must be a loopback address.
    #[arg(long, requires = "admin")]
    control: Option<SocketAddr>,
    /// File holding the bearer token of `/admin/*` and `/internal/generate`
    /// (default: `$TOKENROUTER_ADMIN_TOKEN_FILE`, then
    /// `$TOKENROUTER_ADMIN_TOKEN`); without a token they answer loopback
    /// clients only.
    #[arg(long)]
    admin_token_file: Option<PathBuf>,
    /// Decode steps of CUDA models as CUDA graphs: on | off (overrides
    /// `system.cuda_graphs`; refused for a model on the CPU).
    #[arg(long, value_parser = subserver::cuda::parse_switch, action = clap::ArgAction::Set)]
    cuda_graphs: Option<bool>,
}

/// Runs `subserver` until the process is stopped.
pub fn run(args: SubserverArgs) -> Result<()> {
    let mut access = ControlAccess::from_env().map_err(anyhow::Error::msg)?;
    if let Some(file) = &args.admin_token_file {
        access.token = Some(AdminToken::from_file(file).map_err(anyhow::Error::msg)?);
    }
    access.bind = args.control;
    // Refused before the config and the models load.
    access.check().map_err(anyhow::Error::msg)?;
    let mut cfg = EngineConfig::from_file(&args.config)?;
    if let Some(on) = args.cuda_graphs {
        cfg.override_cuda_graphs(on);
    }
    let Some(model) = args.model else {
        return run_group(&cfg, args.admin, access);
    };
    let port = cfg
        .model_index(&model)
        .and_then(|i| cfg.model(i))
        .and_then(|m| m.port);
    let admin = args
        .admin
        .or_else(|| port.map(|p| SocketAddr::from(([0, 0, 0, 0], p))));
    let svc = MemberService::start_with_access(&cfg, &model, admin, access)?;
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
fn run_group(cfg: &EngineConfig, admin: Option<SocketAddr>, access: ControlAccess) -> Result<()> {
    let svc = Service::start_with_access(cfg, admin, access)?;
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
