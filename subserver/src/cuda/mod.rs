//! The CUDA execution path of the tch runner: a stream per model, decode
//! CUDA graphs at padded buckets, the allocator's memory fraction and the
//! MPS thread share. The C++ shim behind it is built with the `cuda`
//! feature; without it (and always on the CPU) models run as before, on
//! libtorch's default stream, and asking for graphs is an error.

pub mod graphs;
pub mod metrics;
pub mod mps;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)] // FFI: dlopen of the C++ shim and calls into it.
pub mod shim;
pub mod static_layout;
#[cfg(feature = "cuda")]
#[allow(unsafe_code)] // FFI: streams and graphs through the shim.
pub mod stream;

use tch::{Device, Tensor};
use tracing::info;

use crate::error::EngineError;
use crate::kv::storage::KvStorage;
use crate::model::decoder::Decoder;
use graphs::{DecodeGraphs, DecodeStep, GraphApi, GraphCounts};

/// Whether a build has the shim (the `cuda` feature).
pub const BUILT_WITH_CUDA: bool = cfg!(feature = "cuda");

/// How a model uses CUDA beyond plain libtorch ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaOptions {
    /// Capture decode steps as CUDA graphs (`--cuda-graphs on`).
    pub graphs: bool,
    /// Run the model on its own stream (`--cuda-streams on`), so models of
    /// one process overlap on one GPU. Graphs always use the model's stream
    /// (capture needs a non-default stream).
    pub streams: bool,
}

impl Default for CudaOptions {
    /// Streams on (they cost nothing), graphs off until a GPU run has
    /// verified them on the target.
    fn default() -> Self {
        Self {
            graphs: false,
            streams: true,
        }
    }
}

