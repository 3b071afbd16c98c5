//! Reference solver: the chain, literally, one transition per slot.
//!
//! The state holds every model's waiting count, batch and remaining slots; each transition
//! advances one slot, routes every request of an ending step on its own, and starts idle
//! models at their threshold. The long-run reward per slot comes from power iteration on the
//! lazy chain `(I + P) / 2` started in the initial state, which converges on periodic chains
//! and weighs several closed classes correctly. It is slow and only meant to validate the
//! event-level solver on small cases (coarse slots, few requests).

use super::error::TunerError;
use super::inputs::TunerInputs;
use std::collections::HashMap;

/// Result of the slot-by-slot reference solver.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotwiseResult {
    /// Output tokens per second.
    pub throughput_tok_s: f64,
    /// Reachable slot-level states.
    pub states: usize,
}

/// One model's slot-level state.
type ModelSlotState = (u32, u32, u32); // (waiting, batch, remaining slots)

/// Throughput of `thresholds` from the plain slot-by-slot chain (at most `max_states` states).
pub fn predict_slotwise(
    inputs: &TunerInputs,
    thresholds: &[usize],
    max_states: usize,
) -> Result<SlotwiseResult, TunerError> {
    inputs.check_thresholds(thresholds)?;
    let models = inputs.models();
    let start = |mut s: Vec<ModelSlotState>| -> Vec<ModelSlotState> {
        for (m, state) in s.iter_mut().enumerate() {
            if state.2 == 0 && state.0 as usize >= thresholds[m] {
                let batch = state.0;
                *state = (0, batch, inputs.slots(m, batch as usize));
            }
        }
        s
    };
    let mut initial = vec![(0u32, 0u32, 0u32); models];
    initial[inputs.entry_model()].0 = inputs.concurrency() as u32;
    let initial = start(initial);

    let mut states: Vec<Vec<ModelSlotState>> = vec![initial.clone()];
    let mut index: HashMap<Vec<ModelSlotState>, usize> = HashMap::from([(initial, 0)]);
    let mut rows: Vec<Vec<(usize, f64)>> = Vec::new();
    let mut reward: Vec<f64> = Vec::new();
    let mut i = 0;
    while i < states.len() {
        let s = states[i].clone();
        if s.iter().all(|m| m.2 == 0) {
            return Err(TunerError::Infeasible {
                thresholds: thresholds.to_vec(),
                concurrency: inputs.concurrency(),
                witness: format!("{s:?} (waiting, batch, remaining) per model"),
            });
        }
        // Advance one slot; collect the requests (by their model) whose step ends now.
        let mut next = s.clone();
        let mut leaving: Vec<usize> = Vec::new();
        let mut tokens = 0.0;
        for (m, state) in next.iter_mut().enumerate() {
            if state.2 == 1 {
                leaving.extend(std::iter::repeat_n(m, state.1 as usize));
                tokens += f64::from(state.1) * inputs.mean_credit(m);
                *state = (state.0, 0, 0);
            } else if state.2 > 1 {
                state.2 -= 1;
            }
        }
        let mut successors: HashMap<Vec<ModelSlotState>, f64> = HashMap::new();
        route_each(inputs, &leaving, next, 1.0, &mut successors);
        let mut row = Vec::with_capacity(successors.len());
        for (successor, p) in successors {
            let successor = start(successor);
            let id = match index.get(&successor) {
                Some(&id) => id,
                None => {
                    if states.len() >= max_states {
                        return Err(TunerError::StateSpaceTooLarge {
                            thresholds: thresholds.to_vec(),
                            concurrency: inputs.concurrency(),
                            limit: max_states,
                        });
                    }
                    states.push(successor.clone());
                    index.insert(successor, states.len() - 1);
                    states.len() - 1
                }
            };
            row.push((id, p));
        }
        rows.push(row);
        reward.push(tokens);
        i += 1;
    }
    let per_slot = long_run_reward(&rows, &reward)?;
    Ok(SlotwiseResult {
        throughput_tok_s: per_slot * 1000.0 / inputs.delta_ms(),
        states: states.len(),
    })
}

/// Sends each leaving request to every destination in turn (probability P[m][j]).
fn route_each(
    inputs: &TunerInputs,
    leaving: &[usize],
    state: Vec<ModelSlotState>,
    p: f64,
    out: &mut HashMap<Vec<ModelSlotState>, f64>,
) {
    let Some((&m, rest)) = leaving.split_first() else {
        *out.entry(state).or_insert(0.0) += p;
        return;
    };
    for (j, &q) in inputs.transition()[m].iter().enumerate() {
        if q > 0.0 {
            let mut next = state.clone();
            next[j].0 += 1;
            route_each(inputs, rest, next, p * q, out);
        }
    }
}

