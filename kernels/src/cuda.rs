//! The CUDA kernels of `cuda/*.cu` (feature `cuda`), and just enough of the
//! CUDA runtime to move rows to a device and back for checks and benches.
//! Launch functions take device pointers and a `cudaStream_t` (null: the
//! legacy default stream), so a caller holding torch tensors passes their
//! `data_ptr()` and torch's current stream.

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int, c_long, c_uint, c_ulonglong};

use crate::sampling::SampleParams;
use crate::signals::RoutingSignals;

/// Most `k` the signals kernel returns.
pub const MAX_TOP_K: usize = 32;

extern "C" {
    fn tr_routing_signals(
        logits: *const c_void,
        bf16: c_int,
        rows: c_int,
        cols: c_int,
        ld: c_long,
        k: c_int,
        stats: *mut f32,
        top_idx: *mut c_int,
        top_val: *mut f32,
        stream: *mut c_void,
    ) -> c_int;
    fn tr_sample(
        logits: *const c_void,
        bf16: c_int,
        rows: c_int,
        cols: c_int,
        ld: c_long,
        temperature: *const f32,
        top_k: *const c_uint,
        top_p: *const f32,
        seed: *const c_ulonglong,
        step: *const c_ulonglong,
        out_token: *mut c_int,
        stream: *mut c_void,
    ) -> c_int;
    fn cudaMalloc(ptr: *mut *mut c_void, size: usize) -> c_int;
    fn cudaFree(ptr: *mut c_void) -> c_int;
    fn cudaMemcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: c_int) -> c_int;
    fn cudaDeviceSynchronize() -> c_int;
    fn cudaGetDeviceCount(n: *mut c_int) -> c_int;
    fn cudaGetErrorString(e: c_int) -> *const c_char;
}

const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;

/// A CUDA runtime error code with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaError {
    /// The `cudaError_t`.
    pub code: i32,
    /// `cudaGetErrorString` of it.
    pub message: String,
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for CudaError {}

fn check(code: c_int) -> Result<(), CudaError> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: cudaGetErrorString returns a static NUL-terminated string for any code.
    let message = unsafe { CStr::from_ptr(cudaGetErrorString(code)) }
        .to_string_lossy()
        .into_owned();
    Err(CudaError { code, message })
}

/// Visible CUDA devices (0 when the runtime finds none).
pub fn device_count() -> usize {
    let mut n = 0;
    // SAFETY: writes one int.
    if unsafe { cudaGetDeviceCount(&mut n) } != 0 {
        return 0;
    }
    n.max(0) as usize
}

/// Waits for all work on the current device.
pub fn synchronize() -> Result<(), CudaError> {
    // SAFETY: no arguments.
    check(unsafe { cudaDeviceSynchronize() })
}

/// An owned device allocation of `len` values of `T` (plain data only).
pub struct DeviceBuffer<T: Copy> {
    ptr: *mut T,
    len: usize,
}

impl<T: Copy> DeviceBuffer<T> {
    /// Copies `host` to a new device allocation.
    pub fn from_slice(host: &[T]) -> Result<Self, CudaError> {
        let bytes = std::mem::size_of_val(host).max(1);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: cudaMalloc writes one pointer; the copy reads `bytes` of `host`.
        unsafe {
            check(cudaMalloc(&mut ptr, bytes))?;
            let buf = Self {
                ptr: ptr.cast(),
                len: host.len(),
            };
            check(cudaMemcpy(
                ptr,
                host.as_ptr().cast(),
                std::mem::size_of_val(host),
                HOST_TO_DEVICE,
            ))?;
            Ok(buf)
        }
    }

    /// A device allocation filled with copies of `value`.
    pub fn filled(value: T, len: usize) -> Result<Self, CudaError> {
        Self::from_slice(&vec![value; len])
    }

    /// Copies the buffer back to the host (synchronous).
    pub fn to_vec(&self) -> Result<Vec<T>, CudaError> {
        let mut host = Vec::<T>::with_capacity(self.len);
        // SAFETY: the copy writes exactly `len` values into the reserved capacity.
        unsafe {
            check(cudaMemcpy(
                host.as_mut_ptr().cast(),
                self.ptr.cast(),
                self.len * std::mem::size_of::<T>(),
                DEVICE_TO_HOST,
            ))?;
            host.set_len(self.len);
        }
        Ok(host)
    }

    /// The device pointer.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// The device pointer, mutable.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }
}

impl<T: Copy> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cudaMalloc and is freed once.
        let _ = unsafe { cudaFree(self.ptr.cast()) };
    }
}

/// Element type of a logits matrix on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsType {
    /// `float`.
    F32,
    /// `__nv_bfloat16`.
    Bf16,
}

/// A `[rows, cols]` logits matrix on the device, row stride `ld` elements.
#[derive(Debug, Clone, Copy)]
pub struct DeviceLogits {
    /// Device pointer to row 0.
    pub ptr: *const c_void,
    /// Element type.
    pub dtype: LogitsType,
    /// Rows.
    pub rows: usize,
    /// Columns (the vocabulary).
    pub cols: usize,
    /// Row stride in elements (`>= cols`).
    pub ld: usize,
}

