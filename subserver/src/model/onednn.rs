//! oneDNN's packed-weight linear, through the C shim of `cpu/onednn.cpp`
//! (libtorch registers the two operators; tch does not expose them).
//!
//! A packed weight is an opaque oneDNN tensor: it can only be multiplied,
//! so the caller keeps a plain copy where it also reads the weight (the
//! tied embedding, the head's re-score rows).

use std::ffi::{c_char, c_int, c_void, CStr};

use tch::Tensor;

use crate::error::EngineError;

#[allow(unsafe_code)] // Declarations of the shim's C ABI.
extern "C" {
    fn tr_onednn_version() -> c_int;
    fn tr_onednn_last_error() -> *const c_char;
    fn tr_onednn_pack(w: *const c_void, out: *mut *mut c_void) -> c_int;
    fn tr_onednn_linear(
        x: *const c_void,
        packed: *const c_void,
        bias: *const c_void,
        out: *mut *mut c_void,
    ) -> c_int;
}

/// The shim version this code was written against.
const VERSION: c_int = 1;

/// The shim's message for this thread's last failure.
fn last_error(what: &'static str) -> EngineError {
    #[allow(unsafe_code)]
    // SAFETY: the shim returns a NUL-terminated string owned by a
    // thread_local that lives until this thread's next shim call.
    let message = unsafe { CStr::from_ptr(tr_onednn_last_error()) }
        .to_string_lossy()
        .into_owned();
    EngineError::OneDnn { what, message }
}

/// Takes ownership of the `at::Tensor*` the shim allocated.
fn owned(status: c_int, out: *mut c_void, what: &'static str) -> Result<Tensor, EngineError> {
    if status != 0 || out.is_null() {
        return Err(last_error(what));
    }
    #[allow(unsafe_code)]
    // SAFETY: `out` is a fresh `new at::Tensor(..)`, the handle type tch's
    // Tensor owns and frees; nothing else holds it.
    Ok(unsafe { Tensor::from_ptr(out.cast()) })
}

/// `w` (`[out, in]`, bf16 on the CPU) reordered into oneDNN's blocked layout.
pub fn pack(w: &Tensor) -> Result<Tensor, EngineError> {
    #[allow(unsafe_code)]
    // SAFETY: a version query without arguments.
    let version = unsafe { tr_onednn_version() };
    if version != VERSION {
        return Err(EngineError::OneDnn {
            what: "shim",
            message: format!("version {version}, expected {VERSION}"),
        });
    }
    let mut out = std::ptr::null_mut();
    #[allow(unsafe_code)]
    // SAFETY: `w` is a live tensor handle for the call; `out` is written
    // only on success.
    let status = unsafe { tr_onednn_pack(w.as_ptr().cast(), &mut out) };
    owned(status, out, "weight packing")
}

/// `x · Wᵀ (+ bias)` for `packed` from [`pack`]; `x` is `[..., in]`.
pub fn linear(x: &Tensor, packed: &Tensor, bias: Option<&Tensor>) -> Result<Tensor, EngineError> {
    let bias = bias.map_or(std::ptr::null(), |b| b.as_ptr().cast());
    let mut out = std::ptr::null_mut();
    #[allow(unsafe_code)]
    // SAFETY: every handle is live for the call (or null for no bias);
    // `out` is written only on success.
    let status =
        unsafe { tr_onednn_linear(x.as_ptr().cast(), packed.as_ptr().cast(), bias, &mut out) };
    owned(status, out, "linear")
}
