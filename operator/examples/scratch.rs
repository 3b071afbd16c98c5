use operator::tuner::*;
use std::time::Instant;
fn main() {
    let me = TunerInputs::new(
        vec![StepLatency::Constant(6.0), StepLatency::Constant(12.0), StepLatency::Constant(27.9)],
        vec![vec![0.5, 0.3, 0.2]; 3],
        vec![vec![1.0; 3]; 3],
        0.1,
        8,
    ).unwrap();
    for b in [[1usize, 1, 1], [1, 1, 3]] {
        let t = Instant::now();
        let p = predict(&me, &b).unwrap();
        println!("ME N=8 {b:?} X={:.3} states={} trans={} t={:?}", p.throughput_tok_s, p.states, p.transitions, t.elapsed());
    }
}
