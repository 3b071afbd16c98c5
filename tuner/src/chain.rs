//! The embedded chain: the system observed just after each step-completion event.
//!
//! Between two completion events nothing random happens: running steps count down, waiting
//! counts do not change, and no idle model can start (it would have started at the previous
//! event). So the slot-by-slot chain can be observed only at events without losing anything:
//! from a state, the next event is `dt = min(remaining)` slots away, the steps that end then
//! route their requests (multinomially by P), and idle models whose waiting count reaches their
//! threshold start. Each transition carries its sojourn `dt`; rewards are the expected credits
//! of the ending steps, which depend only on the state.

use super::error::TunerError;
use super::inputs::TunerInputs;
use super::state::{check_packable, PackedState, StateMap};

/// The reachable embedded chain of one threshold vector, in CSR form.
#[derive(Debug)]
pub(crate) struct EmbeddedChain {
    /// Reachable states in discovery (BFS) order; state 0 is the initial state.
    pub states: Vec<PackedState>,
    /// `row_start[i]..row_start[i+1]` indexes the successors of state i.
    pub row_start: Vec<usize>,
    /// Successor state ids.
    pub target: Vec<u32>,
    /// Successor probabilities (each row sums to 1).
    pub prob: Vec<f64>,
    /// Slots from state i to its next completion event.
    pub dt: Vec<u32>,
}

/// Mask of the waiting and batch fields of every model in a packed state.
pub(crate) const COUNT_FIELDS: u128 = 0x0000_ffff_0000_ffff_0000_ffff_0000_ffff;
/// Mask of the remaining-slot fields of every model in a packed state.
pub(crate) const PHASE_FIELDS: u128 = !COUNT_FIELDS;

impl EmbeddedChain {
    /// Per state, a group id shared by the states that agree on the fields in `mask`: the
    /// aggregations the stationary solver uses to speed up convergence.
    pub fn groups(&self, mask: u128) -> Vec<u32> {
        let mut ids: StateMap<u32> = StateMap::default();
        self.states
            .iter()
            .map(|s| {
                let next = ids.len() as u32;
                *ids.entry(PackedState(s.0 & mask)).or_insert(next)
            })
            .collect()
    }
}

/// Routing outcomes of one ending step: (packed waiting increments, probability).
type Outcomes = Vec<(u128, f64)>;

/// Builds the chain of `thresholds`, failing on a deadlock or past `max_states` states.
pub(crate) fn build_embedded_chain(
    inputs: &TunerInputs,
    thresholds: &[usize],
    max_states: usize,
) -> Result<EmbeddedChain, TunerError> {
    inputs.check_thresholds(thresholds)?;
    check_packable(inputs)?;
    let models = inputs.models();
    let n = inputs.concurrency();
    // Routing outcomes per (model, batch), built on first use: with four models and a large
    // N most batch sizes never end a step, and each list has O(b^3) entries.
    let mut outcomes: Vec<Vec<Option<Outcomes>>> = vec![vec![None; n + 1]; models];
    let start_steps = |s: PackedState| -> PackedState {
        let mut s = s;
        for (m, &threshold) in thresholds.iter().enumerate() {
            let waiting = s.waiting(m);
            if s.remaining(m) == 0 && waiting >= threshold {
                s = s.with_model(m, 0, waiting, inputs.slots(m, waiting));
            }
        }
        s
    };
    let initial = start_steps(PackedState(0).with_model(inputs.entry_model(), n, 0, 0));

    let mut chain = EmbeddedChain {
        states: vec![initial],
        row_start: vec![0],
        target: Vec::new(),
        prob: Vec::new(),
        dt: Vec::new(),
    };
    let mut index: StateMap<u32> = StateMap::default();
    index.insert(initial, 0);
    let mut row: Vec<(u32, f64)> = Vec::new();
    let mut ending_steps: Vec<(usize, usize)> = Vec::with_capacity(models);
    let mut cursor: Vec<usize> = vec![0; models];
    let mut i = 0;
    while i < chain.states.len() {
        let s = chain.states[i];
        let dt = (0..models)
            .map(|m| s.remaining(m))
            .filter(|&r| r > 0)
            .min()
            .ok_or_else(|| TunerError::Infeasible {
                thresholds: thresholds.to_vec(),
                concurrency: n,
                witness: s.describe(inputs.names()),
            })?;
        let base = count_down(s, dt, models, &mut ending_steps);
        for &(m, b) in &ending_steps {
            if outcomes[m][b].is_none() {
                outcomes[m][b] = Some(multinomial_outcomes(&inputs.transition()[m], b));
            }
        }
        let outcome_list = |k: usize| -> &[(u128, f64)] {
            let (m, b) = ending_steps[k];
            outcomes[m][b].as_deref().unwrap_or(&[])
        };
        let ending = ending_steps.len();
        // Every combination of routing outcomes of the ending steps.
        row.clear();
        cursor[..ending].fill(0);
        loop {
            let mut increment = 0u128;
            let mut p = 1.0;
            for (k, &at) in cursor[..ending].iter().enumerate() {
                let (inc, q) = outcome_list(k)[at];
                increment += inc;
                p *= q;
            }
            let next = start_steps(PackedState(base.0 + increment));
            let known = chain.states.len() as u32;
            let id = *index.entry(next).or_insert(known);
            if id == known {
                if chain.states.len() >= max_states {
                    return Err(TunerError::StateSpaceTooLarge {
                        thresholds: thresholds.to_vec(),
                        concurrency: n,
                        limit: max_states,
                    });
                }
                chain.states.push(next);
            }
            row.push((id, p));
            // Advance the odometer over the ending steps' outcome lists.
            let mut k = 0;
            while k < ending {
                cursor[k] += 1;
                if cursor[k] < outcome_list(k).len() {
                    break;
                }
                cursor[k] = 0;
                k += 1;
            }
            if k == ending {
                break;
            }
        }
        chain.push_row(&mut row, dt);
        i += 1;
    }
    Ok(chain)
}

