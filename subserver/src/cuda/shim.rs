//! The C++ shim (`cuda/shim.cpp`, built by `build.rs` with the `cuda`
//! feature): libtorch's stream, CUDA graph and allocator API through a C ABI.
//!
//! The shared library is embedded in the binary and loaded on first use,
//! after `ensure_device` has loaded `libtorch_cuda` (so a CPU-only host
//! never touches it and one binary serves both kinds of host).

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};
use std::sync::OnceLock;

use crate::error::EngineError;

static SHIM_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libtrshim.so"));

/// The version `tr_shim_version` must report.
const SHIM_VERSION: c_int = 1;

type Status = c_int;
type LastError = unsafe extern "C" fn() -> *const c_char;
type StreamNew = unsafe extern "C" fn(c_int, c_int, *mut *mut c_void) -> Status;
type New = unsafe extern "C" fn(*mut *mut c_void) -> Status;
type Free = unsafe extern "C" fn(*mut c_void);
type Unary = unsafe extern "C" fn(*mut c_void) -> Status;
type Binary = unsafe extern "C" fn(*mut c_void, *mut c_void) -> Status;
type SetFraction = unsafe extern "C" fn(f64, c_int) -> Status;

/// Function pointers of the loaded shim.
pub struct Shim {
    _lib: libloading::Library,
    last_error: LastError,
    pub(crate) stream_new: StreamNew,
    pub(crate) stream_free: Free,
    pub(crate) stream_make_current: Unary,
    pub(crate) stream_synchronize: Unary,
    pub(crate) graph_new: New,
    pub(crate) graph_free: Free,
    pub(crate) graph_capture_begin: Binary,
    pub(crate) graph_capture_end: Unary,
    pub(crate) graph_replay: Unary,
    pub(crate) set_memory_fraction: SetFraction,
}

impl Shim {
    /// Turns a shim status into a result naming `what` failed.
    pub(crate) fn check(&self, status: Status, what: &str) -> Result<(), EngineError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: tr_last_error returns the calling thread's NUL-terminated message.
        let msg = unsafe { CStr::from_ptr((self.last_error)()) }
            .to_string_lossy()
            .into_owned();
        Err(EngineError::InvalidDevice(format!("{what}: {msg}")))
    }
}

fn load() -> Result<Shim, String> {
    // dlopen needs a path: write the embedded library once per process.
    let path =
        std::env::temp_dir().join(format!("tokenrouter-cuda-shim-{}.so", std::process::id()));
    std::fs::write(&path, SHIM_SO).map_err(|e| format!("{}: {e}", path.display()))?;
    // SAFETY: the shim's initialisers only register nothing; its symbols
    // resolve against the libtorch_cuda already loaded.
    let lib = unsafe { libloading::Library::new(&path) };
    let _ = std::fs::remove_file(&path);
    let lib = lib.map_err(|e| format!("cannot load the CUDA shim: {e}"))?;
    macro_rules! sym {
        ($ty:ty, $name:literal) => {
            // SAFETY: the shim exports these symbols with these C signatures.
            *unsafe { lib.get::<$ty>(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("CUDA shim: {}: {e}", $name))?
        };
    }
    let version = sym!(unsafe extern "C" fn() -> c_int, "tr_shim_version");
    // SAFETY: no arguments.
    let v = unsafe { version() };
    if v != SHIM_VERSION {
        return Err(format!("CUDA shim version {v}, expected {SHIM_VERSION}"));
    }
    Ok(Shim {
        last_error: sym!(LastError, "tr_last_error"),
        stream_new: sym!(StreamNew, "tr_stream_new"),
        stream_free: sym!(Free, "tr_stream_free"),
        stream_make_current: sym!(Unary, "tr_stream_make_current"),
        stream_synchronize: sym!(Unary, "tr_stream_synchronize"),
        graph_new: sym!(New, "tr_graph_new"),
        graph_free: sym!(Free, "tr_graph_free"),
        graph_capture_begin: sym!(Binary, "tr_graph_capture_begin"),
        graph_capture_end: sym!(Unary, "tr_graph_capture_end"),
        graph_replay: sym!(Unary, "tr_graph_replay"),
        set_memory_fraction: sym!(SetFraction, "tr_set_memory_fraction"),
        _lib: lib,
    })
}

/// The shim, loaded once. Call after `ensure_device(Device::Cuda(_))`.
pub fn shim() -> Result<&'static Shim, EngineError> {
    static SHIM: OnceLock<Result<Shim, String>> = OnceLock::new();
    SHIM.get_or_init(load)
        .as_ref()
        .map_err(|e| EngineError::InvalidDevice(e.clone()))
}
