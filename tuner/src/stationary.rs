//! Long-run behaviour of a finite Markov chain given in CSR form, started in state 0.
//!
//! The chain may have transient states and, in degenerate inputs, several closed classes. We
//! find the strongly connected components (iterative Tarjan), keep the closed ones, weigh each
//! by the probability of ending in it from state 0, and solve each class's stationary
//! distribution by Gauss-Seidel on `pi = pi P`, which converges even on periodic classes for
//! these chains, unlike plain power iteration. Convergence is checked by the sweep change and,
//! at the end, by the residual `|pi P - pi|_1`.

use super::error::TunerError;
use super::state::StateHasher;
use std::hash::BuildHasherDefault;

/// A chain in compressed sparse row form: successors of `i` are `row_start[i]..row_start[i+1]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Csr<'a> {
    /// Row offsets (length = states + 1).
    pub row_start: &'a [usize],
    /// Successor ids.
    pub target: &'a [u32],
    /// Successor probabilities.
    pub prob: &'a [f64],
}

impl Csr<'_> {
    fn states(&self) -> usize {
        self.row_start.len() - 1
    }
    fn row(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let range = self.row_start[i]..self.row_start[i + 1];
        self.target[range.clone()]
            .iter()
            .zip(&self.prob[range])
            .map(|(&j, &p)| (j as usize, p))
    }
}

/// A closed class, the probability of ending in it from state 0, and its stationary distribution.
#[derive(Debug, Clone)]
pub(crate) struct RecurrentClass {
    /// Probability that the chain started in state 0 ends up in this class.
    pub weight: f64,
    /// State ids of the class, ascending.
    pub members: Vec<u32>,
    /// Stationary probability of each member.
    pub pi: Vec<f64>,
}

/// Solver tolerances.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SolverLimits {
    /// Stop when a sweep changes the distribution by less than this (L1).
    pub tolerance: f64,
    /// Accept the solution when `|pi P - pi|_1` is below this.
    pub max_residual: f64,
    /// Give up after this many sweeps.
    pub max_sweeps: usize,
}

impl Default for SolverLimits {
    fn default() -> Self {
        SolverLimits {
            tolerance: 1e-10,
            max_residual: 1e-9,
            max_sweeps: 20_000,
        }
    }
}

/// The closed classes reachable from state 0 with positive weight.
pub(crate) fn recurrent_classes(
    csr: Csr<'_>,
    groups: &[&[u32]],
    limits: SolverLimits,
) -> Result<Vec<RecurrentClass>, TunerError> {
    let component = strongly_connected_components(csr);
    let components = component.iter().map(|&c| c as usize + 1).max().unwrap_or(0);
    let mut closed = vec![true; components];
    for i in 0..csr.states() {
        if csr.row(i).any(|(j, _)| component[j] != component[i]) {
            closed[component[i] as usize] = false;
        }
    }
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); components];
    for (i, &c) in component.iter().enumerate() {
        if closed[c as usize] {
            members[c as usize].push(i as u32);
        }
    }
    let closed_ids: Vec<usize> = (0..components).filter(|&c| closed[c]).collect();
    let mut classes = Vec::new();
    for &c in &closed_ids {
        let weight = if closed_ids.len() == 1 {
            1.0
        } else {
            absorption_probability(csr, &component, &closed, c, limits)?
        };
        if weight <= 0.0 {
            continue;
        }
        let class_members = std::mem::take(&mut members[c]);
        let pi = stationary_of_class(csr, &class_members, groups, limits)?;
        classes.push(RecurrentClass {
            weight,
            members: class_members,
            pi,
        });
    }
    Ok(classes)
}

/// Tarjan's algorithm without recursion; components are numbered sinks first.
fn strongly_connected_components(csr: Csr<'_>) -> Vec<u32> {
    const UNSEEN: u32 = u32::MAX;
    let n = csr.states();
    let mut order = vec![UNSEEN; n];
    let mut low = vec![0u32; n];
    let mut component = vec![UNSEEN; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut calls: Vec<(u32, usize)> = Vec::new();
    let mut counter = 0u32;
    let mut components = 0u32;
    for root in 0..n {
        if order[root] != UNSEEN {
            continue;
        }
        calls.push((root as u32, csr.row_start[root]));
        order[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root as u32);
        on_stack[root] = true;
        while let Some(&(v, edge)) = calls.last() {
            let v = v as usize;
            if edge < csr.row_start[v + 1] {
                let top = calls.len() - 1;
                calls[top].1 = edge + 1;
                let w = csr.target[edge] as usize;
                if order[w] == UNSEEN {
                    order[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w as u32);
                    on_stack[w] = true;
                    calls.push((w as u32, csr.row_start[w]));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(parent, _)) = calls.last() {
                let parent = parent as usize;
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w as usize] = false;
                    component[w as usize] = components;
                    if w as usize == v {
                        break;
                    }
                }
                components += 1;
            }
        }
    }
    component
}