/// `s` after `dt` slots: every running step counts down, and the ones
/// reaching zero end (listed in `ending` with their batch) and go idle.
fn count_down(
    s: PackedState,
    dt: u32,
    models: usize,
    ending: &mut Vec<(usize, usize)>,
) -> PackedState {
    let mut base = s;
    ending.clear();
    for m in 0..models {
        let r = s.remaining(m);
        if r == dt {
            base = base.with_model(m, s.waiting(m), 0, 0);
            ending.push((m, s.batch(m)));
        } else if r > dt {
            base = base.with_model(m, s.waiting(m), s.batch(m), r - dt);
        }
    }
    base
}

impl EmbeddedChain {
    /// Appends one state's row: transitions to the same target merged
    /// (their probabilities summed), targets in ascending order.
    fn push_row(&mut self, row: &mut [(u32, f64)], dt: u32) {
        row.sort_unstable_by_key(|e| e.0);
        let mut last: Option<u32> = None;
        for &(id, p) in row.iter() {
            if last == Some(id) {
                if let Some(q) = self.prob.last_mut() {
                    *q += p;
                }
            } else {
                self.target.push(id);
                self.prob.push(p);
                last = Some(id);
            }
        }
        self.row_start.push(self.target.len());
        self.dt.push(dt);
    }
}

/// All ways `batch` requests leaving a step split over destinations with positive probability.
pub(crate) fn multinomial_outcomes(row: &[f64], batch: usize) -> Outcomes {
    let destinations: Vec<(usize, f64)> = row
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, p)| p > 0.0)
        .collect();
    let mut out = Vec::new();
    if batch == 0 || destinations.is_empty() {
        out.push((0, 1.0));
        return out;
    }
    split(&destinations, batch, 0, 1.0, &mut out);
    out
}

fn split(destinations: &[(usize, f64)], left: usize, increment: u128, p: f64, out: &mut Outcomes) {
    let Some((&(model, q), rest)) = destinations.split_first() else {
        return;
    };
    let unit = PackedState::waiting_unit(model);
    if rest.is_empty() {
        // Whoever did not go to an earlier destination goes here.
        out.push((increment + unit * left as u128, p));
        return;
    }
    // Probability that exactly k of the `left` requests go to `model`, given they did not go
    // to an earlier destination: binomial with the conditional probability q / (remaining mass).
    let mass: f64 = destinations.iter().map(|d| d.1).sum();
    let c = (q / mass).min(1.0);
    let mut binom = 1.0;
    for k in 0..=left {
        if k > 0 {
            binom = binom * (left - k + 1) as f64 / k as f64;
        }
        let pk = binom * c.powi(k as i32) * (1.0 - c).powi((left - k) as i32);
        if pk > 0.0 {
            split(rest, left - k, increment + unit * k as u128, p * pk, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::tests::r2r;

    #[test]
    fn multinomial_outcomes_sum_to_one_and_match_binomial() {
        let out = multinomial_outcomes(&[0.65, 0.35], 3);
        assert_eq!(out.len(), 4);
        let total: f64 = out.iter().map(|o| o.1).sum();
        assert!((total - 1.0).abs() < 1e-12);
        // All three stay at model 0.
        let all_stay = out
            .iter()
            .find(|o| o.0 == 3 * PackedState::waiting_unit(0))
            .unwrap();
        assert!((all_stay.1 - 0.65f64.powi(3)).abs() < 1e-12);
        let three = multinomial_outcomes(&[0.5, 0.3, 0.2], 4);
        assert_eq!(three.len(), 15);
        let total: f64 = three.iter().map(|o| o.1).sum();
        assert!((total - 1.0).abs() < 1e-12);
        let one_each = PackedState::waiting_unit(0) * 2
            + PackedState::waiting_unit(1)
            + PackedState::waiting_unit(2);
        let p = three.iter().find(|o| o.0 == one_each).unwrap().1;
        assert!((p - 12.0 * 0.25 * 0.3 * 0.2).abs() < 1e-12);
        // A zero-probability destination is never reached.
        let det = multinomial_outcomes(&[1.0, 0.0], 5);
        assert_eq!(det, vec![(5 * PackedState::waiting_unit(0), 1.0)]);
    }

    #[test]
    fn chain_rows_are_stochastic_and_requests_conserved() {
        let inputs = r2r(4);
        let chain = build_embedded_chain(&inputs, &[1, 3], 1_000_000).unwrap();
        assert!(chain.states.len() > 10);
        for i in 0..chain.states.len() {
            let row = chain.row_start[i]..chain.row_start[i + 1];
            let total: f64 = chain.prob[row].iter().sum();
            assert!((total - 1.0).abs() < 1e-12, "row {i} sums to {total}");
            let s = chain.states[i];
            let requests: usize = (0..2).map(|m| s.waiting(m) + s.batch(m)).sum();
            assert_eq!(requests, 4, "state {}", s.describe(inputs.names()));
            assert!(chain.dt[i] >= 1);
        }
    }

    #[test]
    fn state_limit_is_enforced() {
        let err = build_embedded_chain(&r2r(8), &[1, 1], 10).unwrap_err();
        assert!(
            matches!(err, TunerError::StateSpaceTooLarge { limit: 10, .. }),
            "{err}"
        );
    }
}