/// Outputs of the signals kernel, on the device.
pub struct SignalsOut {
    /// `[rows, 5]`: max logit, max prob, log-sum-exp, entropy, normalized entropy.
    pub stats: DeviceBuffer<f32>,
    /// `[rows, k]` top-k indices (-1 past the non-NaN count).
    pub top_idx: DeviceBuffer<i32>,
    /// `[rows, k]` top-k logits.
    pub top_val: DeviceBuffer<f32>,
    /// `k`.
    pub k: usize,
}

/// Launches the signals kernel on `stream`.
///
/// # Safety
/// `x.ptr` must point to `rows * ld` device elements of `x.dtype`, and
/// `stream` must be null or a live stream of the current device.
pub unsafe fn routing_signals_raw(
    x: &DeviceLogits,
    k: usize,
    out: &mut SignalsOut,
    stream: *mut c_void,
) -> Result<(), CudaError> {
    check(tr_routing_signals(
        x.ptr,
        c_int::from(x.dtype == LogitsType::Bf16),
        x.rows as c_int,
        x.cols as c_int,
        x.ld as c_long,
        k as c_int,
        out.stats.as_mut_ptr(),
        out.top_idx.as_mut_ptr(),
        out.top_val.as_mut_ptr(),
        stream,
    ))
}

/// Signals of every row of `x` (synchronous; allocates its outputs).
///
/// # Safety
/// As [`routing_signals_raw`].
pub unsafe fn routing_signals(
    x: &DeviceLogits,
    k: usize,
) -> Result<Vec<RoutingSignals>, CudaError> {
    if k == 0 || k > MAX_TOP_K {
        return Err(CudaError {
            code: 1,
            message: format!("k must be in 1..={MAX_TOP_K}, got {k}"),
        });
    }
    let mut out = SignalsOut {
        stats: DeviceBuffer::filled(0f32, x.rows * 5)?,
        top_idx: DeviceBuffer::filled(0i32, x.rows * k)?,
        top_val: DeviceBuffer::filled(0f32, x.rows * k)?,
        k,
    };
    routing_signals_raw(x, k, &mut out, std::ptr::null_mut())?;
    synchronize()?;
    let (stats, idx, val) = (
        out.stats.to_vec()?,
        out.top_idx.to_vec()?,
        out.top_val.to_vec()?,
    );
    Ok((0..x.rows)
        .map(|r| {
            let s = &stats[r * 5..r * 5 + 5];
            let top_k: Vec<(u32, f32)> = (0..k)
                .filter(|&j| idx[r * k + j] >= 0)
                .map(|j| (idx[r * k + j] as u32, val[r * k + j]))
                .collect();
            RoutingSignals {
                max_logit: s[0],
                argmax: top_k.first().map(|t| t.0),
                max_prob: s[1],
                logsumexp: s[2],
                entropy: s[3],
                normalized_entropy: s[4],
                top_k,
            }
        })
        .collect())
}

/// One token per row of `x` (synchronous): `Ok(token)`, or `Err(-1)` for a
/// `+inf` logit and `Err(-2)` for a row with no finite logit.
///
/// # Safety
/// As [`routing_signals_raw`].
pub unsafe fn sample(
    x: &DeviceLogits,
    params: &[SampleParams],
    seeds: &[u64],
    steps: &[u64],
) -> Result<Vec<Result<u32, i32>>, CudaError> {
    if params.len() != x.rows || seeds.len() != x.rows || steps.len() != x.rows {
        return Err(CudaError {
            code: 1,
            message: "one params/seed/step entry per row".into(),
        });
    }
    let t = DeviceBuffer::from_slice(&params.iter().map(|p| p.temperature).collect::<Vec<_>>())?;
    let k = DeviceBuffer::from_slice(&params.iter().map(|p| p.top_k).collect::<Vec<_>>())?;
    let p = DeviceBuffer::from_slice(&params.iter().map(|p| p.top_p).collect::<Vec<_>>())?;
    let s = DeviceBuffer::from_slice(seeds)?;
    let st = DeviceBuffer::from_slice(steps)?;
    let mut out = DeviceBuffer::filled(0i32, x.rows)?;
    check(tr_sample(
        x.ptr,
        c_int::from(x.dtype == LogitsType::Bf16),
        x.rows as c_int,
        x.cols as c_int,
        x.ld as c_long,
        t.as_ptr(),
        k.as_ptr(),
        p.as_ptr(),
        s.as_ptr(),
        st.as_ptr(),
        out.as_mut_ptr(),
        std::ptr::null_mut(),
    ))?;
    synchronize()?;
    Ok(out
        .to_vec()?
        .into_iter()
        .map(|v| if v >= 0 { Ok(v as u32) } else { Err(v) })
        .collect())
}
