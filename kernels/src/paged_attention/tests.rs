use super::*;

/// A small deterministic generator (xorshift), so the crate needs no `rand`.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

/// Three geometries: heads of whole 16-lane vectors (the AVX-512 path) and
/// one with a tail (the portable path on every ISA); groups of 3 and 5
/// query heads per kv head (one block, and a block of 4 plus one), the
/// latter on both paths.
const GEOMETRIES: [Geometry; 3] = [
    Geometry {
        heads: 6,
        kv_heads: 2,
        head_dim: 64,
        scale: 0.125,
    },
    Geometry {
        heads: 10,
        kv_heads: 2,
        head_dim: 32,
        scale: 0.177,
    },
    Geometry {
        heads: 10,
        kv_heads: 2,
        head_dim: 40,
        scale: 0.158,
    },
];
const G: Geometry = GEOMETRIES[2];
const POOL: usize = 128;

/// (context, new rows) per item; slots are a shuffled range of the pool.
const SHAPE: [(usize, usize); 3] = [(37, 1), (70, 3), (5, 5)];

struct Case {
    g: Geometry,
    slots: Vec<Vec<i64>>,
    q: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
}

fn case(seed: u64) -> Case {
    case_in(seed, G)
}

fn case_in(seed: u64, g: Geometry) -> Case {
    let mut rng = Gen(seed);
    let mut pool: Vec<i64> = (0..POOL as i64).collect();
    for i in (1..pool.len()).rev() {
        let j = ((rng.next() + 1.0) * 0.5 * i as f32) as usize;
        pool.swap(i, j.min(i));
    }
    let mut used = pool.into_iter();
    let slots = SHAPE
        .iter()
        .map(|&(ctx, _)| used.by_ref().take(ctx).collect())
        .collect();
    let rows: usize = SHAPE.iter().map(|s| s.1).sum();
    let kv = POOL * g.kv_heads * g.head_dim;
    Case {
        g,
        slots,
        // Large enough scores that the softmax is far from uniform.
        q: rng.vec(rows * g.heads * g.head_dim, 3.0),
        keys: rng.vec(kv, 1.0),
        values: rng.vec(kv, 1.0),
    }
}

fn plan(c: &Case, chunk: usize) -> Plan {
    let mut first_row = 0;
    let items: Vec<Item<'_>> = c
        .slots
        .iter()
        .zip(SHAPE)
        .map(|(s, (_, rows))| {
            let item = Item {
                slots: s,
                first_row,
                rows,
            };
            first_row += rows;
            item
        })
        .collect();
    Plan::new(c.g, &items, chunk).unwrap()
}

/// Textbook attention in f64: softmax over each row's visible positions.
fn reference(c: &Case, keys: &[f32], values: &[f32]) -> Vec<f64> {
    let g = c.g;
    let (hd, group) = (g.head_dim, g.group());
    let mut out = Vec::new();
    for (slots, (ctx, rows)) in c.slots.iter().zip(SHAPE) {
        for r in 0..rows {
            let row = out.len() / (g.heads * hd);
            for head in 0..g.heads {
                let kvh = head / group;
                let q = &c.q[(row * g.heads + head) * hd..][..hd];
                let at = |s: i64| (s as usize * g.kv_heads + kvh) * hd;
                let scores: Vec<f64> = slots[..ctx - rows + r + 1]
                    .iter()
                    .map(|&s| {
                        let k = &keys[at(s)..at(s) + hd];
                        let d: f64 = q.iter().zip(k).map(|(a, b)| *a as f64 * *b as f64).sum();
                        d * g.scale as f64
                    })
                    .collect();
                let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for d in 0..hd {
                    let v: f64 = slots
                        .iter()
                        .zip(&w)
                        .map(|(&s, w)| w * values[at(s) + d] as f64)
                        .sum();
                    out.push(v / z);
                }
            }
        }
    }
    out
}

