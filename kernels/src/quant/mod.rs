//! `x · Wᵀ (+ b)` on the CPU for weights kept in ggml's quantized blocks
//! (GGUF tensors as the file stores them), so a decode step reads the
//! file's 4.5-8.5 bits per weight instead of bf16's 16.
//!
//! Two methods ([`Path::for_rows`] picks one):
//! - [`Method::IntDot`]: each input row is quantized to int8 per block of
//!   32 (as llama.cpp's `vec_dot` does) and multiplied by the blocks'
//!   integer codes — `vpdpbusd` on AVX-512 VNNI ([`avx512`]), a portable
//!   loop elsewhere — with the scales applied per block in f32. A weight
//!   row is unpacked once for up to 4 input rows.
//! - [`Method::Tiles`]: each panel of 16 weight rows is dequantized to
//!   bf16 and multiplied by `kernels::gemm`'s micro-kernel (f32 FMAs):
//!   the unpacking is paid once per weight, however many rows.
//!
//! Output rows are split over the threads of a [`Parallel`].
//!
//! Error of [`Method::IntDot`] against the exact product with the
//! dequantized weights: each activation is rounded to its block's grid
//! `d = max|x_b| / 127`, an error of at most `d / 2`, so an output is off
//! by at most `Σ_b (max|x_b| / 254) · Σ_{i∈b} |w_i|` plus f32 rounding.
//! [`Method::Tiles`] rounds each dequantized weight to bf16 (relative
//! `2^-9`) and keeps the input exact.

mod act;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod format;
mod portable;
#[cfg(test)]
mod tests;
mod tiles;

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::elem::KvElem;
use crate::gemm::OutPtr;
use crate::parallel::Parallel;
pub use format::QuantType;

/// A quantized matrix that does not hold together, or arguments that do
/// not fit it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// A row's length is not a whole number of blocks.
    #[error("{ty}: {k} columns is not a multiple of the block size {block}")]
    RaggedRow {
        /// The block type.
        ty: QuantType,
        /// Columns.
        k: usize,
        /// Weights per block.
        block: usize,
    },
    /// The bytes are not `n` rows of `k` columns of `ty`.
    #[error("{ty}: a [{n}, {k}] matrix takes {want} bytes, got {got}")]
    ByteLength {
        /// The block type.
        ty: QuantType,
        /// Rows.
        n: usize,
        /// Columns.
        k: usize,
        /// Bytes expected.
        want: usize,
        /// Bytes given.
        got: usize,
    },
    /// Inputs, outputs or bias of the wrong size, or a task that panicked.
    #[error("quant matmul: {0}")]
    Args(String),
}

/// An `[n, k]` weight (`n` outputs of `k` inputs) as ggml blocks, each
/// row `k / block` blocks, rows in order (a GGUF tensor's layout).
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    ty: QuantType,
    n: usize,
    k: usize,
    bytes: Vec<u8>,
}

impl QuantMatrix {
    /// Checks that `bytes` is `n` rows of `k` columns of `ty`.
    pub fn new(ty: QuantType, n: usize, k: usize, bytes: Vec<u8>) -> Result<Self, QuantError> {
        let block = ty.block_weights();
        if k == 0 || !k.is_multiple_of(block) {
            return Err(QuantError::RaggedRow { ty, k, block });
        }
        let want = n * (k / block) * ty.block_bytes();
        if bytes.len() != want {
            return Err(QuantError::ByteLength {
                ty,
                n,
                k,
                want,
                got: bytes.len(),
            });
        }
        Ok(Self { ty, n, k, bytes })
    }

    /// The block type.
    pub fn ty(&self) -> QuantType {
        self.ty
    }

    /// Output columns (the weight's rows).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Bytes of one row.
    fn row_bytes(&self) -> usize {
        self.k / self.ty.block_weights() * self.ty.block_bytes()
    }

    /// Row `j`'s blocks.
    fn row(&self, j: usize) -> &[u8] {
        let rb = self.row_bytes();
        &self.bytes[j * rb..(j + 1) * rb]
    }

