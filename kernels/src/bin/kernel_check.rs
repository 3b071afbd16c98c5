//! `kernel-check`: runs the routing-signal and sampling kernels over test
//! rows (f32 and bf16) and compares them with the CPU references.
//!
//! `--backend cuda` (feature `cuda`, a GPU): the CUDA kernels.
//! `--backend cpu` (anywhere): the one-pass CPU twin of the signals kernel;
//! sampling has no second CPU implementation, so it is reported as skipped
//! (`"status":"SKIP"`, never a pass).
//!
//! Prints one JSON object per check, each with `"status"`: PASS, FAIL or
//! SKIP, and exits 1 when any check fails.
//! Usage: kernel-check [--backend cpu|cuda] [--rows 64] [--cols 151936]
//!        [--k 8] [--seed 1] [--tol 1e-3]

use std::process::ExitCode;

use kernels::check::{compare_signals, round_bf16, test_params, test_rows};
use kernels::{routing_signals, routing_signals_one_pass, sample_row, RoutingSignals};

/// Per row: a token, or the kernel's error code (-1: +inf logit, -2: no finite logit).
type Tokens = Vec<Result<u32, i32>>;

struct Args {
    backend: String,
    rows: usize,
    cols: usize,
    k: usize,
    seed: u64,
    tol: f32,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        backend: "cpu".into(),
        rows: 64,
        cols: 151_936,
        k: 8,
        seed: 1,
        tol: 1e-3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--backend" => a.backend = value,
            "--rows" => a.rows = value.parse().map_err(|e| bad(&e))?,
            "--cols" => a.cols = value.parse().map_err(|e| bad(&e))?,
            "--k" => a.k = value.parse().map_err(|e| bad(&e))?,
            "--seed" => a.seed = value.parse().map_err(|e| bad(&e))?,
            "--tol" => a.tol = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if !matches!(a.backend.as_str(), "cpu" | "cuda") {
        return Err(format!("--backend must be cpu or cuda, got {}", a.backend));
    }
    if a.rows == 0 || a.cols == 0 || !(1..=32).contains(&a.k) {
        return Err("--rows and --cols must be positive and --k in 1..=32".into());
    }
    Ok(a)
}

/// Signals of `rows` from the chosen backend.
fn device_signals(a: &Args, rows: &[Vec<f32>], bf16: bool) -> Result<Vec<RoutingSignals>, String> {
    match a.backend.as_str() {
        "cpu" => Ok(rows
            .iter()
            .map(|r| routing_signals_one_pass(r, a.k, 256))
            .collect()),
        _ => cuda_signals(a, rows, bf16),
    }
}

/// Keeps a device buffer alive while the kernels read it.
#[cfg(feature = "cuda")]
type Keep = Box<dyn std::any::Any>;

#[cfg(feature = "cuda")]
fn upload(rows: &[Vec<f32>], bf16: bool) -> Result<(Keep, kernels::cuda::DeviceLogits), String> {
    use kernels::cuda::{DeviceBuffer, DeviceLogits, LogitsType};
    let cols = rows[0].len();
    let flat: Vec<f32> = rows.concat();
    let (buf, ptr, dtype): (Keep, *const std::ffi::c_void, _) = if bf16 {
        let b: Vec<u16> = flat
            .iter()
            .map(|&x| half::bf16::from_f32(x).to_bits())
            .collect();
        let d = DeviceBuffer::from_slice(&b).map_err(|e| e.to_string())?;
        let p = d.as_ptr().cast();
        (Box::new(d), p, LogitsType::Bf16)
    } else {
        let d = DeviceBuffer::from_slice(&flat).map_err(|e| e.to_string())?;
        let p = d.as_ptr().cast();
        (Box::new(d), p, LogitsType::F32)
    };
    let x = DeviceLogits {
        ptr,
        dtype,
        rows: rows.len(),
        cols,
        ld: cols,
    };
    Ok((buf, x))
}

