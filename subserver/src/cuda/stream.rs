//! A model's CUDA stream and its graphs, through the shim (feature `cuda`).

use std::ffi::c_void;

use crate::cuda::graphs::GraphApi;
use crate::cuda::shim::{shim, Shim};
use crate::error::EngineError;

/// A stream from libtorch's pool, owned by one model.
pub struct ModelStream {
    shim: &'static Shim,
    ptr: *mut c_void,
}

// SAFETY: the stream handle is a plain value object (device index + id);
// libtorch's stream API is thread-safe.
unsafe impl Send for ModelStream {}

impl ModelStream {
    /// A new stream on CUDA device `device`.
    pub fn new(device: usize) -> Result<Self, EngineError> {
        let shim = shim()?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        shim.check(
            unsafe { (shim.stream_new)(device as i32, 0, &mut ptr) },
            "stream",
        )?;
        Ok(Self { shim, ptr })
    }

    /// Makes it the calling thread's current stream on its device: every
    /// libtorch op the thread issues there from now on runs on it.
    pub fn make_current(&self) -> Result<(), EngineError> {
        // SAFETY: `ptr` is a live stream.
        self.shim.check(
            unsafe { (self.shim.stream_make_current)(self.ptr) },
            "set current stream",
        )
    }

    /// Waits for the work queued on it.
    pub fn synchronize(&self) -> Result<(), EngineError> {
        // SAFETY: `ptr` is a live stream.
        self.shim.check(
            unsafe { (self.shim.stream_synchronize)(self.ptr) },
            "stream synchronize",
        )
    }
}

impl Drop for ModelStream {
    fn drop(&mut self) {
        // SAFETY: frees the handle object once (the pool stream lives on).
        unsafe { (self.shim.stream_free)(self.ptr) }
    }
}

/// A captured CUDA graph.
pub struct CudaGraph {
    shim: &'static Shim,
    ptr: *mut c_void,
}

// SAFETY: owned by one runner; replayed from whichever thread runs it.
unsafe impl Send for CudaGraph {}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: frees the graph once.
        unsafe { (self.shim.graph_free)(self.ptr) }
    }
}

/// [`GraphApi`] over libtorch's `at::cuda::CUDAGraph`.
pub struct CudaGraphs {
    shim: &'static Shim,
}

impl CudaGraphs {
    /// Loads the shim.
    pub fn new() -> Result<Self, EngineError> {
        Ok(Self { shim: shim()? })
    }
}

impl GraphApi for CudaGraphs {
    type Graph = CudaGraph;

    fn capture(
        &self,
        pool_from: Option<&CudaGraph>,
        body: &mut dyn FnMut() -> Result<(), EngineError>,
    ) -> Result<CudaGraph, EngineError> {
        let s = self.shim;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: writes one pointer.
        s.check(unsafe { (s.graph_new)(&mut ptr) }, "graph")?;
        let graph = CudaGraph { shim: s, ptr };
        let pool = pool_from.map_or(std::ptr::null_mut(), |g| g.ptr);
        // SAFETY: both graphs are live.
        s.check(
            unsafe { (s.graph_capture_begin)(graph.ptr, pool) },
            "graph capture begin",
        )?;
        let result = body();
        // Always end the capture, even when the body failed, so the stream
        // leaves capture mode.
        // SAFETY: the graph is capturing.
        let ended = s.check(
            unsafe { (s.graph_capture_end)(graph.ptr) },
            "graph capture end",
        );
        result?;
        ended?;
        Ok(graph)
    }

    fn replay(
        &self,
        graph: &CudaGraph,
        _rerun: &mut dyn FnMut() -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let s = self.shim;
        // SAFETY: the graph was captured.
        s.check(unsafe { (s.graph_replay)(graph.ptr) }, "graph replay")
    }
}

/// Caps libtorch's caching allocator on `device` at `fraction` of its memory.
pub fn set_memory_fraction(fraction: f64, device: usize) -> Result<(), EngineError> {
    let s = shim()?;
    // SAFETY: plain values.
    s.check(
        unsafe { (s.set_memory_fraction)(fraction, device as i32) },
        "set memory fraction",
    )
}