    /// The matrix dequantized to f32, `[n, k]` row-major (for checks and
    /// for callers that need the plain weight).
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n * self.k];
        for (j, dst) in out.chunks_exact_mut(self.k).enumerate() {
            format::dequantize_row(self.ty, self.row(j), dst);
        }
        out
    }
}

/// The instruction set the kernels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 with VNNI (`vpdpbusd`) for the integer dots, AVX-512F FMAs
    /// for the tiles.
    Avx512,
    /// Plain Rust.
    Portable,
}

impl Isa {
    /// The best this CPU runs.
    pub fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            return Self::Avx512;
        }
        Self::Portable
    }
}

/// How the product is computed (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Int8 activations against the blocks' codes.
    IntDot,
    /// Panels dequantized to bf16, `kernels::gemm`'s micro-kernel.
    Tiles,
}

/// An instruction set and a method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// Instruction set.
    pub isa: Isa,
    /// Method.
    pub method: Method,
}

impl Path {
    /// The path for `rows` input rows on this CPU: the integer dot at
    /// every batch size. `examples/quant_matmul.rs`
    /// (docs/results/quant-kernels.md) timed it faster than the tiles at
    /// 1 to 16 rows on every shape of the real GGUFs, and on 4 of 6 at 64
    /// rows (the tiles' scalar dequantization costs more than the
    /// unpacking they share across rows). The bf16 GEMM on dequantized
    /// weights was faster than both from 4-8 rows on, at 2-4x the bytes.
    pub fn for_rows(rows: usize) -> Self {
        let _ = rows;
        Self {
            isa: Isa::best(),
            method: Method::IntDot,
        }
    }
}

/// Buffers [`matmul`] reuses across calls.
#[derive(Debug, Default)]
pub struct QuantScratch {
    act: act::Act,
    widened: Vec<f32>,
}

/// `out = x · Wᵀ (+ bias)`, rounded to `O`, on [`Path::for_rows`].
///
/// - `x`: `[rows, k]` row-major;
/// - `bias`: `[n]` in f32, or none;
/// - `out`: `[rows, n]` row-major.
pub fn matmul<X: KvElem, O: KvElem>(
    x: &[X],
    rows: usize,
    w: &QuantMatrix,
    bias: Option<&[f32]>,
    out: &mut [O],
    scratch: &mut QuantScratch,
    parallel: &dyn Parallel,
) -> Result<(), QuantError> {
    matmul_with(
        x,
        rows,
        w,
        bias,
        out,
        scratch,
        parallel,
        Path::for_rows(rows),
    )
}

/// [`matmul`] on a given path (an [`Isa::Avx512`] this CPU lacks falls
/// back to [`Isa::Portable`]).
#[allow(clippy::too_many_arguments)] // matmul's arguments and the path
pub fn matmul_with<X: KvElem, O: KvElem>(
    x: &[X],
    rows: usize,
    w: &QuantMatrix,
    bias: Option<&[f32]>,
    out: &mut [O],
    scratch: &mut QuantScratch,
    parallel: &dyn Parallel,
    path: Path,
) -> Result<(), QuantError> {
    let cols = Columns {
        stride: w.n,
        first: 0,
    };
    matmul_columns(x, rows, w, bias, out, cols, scratch, parallel, path)
}

/// Where a product's `n` columns go in a wider output: row `r`'s column
/// `j` at `out[r * stride + first + j]` (a fused projection's parts, each
/// with its own block type, written side by side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    /// Values per output row.
    pub stride: usize,
    /// The first column this product writes.
    pub first: usize,
}