/// Parses `on` / `off` (the CLI's switch values).
pub fn parse_switch(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

/// A model's decode graphs, whatever captures them.
trait GraphRunner: Send {
    fn run(
        &mut self,
        decoder: &Decoder,
        kv: &mut KvStorage,
        steps: &[DecodeStep<'_>],
    ) -> Result<Option<(Tensor, Tensor)>, EngineError>;
    fn count_miss(&mut self);
    fn counts(&self) -> GraphCounts;
}

impl<A: GraphApi + Send> GraphRunner for DecodeGraphs<A>
where
    A::Graph: Send,
{
    fn run(
        &mut self,
        decoder: &Decoder,
        kv: &mut KvStorage,
        steps: &[DecodeStep<'_>],
    ) -> Result<Option<(Tensor, Tensor)>, EngineError> {
        DecodeGraphs::run(self, decoder, kv, steps)
    }
    fn count_miss(&mut self) {
        DecodeGraphs::count_miss(self)
    }
    fn counts(&self) -> GraphCounts {
        DecodeGraphs::counts(self)
    }
}

/// A model's CUDA resources: its stream and its decode graphs.
pub struct CudaExec {
    #[cfg(feature = "cuda")]
    stream: Option<stream::ModelStream>,
    graphs: Option<Box<dyn GraphRunner>>,
    counters: Option<metrics::GraphCounters>,
}

impl CudaExec {
    /// Nothing: plain libtorch on the default stream (CPU models).
    pub fn none() -> Self {
        Self {
            #[cfg(feature = "cuda")]
            stream: None,
            graphs: None,
            counters: None,
        }
    }

    /// Sets up `opts` for model `name` on `device`. `ctx_cap` is the longest
    /// context a graph covers and `pad_slot` the scratch KV slot.
    pub fn new(
        name: &str,
        opts: &CudaOptions,
        device: Device,
        ctx_cap: usize,
        pad_slot: i64,
    ) -> Result<Self, EngineError> {
        let Device::Cuda(index) = device else {
            if opts.graphs {
                return Err(EngineError::InvalidDevice(
                    "--cuda-graphs on needs a CUDA device".into(),
                ));
            }
            return Ok(Self::none());
        };
        if let Some(p) = mps::thread_percentage()? {
            info!(
                model = name,
                percent = p,
                "{} is set: MPS limits this process's SM share",
                mps::MPS_THREAD_PERCENTAGE
            );
        }
        Self::new_cuda(name, opts, index, ctx_cap, pad_slot)
    }

    #[cfg(feature = "cuda")]
    fn new_cuda(
        name: &str,
        opts: &CudaOptions,
        index: usize,
        ctx_cap: usize,
        pad_slot: i64,
    ) -> Result<Self, EngineError> {
        let stream = if opts.streams || opts.graphs {
            Some(stream::ModelStream::new(index)?)
        } else {
            None
        };
        let graphs: Option<Box<dyn GraphRunner>> = if opts.graphs {
            Some(Box::new(DecodeGraphs::new(
                stream::CudaGraphs::new()?,
                ctx_cap,
                pad_slot,
                Device::Cuda(index),
            )))
        } else {
            None
        };
        info!(
            model = name,
            own_stream = stream.is_some(),
            cuda_graphs = opts.graphs,
            "CUDA execution"
        );
        Ok(Self {
            stream,
            counters: graphs.as_ref().map(|_| metrics::GraphCounters::new(name)),
            graphs,
        })
    }

    #[cfg(not(feature = "cuda"))]
    fn new_cuda(
        name: &str,
        opts: &CudaOptions,
        _index: usize,
        _ctx_cap: usize,
        _pad_slot: i64,
    ) -> Result<Self, EngineError> {
        if opts.graphs {
            return Err(EngineError::InvalidDevice(
                "--cuda-graphs on needs a build with the `cuda` feature (make build-cuda)".into(),
            ));
        }
        info!(
            model = name,
            "built without the `cuda` feature: models share libtorch's default stream"
        );
        Ok(Self::none())
    }

    /// Graphs driven by `api` (tests drive the plumbing on the CPU).
    #[cfg(test)]
    pub(crate) fn with_graph_api<A>(api: A, ctx_cap: usize, pad_slot: i64, device: Device) -> Self
    where
        A: GraphApi + Send + 'static,
        A::Graph: Send,
    {
        Self {
            #[cfg(feature = "cuda")]
            stream: None,
            graphs: Some(Box::new(DecodeGraphs::new(api, ctx_cap, pad_slot, device))),
            counters: None,
        }
    }

    /// Makes the model's stream current on the calling thread (each step
    /// calls it: a scheduler thread may run more than one model).
    pub fn enter(&self) -> Result<(), EngineError> {
        #[cfg(feature = "cuda")]
        if let Some(s) = &self.stream {
            s.make_current()?;
        }
        Ok(())
    }

    /// Whether decode steps go through graphs.
    pub fn has_graphs(&self) -> bool {
        self.graphs.is_some()
    }

    /// Runs a pure-decode step through a graph; `None` when graphs are off
    /// or the step fits no bucket (run it eagerly).
    pub fn decode(
        &mut self,
        decoder: &Decoder,
        kv: &mut KvStorage,
        steps: &[DecodeStep<'_>],
    ) -> Result<Option<(Tensor, Tensor)>, EngineError> {
        let Some(g) = self.graphs.as_mut() else {
            return Ok(None);
        };
        let out = g.run(decoder, kv, steps)?;
        if let Some(c) = self.counters.as_mut() {
            c.sync(g.counts());
        }
        Ok(out)
    }

    /// Counts a decode step that could not use a graph (entropy rows).
    pub fn count_miss(&mut self) {
        if let Some(g) = self.graphs.as_mut() {
            g.count_miss();
            if let Some(c) = self.counters.as_mut() {
                c.sync(g.counts());
            }
        }
    }

    /// Graph counts, when graphs are on.
    pub fn graph_counts(&self) -> Option<GraphCounts> {
        self.graphs.as_ref().map(|g| g.counts())
    }
}