#[cfg(feature = "cuda")]
fn cuda_signals(a: &Args, rows: &[Vec<f32>], bf16: bool) -> Result<Vec<RoutingSignals>, String> {
    let (_keep, x) = upload(rows, bf16)?;
    // SAFETY: `x` describes the buffer kept alive by `_keep`.
    #[allow(unsafe_code)] // FFI: launches the CUDA kernel on device rows.
    unsafe { kernels::cuda::routing_signals(&x, a.k) }.map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
fn cuda_signals(_: &Args, _: &[Vec<f32>], _: bool) -> Result<Vec<RoutingSignals>, String> {
    Err("this kernel-check was built without the `cuda` feature".into())
}

/// Tokens sampled on the device, or `None` on the CPU backend.
#[cfg(feature = "cuda")]
fn device_samples(a: &Args, rows: &[Vec<f32>], bf16: bool) -> Result<Option<Tokens>, String> {
    if a.backend == "cpu" {
        return Ok(None);
    }
    let (_keep, x) = upload(rows, bf16)?;
    let params = test_params(rows.len());
    let seeds: Vec<u64> = (0..rows.len() as u64).map(|r| a.seed * 1000 + r).collect();
    let steps: Vec<u64> = (0..rows.len() as u64).map(|r| r * 7).collect();
    // SAFETY: as above.
    #[allow(unsafe_code)] // FFI: launches the CUDA kernel on device rows.
    unsafe { kernels::cuda::sample(&x, &params, &seeds, &steps) }
        .map(Some)
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
fn device_samples(a: &Args, _: &[Vec<f32>], _: bool) -> Result<Option<Tokens>, String> {
    if a.backend == "cpu" {
        Ok(None)
    } else {
        Err("this kernel-check was built without the `cuda` feature".into())
    }
}

/// A compared check's status; a skipped one prints SKIP itself.
fn status(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

fn run(a: &Args) -> Result<bool, String> {
    let base = test_rows(a.rows, a.cols, a.seed);
    let mut ok = true;
    for (dtype, rows) in [("f32", base.clone()), ("bf16", round_bf16(&base))] {
        let bf16 = dtype == "bf16";
        let got = device_signals(a, &rows, bf16)?;
        let mut failures = Vec::new();
        let mut worst = 0f32;
        for (r, (g, row)) in got.iter().zip(&rows).enumerate() {
            match compare_signals(g, &routing_signals(row, a.k), a.tol) {
                Ok(e) => worst = worst.max(e),
                Err(e) => failures.push(format!("row {r}: {e}")),
            }
        }
        ok &= failures.is_empty();
        println!(
            "{{\"check\":\"signals\",\"backend\":\"{}\",\"dtype\":\"{dtype}\",\"rows\":{},\"cols\":{},\"k\":{},\"max_rel_err\":{worst:e},\"failed_rows\":{},\"first_failure\":{:?},\"pass\":{},\"status\":\"{}\"}}",
            a.backend, a.rows, a.cols, a.k, failures.len(), failures.first().cloned().unwrap_or_default(), failures.is_empty(), status(failures.is_empty())
        );
        match device_samples(a, &rows, bf16)? {
            None => println!(
                "{{\"check\":\"sampling\",\"backend\":\"{}\",\"dtype\":\"{dtype}\",\"skipped\":\"no device kernel on the cpu backend\",\"status\":\"SKIP\"}}",
                a.backend
            ),
            Some(tokens) => {
                let params = test_params(rows.len());
                let mut mismatched = Vec::new();
                for (r, got) in tokens.iter().enumerate() {
                    let want = sample_row(&rows[r], &params[r], a.seed * 1000 + r as u64, r as u64 * 7)
                        .map_err(|e| match e {
                            kernels::SampleError::InfiniteLogit(_) => -1,
                            kernels::SampleError::NoFiniteLogits => -2,
                        });
                    if *got != want {
                        mismatched.push(format!("row {r}: got {got:?}, want {want:?}"));
                    }
                }
                ok &= mismatched.is_empty();
                println!(
                    "{{\"check\":\"sampling\",\"backend\":\"{}\",\"dtype\":\"{dtype}\",\"rows\":{},\"mismatched\":{},\"first_mismatch\":{:?},\"pass\":{},\"status\":\"{}\"}}",
                    a.backend, rows.len(), mismatched.len(), mismatched.first().cloned().unwrap_or_default(), mismatched.is_empty(), status(mismatched.is_empty())
                );
            }
        }
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("kernel-check: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kernel-check: {e}");
            ExitCode::from(2)
        }
    }
}
