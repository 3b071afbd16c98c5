use operator::tuner::*;
use std::time::Instant;
fn main() {
    let base = TunerInputs::new(
        vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
        vec![vec![0.65, 0.35], vec![1.0, 0.0]],
        vec![vec![1.0, 0.0], vec![1.0, 0.0]],
        0.1,
        1,
    )
    .unwrap();
    for (n, b) in [(32usize, [2usize, 20usize]), (32, [1, 8]), (64, [4, 40]), (64, [2, 32]), (64, [1, 16]), (64,[1,8])] {
        let inputs = base.with_concurrency(n).unwrap();
        let t = Instant::now();
        match predict(&inputs, &b) {
            Ok(p) => println!("N={n} {b:?} X={:.3} states={} trans={} t={:?}", p.throughput_tok_s, p.states, p.transitions, t.elapsed()),
            Err(e) => println!("N={n} {b:?} err {e} t={:?}", t.elapsed()),
        }
    }
    let me = TunerInputs::new(
        vec![StepLatency::Constant(6.0), StepLatency::Constant(15.0), StepLatency::Constant(27.9)],
        vec![vec![0.5, 0.3, 0.2]; 3],
        vec![vec![1.0; 3]; 3],
        0.1,
        1,
    ).unwrap();
    for n in [4usize, 6, 8] {
        let inputs = me.with_concurrency(n).unwrap();
        for b in [[1usize, 1, 1], [1, 2, 2], [2, 3, 4], [1, n / 2, n / 2]] {
            let t = Instant::now();
            match predict(&inputs, &b) {
                Ok(p) => println!("ME N={n} {b:?} X={:.3} states={} trans={} t={:?}", p.throughput_tok_s, p.states, p.transitions, t.elapsed()),
                Err(e) => println!("ME N={n} {b:?} err {e} t={:?}", t.elapsed()),
            }
        }
    }
}