/// [`matmul_with`] into columns `cols.first..cols.first + n` of an output
/// of `rows` rows of `cols.stride` values; the other columns are left as
/// they are.
#[allow(clippy::too_many_arguments)] // matmul's arguments, the columns and the path
pub fn matmul_columns<X: KvElem, O: KvElem>(
    x: &[X],
    rows: usize,
    w: &QuantMatrix,
    bias: Option<&[f32]>,
    out: &mut [O],
    cols: Columns,
    scratch: &mut QuantScratch,
    parallel: &dyn Parallel,
    path: Path,
) -> Result<(), QuantError> {
    let (n, k) = (w.n, w.k);
    if x.len() != rows * k || out.len() != rows * cols.stride || cols.first + n > cols.stride {
        return Err(QuantError::Args(format!(
            "{rows} rows of a [{n}, {k}] weight need x of {} (got {}) and out of {} (got {}) \
             with columns {}..{} inside rows of {}",
            rows * k,
            x.len(),
            rows * cols.stride,
            out.len(),
            cols.first,
            cols.first + n,
            cols.stride
        )));
    }
    if let Some(b) = bias.filter(|b| b.len() != n) {
        return Err(QuantError::Args(format!(
            "the bias has {} values for {n} columns",
            b.len()
        )));
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let isa = if path.isa == Isa::Avx512 && Isa::best() == Isa::Avx512 {
        Isa::Avx512
    } else {
        Isa::Portable
    };
    let done = match path.method {
        Method::IntDot => {
            scratch.act.quantize(x, rows, k);
            int_dot(&scratch.act, rows, w, bias, out, cols, isa, parallel)
        }
        Method::Tiles => {
            crate::gemm::widen_blocks(x, rows, k, &mut scratch.widened);
            let vector = isa == Isa::Avx512 && crate::gemm::vectorized();
            tiles::run(&scratch.widened, rows, w, bias, out, cols, vector, parallel)
        }
    };
    if done {
        Ok(())
    } else {
        Err(QuantError::Args("a task panicked".into()))
    }
}

/// Splits `count` items into tasks of at least `min` items, about four a
/// thread; calls `work` with each task's range on the threads. `false`
/// if a task panicked.
pub(crate) fn split(
    count: usize,
    min: usize,
    parallel: &dyn Parallel,
    work: &(dyn Fn(std::ops::Range<usize>) + Sync),
) -> bool {
    let per_task = count.div_ceil(parallel.threads().max(1) * 4).max(min);
    let tasks = count.div_ceil(per_task);
    let next = AtomicUsize::new(0);
    parallel.run(&|| loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        if t >= tasks {
            break;
        }
        work(t * per_task..((t + 1) * per_task).min(count));
    })
}

/// [`Method::IntDot`] over the quantized input `act`: weight rows split
/// over the threads, each row against the input rows 4 at a time.
#[allow(clippy::too_many_arguments)] // matmul_columns' arguments, quantized
fn int_dot<O: KvElem>(
    act: &act::Act,
    rows: usize,
    w: &QuantMatrix,
    bias: Option<&[f32]>,
    out: &mut [O],
    cols: Columns,
    isa: Isa,
    parallel: &dyn Parallel,
) -> bool {
    let n = w.n;
    let acts: Vec<act::ActRow<'_>> = (0..rows).map(|r| act.row(r)).collect();
    let dst = OutPtr(out.as_mut_ptr());
    split(n, 16, parallel, &|range| {
        let dst = &dst;
        for j in range {
            let row = w.row(j);
            let b = bias.map_or(0.0, |b| b[j]);
            for (c, chunk) in acts.chunks(4).enumerate() {
                let mut sums = [0f32; 4];
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => avx512::dot(w.ty, row, chunk, &mut sums),
                    _ => {
                        for (s, a) in sums.iter_mut().zip(chunk) {
                            *s = portable::row_dot(w.ty, row, *a);
                        }
                    }
                }
                for (i, s) in sums[..chunk.len()].iter().enumerate() {
                    let r = 4 * c + i;
                    // SAFETY: `r < rows`, `first + j < stride`: inside
                    // `out` of `rows * stride` (checked in
                    // `matmul_columns`); only this task handles column `j`.
                    #[allow(unsafe_code)] // disjoint writes through the shared pointer
                    unsafe {
                        *dst.0.add(r * cols.stride + cols.first + j) = O::narrow(s + b);
                    }
                }
            }
        }
    })
}