/// Probability of being absorbed in closed component `target` from state 0.
fn absorption_probability(
    csr: Csr<'_>,
    component: &[u32],
    closed: &[bool],
    target: usize,
    limits: SolverLimits,
) -> Result<f64, TunerError> {
    let n = csr.states();
    let mut h: Vec<f64> = (0..n)
        .map(|i| {
            if component[i] as usize == target {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    let mut transient: Vec<usize> = (0..n).filter(|&i| !closed[component[i] as usize]).collect();
    // Sinks-first component order makes one sweep exact wherever the transient part is acyclic.
    transient.sort_by_key(|&i| component[i]);
    for sweep in 0..limits.max_sweeps {
        let mut change = 0.0;
        for &i in &transient {
            let mut diagonal = 0.0;
            let mut acc = 0.0;
            for (j, p) in csr.row(i) {
                if j == i {
                    diagonal += p;
                } else {
                    acc += p * h[j];
                }
            }
            let new = if diagonal < 1.0 {
                acc / (1.0 - diagonal)
            } else {
                0.0
            };
            change += (new - h[i]).abs();
            h[i] = new;
        }
        if change < limits.tolerance {
            return Ok(h[0]);
        }
        if sweep + 1 == limits.max_sweeps {
            return Err(TunerError::NotConverged {
                sweeps: limits.max_sweeps,
                states: transient.len(),
                change,
            });
        }
    }
    Ok(h[0])
}

/// Incoming edges of one closed class in local numbering, self-loops kept apart.
struct ClassSystem {
    in_start: Vec<usize>,
    in_source: Vec<u32>,
    in_prob: Vec<f64>,
    stay: Vec<f64>,
}

impl ClassSystem {
    fn new(csr: Csr<'_>, members: &[u32], local: &[u32]) -> Self {
        let size = members.len();
        let mut in_start = vec![0usize; size + 1];
        let mut stay = vec![0.0; size];
        for (k, &i) in members.iter().enumerate() {
            for (j, p) in csr.row(i as usize) {
                let lj = local[j] as usize;
                if lj == k {
                    stay[k] += p;
                } else {
                    in_start[lj + 1] += 1;
                }
            }
        }
        for k in 0..size {
            in_start[k + 1] += in_start[k];
        }
        let mut fill = in_start.clone();
        let mut in_source = vec![0u32; in_start[size]];
        let mut in_prob = vec![0.0; in_start[size]];
        for (k, &i) in members.iter().enumerate() {
            for (j, p) in csr.row(i as usize) {
                let lj = local[j] as usize;
                if lj != k {
                    in_source[fill[lj]] = k as u32;
                    in_prob[fill[lj]] = p;
                    fill[lj] += 1;
                }
            }
        }
        ClassSystem {
            in_start,
            in_source,
            in_prob,
            stay,
        }
    }

    /// One forward Gauss-Seidel sweep, then normalization.
    fn sweep(&self, pi: &mut [f64]) {
        for k in 0..pi.len() {
            let mut acc = 0.0;
            for e in self.in_start[k]..self.in_start[k + 1] {
                acc += pi[self.in_source[e] as usize] * self.in_prob[e];
            }
            pi[k] = acc / (1.0 - self.stay[k]);
        }
        let total: f64 = pi.iter().sum();
        pi.iter_mut().for_each(|p| *p /= total);
    }
}

/// Iterative aggregation-disaggregation (Koury-McAllister-Stewart): states of one group share
/// slow dynamics (e.g. the same request counts, different step phases), so a small chain over
/// groups fixes the slow modes that Gauss-Seidel alone removes only over hundreds of sweeps.
struct Aggregation {
    /// Dense group of each member.
    group: Vec<u32>,
    groups: usize,
    /// Per member, its out-probability summed per target group: `row_start[k]..row_start[k+1]`
    /// indexes (aggregated edge, probability). Much shorter than the member's own row, since
    /// most successors of a state share a group.
    row_start: Vec<usize>,
    edge: Vec<u32>,
    prob: Vec<f64>,
    /// Source and target group of each aggregated edge.
    edge_ends: Vec<(u32, u32)>,
}

impl Aggregation {
    fn new(csr: Csr<'_>, members: &[u32], local: &[u32], global_group: &[u32]) -> Self {
        let global_groups = global_group
            .iter()
            .map(|&g| g as usize + 1)
            .max()
            .unwrap_or(0);
        let mut dense = vec![u32::MAX; global_groups];
        let mut groups = 0u32;
        let group: Vec<u32> = members
            .iter()
            .map(|&i| {
                let g = &mut dense[global_group[i as usize] as usize];
                if *g == u32::MAX {
                    *g = groups;
                    groups += 1;
                }
                *g
            })
            .collect();
        let mut edge_index: std::collections::HashMap<u64, u32, BuildHasherDefault<StateHasher>> =
            Default::default();
        let mut aggregation = Aggregation {
            group,
            groups: groups as usize,
            row_start: Vec::with_capacity(members.len() + 1),
            edge: Vec::new(),
            prob: Vec::new(),
            edge_ends: Vec::new(),
        };
        aggregation.row_start.push(0);
        let mut row: Vec<(u32, f64)> = Vec::new();
        for (k, &i) in members.iter().enumerate() {
            row.clear();
            let from = aggregation.group[k];
            for (j, p) in csr.row(i as usize) {
                let to = aggregation.group[local[j] as usize];
                let key = (u64::from(from) << 32) | u64::from(to);
                let next = aggregation.edge_ends.len() as u32;
                let id = *edge_index.entry(key).or_insert(next);
                if id == next {
                    aggregation.edge_ends.push((from, to));
                }
                row.push((id, p));
            }
            row.sort_unstable_by_key(|e| e.0);
            let mut last = u32::MAX;
            for &(id, p) in &row {
                if id == last {
                    if let Some(q) = aggregation.prob.last_mut() {
                        *q += p;
                    }
                } else {
                    aggregation.edge.push(id);
                    aggregation.prob.push(p);
                    last = id;
                }
            }
            aggregation.row_start.push(aggregation.edge.len());
        }
        aggregation
    }

    /// Replaces the group masses of `pi` by the stationary distribution of the aggregated chain.
    fn correct(&self, pi: &mut [f64], limits: SolverLimits) {
        let mut mass = vec![0.0; self.groups];
        let mut flow = vec![0.0; self.edge_ends.len()];
        for (k, &p) in pi.iter().enumerate() {
            mass[self.group[k] as usize] += p;
            for e in self.row_start[k]..self.row_start[k + 1] {
                flow[self.edge[e] as usize] += p * self.prob[e];
            }
        }
        // Aggregated chain A[g][h] = flow(g -> h) / mass(g); solve xi = xi A by Gauss-Seidel.
        let mut in_edges: Vec<Vec<(u32, f64)>> = vec![Vec::new(); self.groups];
        let mut stay = vec![0.0; self.groups];
        for (&(g, h), &f) in self.edge_ends.iter().zip(&flow) {
            let a = if mass[g as usize] > 0.0 {
                f / mass[g as usize]
            } else {
                0.0
            };
            if g == h {
                stay[g as usize] += a;
            } else {
                in_edges[h as usize].push((g, a));
            }
        }
        let mut xi = mass.clone();
        for _ in 0..limits.max_sweeps.min(AGGREGATED_SWEEPS) {
            let mut change = 0.0;
            for h in 0..self.groups {
                let acc: f64 = in_edges[h].iter().map(|&(g, a)| xi[g as usize] * a).sum();
                let new = if stay[h] < 1.0 {
                    acc / (1.0 - stay[h])
                } else {
                    xi[h]
                };
                change += (new - xi[h]).abs();
                xi[h] = new;
            }
            let total: f64 = xi.iter().sum();
            xi.iter_mut().for_each(|x| *x /= total);
            if change < limits.tolerance * 0.1 {
                break;
            }
        }
        for (k, p) in pi.iter_mut().enumerate() {
            let g = self.group[k] as usize;
            if mass[g] > 0.0 {
                *p *= xi[g] / mass[g];
            }
        }
    }
}

/// Sweeps of the small aggregated chain per correction; an inexact inner solve only slows the
/// outer iteration, which keeps its own convergence check.
const AGGREGATED_SWEEPS: usize = 200;

/// Stationary distribution of one closed class: Gauss-Seidel sweeps, each preceded by one
/// aggregation-disaggregation correction per grouping in `groups` (group id per global state).
fn stationary_of_class(
    csr: Csr<'_>,
    members: &[u32],
    groups: &[&[u32]],
    limits: SolverLimits,
) -> Result<Vec<f64>, TunerError> {
    let size = members.len();
    if size == 1 {
        return Ok(vec![1.0]);
    }
    let mut local = vec![u32::MAX; csr.states()];
    for (k, &i) in members.iter().enumerate() {
        local[i as usize] = k as u32;
    }
    let system = ClassSystem::new(csr, members, &local);
    let aggregation: Vec<Aggregation> = groups
        .iter()
        .map(|g| Aggregation::new(csr, members, &local, g))
        .collect();
    let mut pi = vec![1.0 / size as f64; size];
    let mut previous = pi.clone();
    let mut change = f64::INFINITY;
    let mut sweeps = 0;
    while sweeps < limits.max_sweeps {
        sweeps += 1;
        for a in &aggregation {
            a.correct(&mut pi, limits);
        }
        system.sweep(&mut pi);
        change = 0.0;
        for (p, q) in pi.iter().zip(previous.iter_mut()) {
            change += (*p - *q).abs();
            *q = *p;
        }
        if change < limits.tolerance {
            break;
        }
    }
    let residual = residual(csr, members, &local, &pi);
    tracing::debug!(
        sweeps,
        states = size,
        change,
        residual,
        "stationary distribution solved"
    );
    if change >= limits.tolerance || residual > limits.max_residual {
        return Err(TunerError::NotConverged {
            sweeps,
            states: size,
            change: change.max(residual),
        });
    }
    Ok(pi)
}

/// `|pi P - pi|_1` over a closed class.
fn residual(csr: Csr<'_>, members: &[u32], local: &[u32], pi: &[f64]) -> f64 {
    let mut flow = vec![0.0; members.len()];
    for (k, &i) in members.iter().enumerate() {
        for (j, p) in csr.row(i as usize) {
            flow[local[j] as usize] += pi[k] * p;
        }
    }
    flow.iter().zip(pi).map(|(f, p)| (f - p).abs()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Owned {
        row_start: Vec<usize>,
        target: Vec<u32>,
        prob: Vec<f64>,
    }
    impl Owned {
        fn from_rows(rows: &[&[(u32, f64)]]) -> Self {
            let mut o = Owned {
                row_start: vec![0],
                target: vec![],
                prob: vec![],
            };
            for row in rows {
                for &(j, p) in *row {
                    o.target.push(j);
                    o.prob.push(p);
                }
                o.row_start.push(o.target.len());
            }
            o
        }
        fn csr(&self) -> Csr<'_> {
            Csr {
                row_start: &self.row_start,
                target: &self.target,
                prob: &self.prob,
            }
        }
    }

    #[test]
    fn two_state_chain_matches_closed_form() {
        // pi_0 = q / (p + q) for P = [[1-p, p], [q, 1-q]].
        let (p, q) = (0.3, 0.1);
        let chain = Owned::from_rows(&[&[(0, 1.0 - p), (1, p)], &[(0, q), (1, 1.0 - q)]]);
        let classes = recurrent_classes(chain.csr(), &[], SolverLimits::default()).unwrap();
        assert_eq!(classes.len(), 1);
        assert!((classes[0].pi[0] - q / (p + q)).abs() < 1e-12);
    }

    #[test]
    fn periodic_cycle_converges() {
        let chain = Owned::from_rows(&[&[(1, 1.0)], &[(2, 1.0)], &[(0, 1.0)]]);
        let classes = recurrent_classes(chain.csr(), &[], SolverLimits::default()).unwrap();
        for p in &classes[0].pi {
            assert!((p - 1.0 / 3.0).abs() < 1e-12);
        }
    }

    #[test]
    fn transient_states_and_two_closed_classes_are_weighted() {
        // 0 -> 1 (0.25) or 2 (0.75); 1 and 2 absorbing; 0 transient.
        let chain = Owned::from_rows(&[&[(1, 0.25), (2, 0.75)], &[(1, 1.0)], &[(2, 1.0)]]);
        let mut classes = recurrent_classes(chain.csr(), &[], SolverLimits::default()).unwrap();
        classes.sort_by_key(|c| c.members[0]);
        assert_eq!(classes.len(), 2);
        assert!((classes[0].weight - 0.25).abs() < 1e-12);
        assert_eq!(classes[0].members, vec![1]);
        assert!((classes[1].weight - 0.75).abs() < 1e-12);
    }

    #[test]
    fn transient_prefix_gets_no_mass() {
        // 0 -> 1 -> {2 <-> 3}.
        let chain =
            Owned::from_rows(&[&[(1, 1.0)], &[(2, 1.0)], &[(3, 1.0)], &[(2, 0.5), (3, 0.5)]]);
        let classes = recurrent_classes(chain.csr(), &[], SolverLimits::default()).unwrap();
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0].members, vec![2, 3]);
        assert!((classes[0].pi[0] - 1.0 / 3.0).abs() < 1e-12);
    }
}