fn run<E: KvElem>(
    isa: Isa,
    p: &Plan,
    c: &Case,
    keys: &[E],
    values: &[E],
    par: &dyn Parallel,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; p.rows() * c.g.heads * c.g.head_dim];
    let mut scratch = Vec::new();
    attend_on(isa, p, &c.q, keys, values, &mut out, &mut scratch, par).unwrap();
    out
}

fn max_abs_diff(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn f32_pool_matches_textbook_attention_at_every_chunking_and_isa() {
    for g in GEOMETRIES {
        let c = case_in(7, g);
        let want = reference(&c, &c.keys, &c.values);
        for chunk in [4, 16, 1000] {
            let p = plan(&c, chunk);
            for isa in [Isa::Baseline, Isa::Avx2, Isa::Avx512] {
                let got = run(isa, &p, &c, &c.keys, &c.values, &Serial);
                let diff = max_abs_diff(&got, &want);
                let hd = g.head_dim;
                assert!(
                    diff < 1e-5,
                    "head_dim {hd}, chunk {chunk}, {isa:?}: off by {diff}"
                );
            }
        }
    }
}

#[test]
fn bf16_pool_matches_textbook_attention_over_the_same_values() {
    for g in GEOMETRIES {
        let c = case_in(11, g);
        let kb: Vec<half::bf16> = c.keys.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let vb: Vec<half::bf16> = c.values.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let widened = |v: &[half::bf16]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
        let want = reference(&c, &widened(&kb), &widened(&vb));
        for isa in [Isa::Baseline, Isa::Avx512] {
            let got = run(isa, &plan(&c, 16), &c, &kb, &vb, &Serial);
            let diff = max_abs_diff(&got, &want);
            assert!(
                diff < 1e-5,
                "head_dim {}, {isa:?}: off by {diff}",
                g.head_dim
            );
        }
    }
}

/// Promises threads but runs the work once, on this thread.
struct Lazy;

impl Parallel for Lazy {
    fn threads(&self) -> usize {
        4
    }
    fn run(&self, work: &(dyn Fn() + Sync)) -> bool {
        work();
        true
    }
}

#[test]
fn threads_split_the_work_without_changing_a_bit_and_fewer_still_finish() {
    let c = case(3);
    let p = plan(&c, 8);
    let serial = run(Isa::detected(), &p, &c, &c.keys, &c.values, &Serial);
    for par in [&ScopedThreads(3) as &dyn Parallel, &Lazy] {
        let got = run(Isa::detected(), &p, &c, &c.keys, &c.values, par);
        assert!(got
            .iter()
            .zip(&serial)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

/// Returns without running anything.
struct Idle;

impl Parallel for Idle {
    fn threads(&self) -> usize {
        2
    }
    fn run(&self, _: &(dyn Fn() + Sync)) -> bool {
        true
    }
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let c = case(5);
    let p = plan(&c, 16);
    let mut out = vec![0.0; p.rows() * G.heads * G.head_dim];
    let mut scratch = Vec::new();
    let mut call = |q: &[f32], keys: &[f32], par: &dyn Parallel| {
        attend(
            &p,
            q,
            keys,
            &c.values[..keys.len()],
            &mut out,
            &mut scratch,
            par,
        )
        .unwrap_err()
        .to_string()
    };
    let small_pool = &c.keys[..10 * G.kv_heads * G.head_dim];
    assert!(call(&c.q, small_pool, &Serial).contains("outside the pool of 10"));
    assert!(call(&c.q[..5], &c.keys, &Serial).contains("q has 5"));
    assert!(call(&c.q[..], &c.keys[..7], &Serial).contains("whole slots"));
    assert!(call(&c.q, &c.keys, &Idle).contains("never run"));
    let wide = Geometry { head_dim: 512, ..G };
    let s = [0i64];
    let wide_plan = Plan::new(
        wide,
        &[Item {
            slots: &s,
            first_row: 0,
            rows: 1,
        }],
        16,
    )
    .unwrap();
    let err = attend(
        &wide_plan,
        &[],
        &c.keys,
        &c.values,
        &mut [],
        &mut scratch,
        &Serial,
    );
    assert!(err.unwrap_err().to_string().contains("head_dim 512"));
}