/// Long-run expected reward per transition, by power iteration on the lazy chain from state 0.
fn long_run_reward(rows: &[Vec<(usize, f64)>], reward: &[f64]) -> Result<f64, TunerError> {
    const TOLERANCE: f64 = 1e-15;
    const MAX_ITERATIONS: usize = 5_000_000;
    let n = rows.len();
    let mut x = vec![0.0; n];
    x[0] = 1.0;
    let mut y = vec![0.0; n];
    let mut change = f64::INFINITY;
    for _ in 0..MAX_ITERATIONS {
        y.iter_mut().zip(&x).for_each(|(y, x)| *y = 0.5 * x);
        for (i, row) in rows.iter().enumerate() {
            for &(j, p) in row {
                y[j] += 0.5 * x[i] * p;
            }
        }
        change = x.iter().zip(&y).map(|(a, b)| (a - b).abs()).sum();
        std::mem::swap(&mut x, &mut y);
        if change < TOLERANCE {
            return Ok(x.iter().zip(reward).map(|(p, r)| p * r).sum());
        }
    }
    Err(TunerError::NotConverged {
        sweeps: MAX_ITERATIONS,
        states: n,
        change,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::StepLatency;
    use crate::predict::predict;

    /// A small R2R-like system: 0.6 ms and 1.5 ms steps.
    fn small(delta_ms: f64, n: usize) -> TunerInputs {
        TunerInputs::new(
            vec![StepLatency::Constant(0.6), StepLatency::Constant(1.5)],
            vec![vec![0.65, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            delta_ms,
            n,
        )
        .unwrap()
    }

    fn assert_agree(inputs: &TunerInputs, thresholds: &[usize]) {
        let event = predict(inputs, thresholds);
        let slot = predict_slotwise(inputs, thresholds, 200_000);
        match (event, slot) {
            (Ok(e), Ok(s)) => {
                let rel = (e.throughput_tok_s - s.throughput_tok_s).abs() / s.throughput_tok_s;
                assert!(
                    rel < 1e-9,
                    "N={} B={thresholds:?}: event {} vs slot {}",
                    inputs.concurrency(),
                    e.throughput_tok_s,
                    s.throughput_tok_s
                );
                assert!(
                    s.states >= e.states,
                    "slot chain cannot be smaller than the embedded one"
                );
            }
            (Err(TunerError::Infeasible { .. }), Err(TunerError::Infeasible { .. })) => {}
            (e, s) => panic!(
                "N={} B={thresholds:?}: event {e:?} vs slot {s:?}",
                inputs.concurrency()
            ),
        }
    }

    #[test]
    fn event_solver_matches_slot_chain_on_two_models() {
        for n in 1..=4 {
            let inputs = small(0.3, n);
            for b0 in 1..=n {
                for b1 in 1..=n {
                    assert_agree(&inputs, &[b0, b1]);
                }
            }
        }
    }

    #[test]
    fn event_solver_matches_slot_chain_with_batch_dependent_latency() {
        let inputs = TunerInputs::new(
            vec![
                StepLatency::Table(vec![(1, 0.6), (3, 0.9)]),
                StepLatency::Table(vec![(1, 1.5), (2, 1.8), (4, 2.4)]),
            ],
            vec![vec![0.5, 0.5], vec![0.8, 0.2]],
            vec![vec![1.0, 0.0], vec![1.0, 1.0]],
            0.3,
            4,
        )
        .unwrap();
        for b0 in 1..=4 {
            for b1 in 1..=4 {
                assert_agree(&inputs, &[b0, b1]);
            }
        }
    }

    #[test]
    fn event_solver_matches_slot_chain_on_three_models() {
        let inputs = TunerInputs::new(
            vec![
                StepLatency::Constant(0.6),
                StepLatency::Constant(0.9),
                StepLatency::Constant(1.5),
            ],
            vec![
                vec![0.5, 0.3, 0.2],
                vec![0.4, 0.4, 0.2],
                vec![0.6, 0.1, 0.3],
            ],
            vec![vec![1.0; 3]; 3],
            0.3,
            3,
        )
        .unwrap();
        for b in [
            [1, 1, 1],
            [1, 2, 2],
            [2, 1, 3],
            [1, 3, 3],
            [3, 3, 3],
            [2, 2, 2],
        ] {
            assert_agree(&inputs, &b);
        }
    }

    #[test]
    fn slot_chain_does_not_depend_on_delta() {
        for (b0, b1) in [(1, 1), (1, 3), (2, 2)] {
            let coarse = predict_slotwise(&small(0.3, 3), &[b0, b1.min(3)], 200_000).unwrap();
            let fine = predict_slotwise(&small(0.1, 3), &[b0, b1.min(3)], 200_000).unwrap();
            let rel =
                (coarse.throughput_tok_s - fine.throughput_tok_s).abs() / fine.throughput_tok_s;
            assert!(rel < 1e-9, "B=[{b0},{b1}]: {coarse:?} vs {fine:?}");
            assert!(fine.states > coarse.states);
        }
    }
}
