//! Times the CPU paged-attention kernel alone on one layer of SmolLM2-135M's
//! shape (9 query heads, 3 kv heads, head_dim 64, bf16 pool), against the
//! bytes it must read, on this thread and on scoped threads:
//! `cargo run --release -p kernels --example paged_attention -- [threads]`.

use std::time::Instant;

use half::bf16;
use kernels::paged_attention::{attend, Geometry, Item, Parallel, Plan, ScopedThreads, Serial};

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let g = Geometry {
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
    };
    println!("| batch | context | threads | us / call | GB/s of K/V read |");
    println!("|---|---|---|---|---|");
    for (batch, context) in [
        (1usize, 4096usize),
        (1, 1024),
        (16, 64),
        (16, 512),
        (64, 64),
    ] {
        let slots_total = batch * context;
        let kv_len = slots_total * g.kv_heads * g.head_dim;
        let keys: Vec<bf16> = (0..kv_len)
            .map(|i| bf16::from_f32(((i * 7) % 13) as f32 / 13.0))
            .collect();
        let values = keys.clone();
        let q: Vec<f32> = (0..batch * g.heads * g.head_dim)
            .map(|i| (i % 5) as f32 * 0.1)
            .collect();
        // Blocks of 16 slots, the sequences' blocks interleaved, as a
        // pool fills when sequences grow side by side.
        let block = 16;
        let tables: Vec<Vec<i64>> = (0..batch)
            .map(|b| {
                (0..context)
                    .map(|p| ((p / block * batch + b) * block + p % block) as i64)
                    .collect()
            })
            .collect();
        let items: Vec<Item<'_>> = tables
            .iter()
            .enumerate()
            .map(|(b, s)| Item {
                slots: s,
                first_row: b,
                rows: 1,
            })
            .collect();
        let plan = Plan::new(g, &items, 256).expect("plan");
        let mut out = vec![0.0; batch * g.heads * g.head_dim];
        let mut scratch = Vec::new();
        let bytes = (2 * kv_len * 2) as f64;
        for t in [1, threads] {
            let par: &dyn Parallel = if t == 1 { &Serial } else { &ScopedThreads(t) };
            let reps = 200;
            for _ in 0..10 {
                attend(&plan, &q, &keys, &values, &mut out, &mut scratch, par).expect("attend");
            }
            let start = Instant::now();
            for _ in 0..reps {
                attend(&plan, &q, &keys, &values, &mut out, &mut scratch, par).expect("attend");
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / reps as f64;
            println!(
                "| {batch} | {context} | {t} | {us:.1} | {:.1} |",
                bytes / us / 1e3
            );
        }
    }
}
