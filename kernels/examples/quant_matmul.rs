//! Times `kernels::quant` against `kernels::gemm` (bf16) at the shapes of
//! the real GGUFs' projections, for 1 to 64 input rows: the integer dot
//! (int8 activations, VNNI), dequantized bf16 tiles, and the bf16 GEMM the
//! engine runs on dequantized weights. Each shape is cycled over enough
//! copies to exceed 64 MiB, so the weights stream from memory as in a
//! decode step.
//!
//! `cargo run --release -p kernels --example quant_matmul -- [--threads N] [--page FILE]`
//! prints a Markdown table; with `--page` it also writes it there, with
//! the command, date, commit and machine.

use std::time::{Duration, Instant};

use half::bf16;
use kernels::gemm::{self, PackedWeight};
use kernels::parallel::ScopedThreads;
use kernels::quant::{self, Isa, Method, Path, QuantMatrix, QuantScratch, QuantType};

/// Bytes the copies of one shape add up to at least.
const SPAN: usize = 64 << 20;
/// Wall time each measurement runs for at least.
const RUN: Duration = Duration::from_millis(300);

fn lcg(n: usize, seed: u32) -> impl Iterator<Item = u32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
    (0..n).map(move |_| {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        s >> 8
    })
}

/// Random bytes below 0x3c: every f16 read from them is finite and small.
fn matrix(ty: QuantType, n: usize, k: usize, seed: u32) -> QuantMatrix {
    let len = n * k / ty.block_weights() * ty.block_bytes();
    let bytes = lcg(len, seed).map(|v| (v % 0x3c) as u8).collect();
    QuantMatrix::new(ty, n, k, bytes).expect("a whole number of blocks")
}

/// Seconds per call of `f` over `copies`, cycled.
fn time(copies: usize, mut f: impl FnMut(usize)) -> f64 {
    for c in 0..copies {
        f(c);
    }
    let start = Instant::now();
    let mut calls = 0usize;
    while start.elapsed() < RUN || calls < copies {
        f(calls % copies);
        calls += 1;
    }
    start.elapsed().as_secs_f64() / calls as f64
}

fn shell(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let threads: usize = flag("--threads").map_or(2, |v| v.parse().expect("--threads N"));
    let par = ScopedThreads(threads);
    let shapes = [
        ("SmolLM2 up/gate", QuantType::Q4_1, 1536, 576),
        ("SmolLM2 down", QuantType::Q4_1, 576, 1536),
        ("Qwen-0.5B up", QuantType::Q5_0, 4864, 896),
        ("Qwen-0.5B q", QuantType::Q8_0, 896, 896),
        ("Qwen-1.5B up", QuantType::Q4_K, 8960, 1536),
        ("Qwen-1.5B down", QuantType::Q6_K, 1536, 8960),
    ];
    let rows_list = [1usize, 4, 8, 16, 64];
    let mut page = String::new();
    page.push_str(&format!(
        "Microseconds per call ({threads} threads); in brackets, weight bytes read per second (GB/s).\n\n\
         | shape | type | [n, k] | rows | int dot | bf16 tiles | bf16 GEMM (dequantized) | fastest quantized |\n\
         |---|---|---|---|---|---|---|---|\n"
    ));
    for (name, ty, n, k) in shapes {
        let one = matrix(ty, n, k, 1);
        let copies = SPAN.div_ceil(one.bytes()).max(2);
        let ws: Vec<QuantMatrix> = (0..copies)
            .map(|c| matrix(ty, n, k, c as u32 + 1))
            .collect();
        let bf_copies = SPAN.div_ceil(n * k * 2).max(2);
        let packed: Vec<PackedWeight> = (0..bf_copies)
            .map(|c| {
                let w: Vec<bf16> = ws[c % copies]
                    .dequantize()
                    .iter()
                    .map(|&v| bf16::from_f32(v))
                    .collect();
                PackedWeight::pack(&w, n, k).expect("packs")
            })
            .collect();
        for rows in rows_list {
            let x: Vec<bf16> = lcg(rows * k, 3)
                .map(|v| bf16::from_f32(v as f32 / (1u32 << 24) as f32 - 0.5))
                .collect();
            let mut out = vec![bf16::ZERO; rows * n];
            let mut scratch = QuantScratch::default();
            let mut quant = |method| {
                let path = Path {
                    isa: Isa::best(),
                    method,
                };
                time(copies, |c| {
                    quant::matmul_with(&x, rows, &ws[c], None, &mut out, &mut scratch, &par, path)
                        .expect("runs")
                })
            };
            let (int, tiles) = (quant(Method::IntDot), quant(Method::Tiles));
            let mut gscratch = Vec::new();
            let plain = time(bf_copies, |c| {
                gemm::matmul(&x, rows, &packed[c], None, &mut out, &mut gscratch, &par)
                    .expect("runs")
            });
            let cell =
                |t: f64, bytes: usize| format!("{:.0} ({:.1})", t * 1e6, bytes as f64 / t / 1e9);
            let best = if int <= tiles { "int dot" } else { "tiles" };
            let line = format!(
                "| {name} | {ty} | [{n}, {k}] | {rows} | {} | {} | {} | {best} |\n",
                cell(int, one.bytes()),
                cell(tiles, one.bytes()),
                cell(plain, n * k * 2),
            );
            print!("{line}");
            page.push_str(&line);
        }
    }
    if let Some(path) = flag("--page") {
        let header = format!(
            "# Quantized matmul kernels: int dot against bf16 tiles\n\n\
             Written by `cargo run --release -p kernels --example quant_matmul -- --threads {threads} --page {path}`\n\
             on {} at commit {}; CPU: {}; load average before the run: {}.\n\n\
             `kernels::quant::Path::for_rows` takes {:?} for one row, {:?} for 64.\n\n",
            shell("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            shell("git", &["rev-parse", "--short", "HEAD"]),
            shell("sh", &["-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"]),
            shell("cut", &["-d", " ", "-f", "1-3", "/proc/loadavg"]),
            Path::for_rows(1).method,
            Path::for_rows(64).method,
        );
        std::fs::write(&path, header + &page).expect("writes the page");
    }
}
