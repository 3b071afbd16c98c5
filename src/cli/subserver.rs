//! `tokenrouter subserver`: one model of a group in this process, talking TCP
//! to the others (one process or pod per model), or with `--all-models` the
//! whole group in-process behind the same HTTP surface (one pod per group).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    /// On SIGTERM (or ctrl-c), how long in-flight requests may finish
    /// before they are cancelled and the process exits 0; keep it below the
    /// pod's `terminationGracePeriodSeconds` (the operator's pods: 60).
    #[arg(long, default_value_t = 45.0)]
    drain_timeout_s: f64,
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
    let drain_timeout = Duration::try_from_secs_f64(args.drain_timeout_s)
        .map_err(|e| anyhow::anyhow!("--drain-timeout-s {}: {e}", args.drain_timeout_s))?;
    // Before the load: a SIGTERM while it waits for DNS or loads ends the
    // process at once (nothing is in flight), one after it drains.
    let stop = StopSignal::install()?;
    let mut cfg = EngineConfig::from_file(&args.config)?;
    if let Some(on) = args.cuda_graphs {
        cfg.override_cuda_graphs(on);
    }
    let Some(model) = args.model else {
        return run_group(&cfg, args.admin, access, &stop, drain_timeout);
    };
    let port = cfg
        .model_index(&model)
        .and_then(|i| cfg.model(i))
        .and_then(|m| m.port);
    let admin = args
        .admin
        .or_else(|| port.map(|p| SocketAddr::from(([0, 0, 0, 0], p))));
    let svc = MemberService::start_with_access(&cfg, &model, admin, access)?;
    stop.serving();
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
        if stop.received() {
            eprintln!("subserver `{model}` draining (up to {drain_timeout:?})");
            let left = svc.drain(drain_timeout);
            drop(svc);
            eprintln!("subserver `{model}` stopped ({left} requests cancelled)");
            return Ok(());
        }
        std::thread::park_timeout(Duration::from_secs(1));
    }
    anyhow::bail!("the scheduler of `{model}` stopped")
}

/// `--all-models`: the whole group in this process until it is stopped.
fn run_group(
    cfg: &EngineConfig,
    admin: Option<SocketAddr>,
    access: ControlAccess,
    stop: &StopSignal,
    drain_timeout: Duration,
) -> Result<()> {
    let svc = Service::start_with_access(cfg, admin, access)?;
    stop.serving();
    eprintln!(
        "subserver group running ({} models){}",
        cfg.model_names().len(),
        svc.admin_addr()
            .map(|a| format!(", admin on http://{a}"))
            .unwrap_or_default()
    );
    while !stop.received() {
        std::thread::park_timeout(Duration::from_secs(1));
    }
    eprintln!("subserver group draining (up to {drain_timeout:?})");
    let left = svc.drain(drain_timeout);
    drop(svc);
    eprintln!("subserver group stopped ({left} requests cancelled)");
    Ok(())
}

/// SIGTERM (what a kubelet sends PID 1) or ctrl-c, registered at once and
/// awaited on a thread of its own. Before [`StopSignal::serving`] the process
/// exits there and then (a pod deleted while it waits for its peers' DNS
/// names or loads its weights must not wait out its grace period); after it,
/// the thread wakes the main thread, which drains.
struct StopSignal {
    flag: Arc<AtomicBool>,
    serving: Arc<AtomicBool>,
}

impl StopSignal {
    fn install() -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // Registered here, before the caller announces it runs: a signal
        // that comes right after is not the default (a kill by SIGTERM).
        let mut term = {
            let _inside = rt.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?
        };
        let flag = Arc::new(AtomicBool::new(false));
        let serving = Arc::new(AtomicBool::new(false));
        let (set, up, main) = (flag.clone(), serving.clone(), std::thread::current());
        std::thread::Builder::new()
            .name("stop-signal".into())
            .spawn(move || {
                rt.block_on(async {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                });
                set.store(true, Ordering::SeqCst);
                if !up.load(Ordering::SeqCst) {
                    eprintln!("subserver stopped before it served (nothing in flight)");
                    std::process::exit(0);
                }
                main.unpark();
            })?;
        Ok(Self { flag, serving })
    }

    /// The service runs: a stop from now on drains it.
    fn serving(&self) {
        self.serving.store(true, Ordering::SeqCst);
    }

    fn received(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}
