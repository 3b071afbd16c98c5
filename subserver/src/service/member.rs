//! One model per process: a [`MemberProcess`] built from the group's config
//! (which must use the TCP transport), with its HTTP surface.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus::Registry;

use crate::config::{EngineConfig, TransportConfig};
use crate::http::{ControlAccess, SubserverHttp};
use crate::metrics::SubserverMetrics;
use crate::peer::tcp::{peer_addresses, wait_resolvable, TcpOptions};
use crate::scheduler::member::MemberProcess;
use crate::service::drain::{Drain, DrainingAdmin, DrainingIngress};
use crate::service::{admin::MemberAdmin, build, ServiceError};

/// How long a starting process waits for its group's DNS names (pods of
/// one group start together; the names appear as their pods get IPs).
pub const DNS_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// A running model process. Dropping it stops HTTP, then the scheduler.
pub struct MemberService {
    http: Option<SubserverHttp>,
    member: Arc<MemberProcess>,
    drain: Drain,
}

impl MemberService {
    /// Starts model `name` of `cfg` (transport tcp), serving `/metrics`,
    /// `/health` and `/admin/*` at `admin` when given.
    /// The control endpoints take the token of the environment
    /// ([`ControlAccess::from_env`]).
    pub fn start(
        cfg: &EngineConfig,
        name: &str,
        admin: Option<SocketAddr>,
    ) -> Result<Self, ServiceError> {
        let access = match admin {
            Some(_) => ControlAccess::from_env().map_err(crate::http::HttpError::Access)?,
            None => ControlAccess::default(),
        };
        Self::start_with_access(cfg, name, admin, access)
    }

    /// [`Self::start`] with the control endpoints exposed as `access`
    /// says (checked before any model loads).
    pub fn start_with_access(
        cfg: &EngineConfig,
        name: &str,
        admin: Option<SocketAddr>,
        access: ControlAccess,
    ) -> Result<Self, ServiceError> {
        access.check().map_err(crate::http::HttpError::Access)?;
        let TransportConfig::Tcp(tcp) = cfg.transport() else {
            return Err(ServiceError::Unsupported(
                "one model per process needs `transport: {kind: tcp, addresses: ...}`".into(),
            ));
        };
        let index = cfg.model_index(name).ok_or_else(|| {
            ServiceError::Unsupported(format!(
                "no model `{name}` in the config (models: {})",
                cfg.model_names().join(", ")
            ))
        })?;
        let addresses = peer_addresses(&tcp.addresses)
            .map_err(|e| ServiceError::Unsupported(format!("transport.addresses: {e}")))?;
        // Before the weights load: a peer not scheduled yet costs a wait
        // here, not a crash and a full reload per retry.
        wait_resolvable(&addresses, DNS_WAIT)
            .map_err(|e| ServiceError::Unsupported(format!("transport.addresses: {e}")))?;
        build::check_shared_vocabulary(cfg)?;
        build::apply_cpu_threads(cfg, &[index]);
        let member = build::member(cfg, index, None)?;
        // This thread steps no model; its OpenMP workers would only crowd the cores.
        crate::device::release_cpu_workers();
        let knob = member.policy.knob();
        let settings = build::settings(cfg)?;
        let registry = Registry::new();
        let metrics = SubserverMetrics::new(&registry)?;
        crate::cuda::metrics::register(&registry)
            .map_err(|e| ServiceError::Unsupported(format!("CUDA graph metrics: {e}")))?;
        let names = cfg.models().iter().map(|m| m.name.clone()).collect();
        let member = Arc::new(
            MemberProcess::start(
                member,
                index as u16,
                names,
                &settings,
                addresses,
                TcpOptions::from_config(tcp),
                Some(&metrics),
            )
            .map_err(|e| ServiceError::Unsupported(format!("transport: {e}")))?,
        );
        let drain = Drain::default();
        let http = match admin {
            Some(addr) => {
                // Only the entry model's process takes client requests.
                let ingress: Option<Arc<dyn crate::http::Ingress>> = (index == cfg.entry_index())
                    .then(|| Arc::new(DrainingIngress::new(member.clone(), drain.clone())) as _);
                // Every model pod mounts the entry's directory (the
                // tokenizer), so any of them can serve the text side.
                let api = Arc::new(
                    MemberAdmin::new(member.clone(), knob)
                        .with_text_dir(crate::http::TextDir::entry_of(cfg)),
                );
                Some(SubserverHttp::start_secured(
                    addr,
                    Arc::new(DrainingAdmin::new(api, drain.clone())),
                    registry,
                    ingress,
                    access,
                )?)
            }
            None => None,
        };
        Ok(Self {
            http,
            member,
            drain,
        })
    }

    /// Drains (see [`crate::service::drain`]): readiness fails, new requests
    /// get a 503, and this waits up to `deadline` for the requests this
    /// model holds (its own and its guests'). Returns how many were left;
    /// dropping the service then cancels them.
    pub fn drain(&self, deadline: std::time::Duration) -> usize {
        self.drain.wait_idle(deadline, || {
            let s = self.member.stats();
            s.running + s.waiting + s.pending
        })
    }

    /// The model process (submit at the entry, stats).
    pub fn member(&self) -> &Arc<MemberProcess> {
        &self.member
    }

    /// Where the HTTP surface listens.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(|h| h.local_addr())
    }
}

impl Drop for MemberService {
    fn drop(&mut self) {
        self.http.take();
    }
}
