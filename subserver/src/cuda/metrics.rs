//! CUDA graph counters, `{model}`-labelled, shared by every runner of the
//! process and registered into each service's registry:
//! `tokenrouter_cuda_graph_replays_total` (graph hits),
//! `tokenrouter_cuda_graph_captures_total` and
//! `tokenrouter_cuda_graph_misses_total` (pure-decode steps that fit no
//! bucket and ran eagerly while graphs were on).

use std::sync::OnceLock;

use prometheus::{IntCounter, IntCounterVec, Opts, Registry};

use crate::cuda::graphs::GraphCounts;

/// Counter: decode steps served by a graph replay.
pub const CUDA_GRAPH_REPLAYS_TOTAL: &str = "tokenrouter_cuda_graph_replays_total";
/// Counter: graphs captured.
pub const CUDA_GRAPH_CAPTURES_TOTAL: &str = "tokenrouter_cuda_graph_captures_total";
/// Counter: pure-decode steps that ran eagerly with graphs on.
pub const CUDA_GRAPH_MISSES_TOTAL: &str = "tokenrouter_cuda_graph_misses_total";

struct Vecs {
    replays: IntCounterVec,
    captures: IntCounterVec,
    misses: IntCounterVec,
}

fn vecs() -> &'static Vecs {
    static VECS: OnceLock<Vecs> = OnceLock::new();
    VECS.get_or_init(|| {
        let v = |name: &str, help: &str| {
            IntCounterVec::new(Opts::new(name, help), &["model"])
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        Vecs {
            replays: v(
                CUDA_GRAPH_REPLAYS_TOTAL,
                "Decode steps served by a CUDA graph replay.",
            ),
            captures: v(CUDA_GRAPH_CAPTURES_TOTAL, "CUDA graphs captured."),
            misses: v(
                CUDA_GRAPH_MISSES_TOTAL,
                "Decode steps that fit no CUDA graph bucket and ran eagerly.",
            ),
        }
    })
}

/// Adds the counters to `registry` (idempotent per registry).
pub fn register(registry: &Registry) -> Result<(), prometheus::Error> {
    let v = vecs();
    for c in [&v.replays, &v.captures, &v.misses] {
        match registry.register(Box::new(c.clone())) {
            Ok(()) | Err(prometheus::Error::AlreadyReg) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One model's counters; [`GraphCounters::sync`] adds what changed.
pub struct GraphCounters {
    replays: IntCounter,
    captures: IntCounter,
    misses: IntCounter,
    seen: GraphCounts,
}

impl GraphCounters {
    /// The series of `model`.
    pub fn new(model: &str) -> Self {
        let v = vecs();
        Self {
            replays: v.replays.with_label_values(&[model]),
            captures: v.captures.with_label_values(&[model]),
            misses: v.misses.with_label_values(&[model]),
            seen: GraphCounts::default(),
        }
    }

    /// Brings the series up to `now`.
    pub fn sync(&mut self, now: GraphCounts) {
        self.replays.inc_by(now.replays - self.seen.replays);
        self.captures.inc_by(now.captures - self.seen.captures);
        self.misses.inc_by(now.misses - self.seen.misses);
        self.seen = now;
    }
}
