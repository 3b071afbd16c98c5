//! Finding B*: the feasible threshold vector with the highest throughput.
//!
//! Two strategies share one evaluator (exact chain or simulation):
//! - exhaustive: every vector of `{1..N}^M`;
//! - local: a pattern search on the integer grid. It starts from a hint (B* of the previous
//!   concurrency) or from the best point of a coarse grid (quarters of N), falling back to
//!   all-ones (never deadlocks) when nothing there is feasible. It probes `±step` on each
//!   coordinate, then, if none improves, each pair of coordinates in opposite directions;
//!   moves to the best improving probe, and halves the step when nothing improves. Every
//!   probe is exact; only the set of probed vectors is smaller than `N^M`, so the result is a
//!   local optimum of the grid.

use super::error::TunerError;
use super::inputs::TunerInputs;
use super::predict::{predict_with, Prediction, SolveOptions};
use super::simulate::{simulate, SimulationOptions, SimulationReport};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::HashMap;
use std::time::Instant;

/// Something a search can rank: an exact prediction or a simulation.
pub trait Scored: Clone + Send {
    /// Throughput in tokens per second.
    fn throughput_tok_s(&self) -> f64;
    /// The evaluated threshold vector.
    fn thresholds(&self) -> &[usize];
    /// Reachable states of the exact chain behind the evaluation (0 for a simulation).
    fn states(&self) -> usize {
        0
    }
}

impl Scored for Prediction {
    fn throughput_tok_s(&self) -> f64 {
        self.throughput_tok_s
    }
    fn thresholds(&self) -> &[usize] {
        &self.thresholds
    }
    fn states(&self) -> usize {
        self.states
    }
}

impl Scored for SimulationReport {
    fn throughput_tok_s(&self) -> f64 {
        self.throughput_tok_s
    }
    fn thresholds(&self) -> &[usize] {
        &self.thresholds
    }
}

/// How to enumerate candidate vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SearchStrategy {
    /// Exhaustive when `N^M` is at most the exhaustive limit, local otherwise.
    Auto,
    /// Every vector of `{1..N}^M`.
    Exhaustive,
    /// Pattern search (far fewer vectors, each evaluated exactly).
    Local,
}

/// Options of a search.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    /// Strategy.
    pub strategy: SearchStrategy,
    /// Largest `N^M` that [`SearchStrategy::Auto`] searches exhaustively; `None`: 256 with
    /// two models (N <= 16), 64 with three or more (N <= 4 for three), whose chains are two
    /// orders of magnitude larger.
    pub exhaustive_limit: Option<usize>,
    /// Options of the exact solver.
    pub solve: SolveOptions,
    /// Worker threads evaluating vectors.
    pub threads: usize,
    /// Keep every feasible evaluation in [`TuneResult::all`].
    pub keep_all: bool,
    /// Draw a progress bar on stderr.
    pub progress: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            strategy: SearchStrategy::Auto,
            exhaustive_limit: None,
            solve: SolveOptions::default(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            keep_all: false,
            progress: false,
        }
    }
}

/// Outcome of a search at one concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct TuneResult<T: Scored> {
    /// Active requests N.
    pub concurrency: usize,
    /// The best feasible vector found and its evaluation.
    pub best: T,
    /// The second best evaluated feasible vector.
    pub runner_up: Option<T>,
    /// Strategy actually used (exhaustive or local).
    pub strategy: SearchStrategy,
    /// Vectors evaluated.
    pub evaluated: usize,
    /// Evaluated vectors that deadlock.
    pub infeasible: usize,
    /// Evaluated vectors skipped: state space over the limit, or solver not converged.
    pub skipped: usize,
    /// Reachable states summed over the feasible evaluated vectors (exact chain only).
    pub states_total: usize,
    /// Largest reachable state space among the feasible evaluated vectors.
    pub states_max: usize,
    /// Every feasible evaluation, best first (only with `keep_all`).
    pub all: Vec<T>,
    /// Wall time of the search in seconds.
    pub elapsed_s: f64,
}

/// B* of the exact chain with default options.
pub fn best(inputs: &TunerInputs) -> Result<TuneResult<Prediction>, TunerError> {
    best_with(inputs, &SearchOptions::default(), None)
}

/// B* of the exact chain; `hint` (e.g. B* at N - 1) seeds the local search.
pub fn best_with(
    inputs: &TunerInputs,
    options: &SearchOptions,
    hint: Option<&[usize]>,
) -> Result<TuneResult<Prediction>, TunerError> {
    let solve = options.solve;
    search(inputs, options, hint, |thresholds| {
        predict_with(inputs, thresholds, &solve)
    })
}

/// B* by simulation (for gap distributions the chain cannot express).
pub fn best_by_simulation(
    inputs: &TunerInputs,
    options: &SearchOptions,
    simulation: &SimulationOptions,
    hint: Option<&[usize]>,
) -> Result<TuneResult<SimulationReport>, TunerError> {
    search(inputs, options, hint, |thresholds| {
        simulate(inputs, thresholds, simulation)
    })
}

/// B* for each concurrency of `concurrencies` (ascending), each seeded with the previous B*.
pub fn best_table(
    inputs: &TunerInputs,
    concurrencies: &[usize],
    options: &SearchOptions,
) -> Result<Vec<TuneResult<Prediction>>, TunerError> {
    let mut results: Vec<TuneResult<Prediction>> = Vec::with_capacity(concurrencies.len());
    for &n in concurrencies {
        let at_n = inputs.with_concurrency(n)?;
        let hint = results.last().map(|r| r.best.thresholds.clone());
        results.push(best_with(&at_n, options, hint.as_deref())?);
    }
    Ok(results)
}

/// Memo of evaluated vectors: `None` for infeasible or skipped ones.
struct Memo<T> {
    seen: HashMap<Vec<usize>, Option<T>>,
    infeasible: usize,
    skipped: usize,
}

impl<T: Scored> Memo<T> {
    fn best_two(&self) -> (Option<&T>, Option<&T>) {
        let mut feasible: Vec<&T> = self.seen.values().flatten().collect();
        feasible.sort_by(|a, b| rank(*b, *a));
        (feasible.first().copied(), feasible.get(1).copied())
    }
}

/// Orders by throughput, then prefers smaller thresholds (shorter waits) on exact ties.
fn rank<T: Scored>(a: &T, b: &T) -> std::cmp::Ordering {
    a.throughput_tok_s()
        .total_cmp(&b.throughput_tok_s())
        .then_with(|| b.thresholds().cmp(a.thresholds()))
}

fn search<T, F>(
    inputs: &TunerInputs,
    options: &SearchOptions,
    hint: Option<&[usize]>,
    evaluate: F,
) -> Result<TuneResult<T>, TunerError>
where
    T: Scored,
    F: Fn(&[usize]) -> Result<T, TunerError> + Sync,
{
    let started = Instant::now();
    let n = inputs.concurrency();
    let m = inputs.models();
    let grid = (n as f64).powi(m as i32);
    let limit = options
        .exhaustive_limit
        .unwrap_or(if m <= 2 { 256 } else { 64 });
    let strategy = match options.strategy {
        SearchStrategy::Auto if grid <= limit as f64 => SearchStrategy::Exhaustive,
        SearchStrategy::Auto => SearchStrategy::Local,
        other => other,
    };
    let bar = progress_bar(options.progress, strategy, grid, n);
    let mut memo = Memo {
        seen: HashMap::new(),
        infeasible: 0,
        skipped: 0,
    };
    match strategy {
        SearchStrategy::Exhaustive => {
            let all: Vec<Vec<usize>> = grid_vectors(n, m);
            evaluate_batch(&all, &evaluate, options.threads, &mut memo, &bar)?;
        }
        _ => local_search(n, m, hint, &evaluate, options.threads, &mut memo, &bar)?,
    }
    bar.finish_and_clear();
    let (best, runner_up) = memo.best_two();
    let best = best.cloned().ok_or_else(|| TunerError::InvalidInput {
        field: "thresholds".into(),
        reason: format!(
            "no feasible vector at concurrency {n}: {} infeasible, {} skipped (state limit or no convergence)",
            memo.infeasible, memo.skipped
        ),
    })?;
    let runner_up = runner_up.cloned();
    let states: Vec<usize> = memo.seen.values().flatten().map(|t| t.states()).collect();
    let mut all: Vec<T> = Vec::new();
    if options.keep_all {
        all = memo.seen.values().flatten().cloned().collect();
        all.sort_by(|a, b| rank(b, a));
    }
    Ok(TuneResult {
        concurrency: n,
        best,
        runner_up,
        strategy,
        evaluated: memo.seen.len(),
        infeasible: memo.infeasible,
        skipped: memo.skipped,
        states_total: states.iter().sum(),
        states_max: states.iter().copied().max().unwrap_or(0),
        all,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

fn progress_bar(enabled: bool, strategy: SearchStrategy, grid: f64, n: usize) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = if strategy == SearchStrategy::Exhaustive {
        ProgressBar::new(grid as u64)
    } else {
        ProgressBar::new_spinner()
    };
    let template = if strategy == SearchStrategy::Exhaustive {
        "{msg} [{bar:30}] {pos}/{len} vectors {elapsed}"
    } else {
        "{msg} {spinner} {pos} vectors {elapsed}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_message(format!("N={n}"));
    bar
}

/// Every vector of `{1..n}^m`, lexicographic.
fn grid_vectors(n: usize, m: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut v = vec![1usize; m];
    loop {
        out.push(v.clone());
        let mut k = m;
        loop {
            if k == 0 {
                return out;
            }
            k -= 1;
            if v[k] < n {
                v[k] += 1;
                break;
            }
            v[k] = 1;
        }
    }
}

/// Evaluates the vectors not yet in `memo`, on `threads` workers.
fn evaluate_batch<T, F>(
    vectors: &[Vec<usize>],
    evaluate: &F,
    threads: usize,
    memo: &mut Memo<T>,
    bar: &ProgressBar,
) -> Result<(), TunerError>
where
    T: Scored,
    F: Fn(&[usize]) -> Result<T, TunerError> + Sync,
{
    let mut todo: Vec<&Vec<usize>> = vectors
        .iter()
        .filter(|v| !memo.seen.contains_key(*v))
        .collect();
    todo.dedup();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = threads.clamp(1, todo.len().max(1));
    let results: Vec<Vec<(usize, Result<T, TunerError>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(v) = todo.get(i) else { break };
                        mine.push((i, evaluate(v)));
                        bar.inc(1);
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut flat: Vec<(usize, Result<T, TunerError>)> = results.into_iter().flatten().collect();
    if flat.len() != todo.len() {
        return Err(TunerError::Unsupported {
            what: "a search worker thread panicked".into(),
        });
    }
    flat.sort_by_key(|r| r.0);
    for (i, result) in flat {
        let entry = match result {
            Ok(t) => Some(t),
            Err(TunerError::Infeasible { .. }) => {
                memo.infeasible += 1;
                None
            }
            Err(e @ (TunerError::StateSpaceTooLarge { .. } | TunerError::NotConverged { .. })) => {
                tracing::warn!("skipped: {e}");
                memo.skipped += 1;
                None
            }
            Err(e) => return Err(e),
        };
        memo.seen.insert(todo[i].clone(), entry);
    }
    Ok(())
}

fn local_search<T, F>(
    n: usize,
    m: usize,
    hint: Option<&[usize]>,
    evaluate: &F,
    threads: usize,
    memo: &mut Memo<T>,
    bar: &ProgressBar,
) -> Result<(), TunerError>
where
    T: Scored,
    F: Fn(&[usize]) -> Result<T, TunerError> + Sync,
{
    // Start at the hint, which is close to the optimum. Without one, start at the best point
    // of a coarse grid (quarters of N): small thresholds have the largest chains, so walking
    // in from all-ones would be slow. All-ones (never deadlocks) is the last resort.
    let hinted = hint.filter(|h| h.len() == m);
    let mut step = (n / 16).max(1);
    if let Some(h) = hinted {
        let start: Vec<usize> = h.iter().map(|&b| b.clamp(1, n)).collect();
        evaluate_batch(&[start], evaluate, threads, memo, bar)?;
    } else if n >= 8 {
        let mut levels: Vec<usize> = (1..=3).map(|k| (n * k / 4).max(1)).collect();
        levels.dedup();
        let coarse: Vec<Vec<usize>> = grid_vectors(levels.len(), m)
            .into_iter()
            .map(|v| v.iter().map(|&i| levels[i - 1]).collect())
            .collect();
        evaluate_batch(&coarse, evaluate, threads, memo, bar)?;
        step = (n / 8).max(1);
    }
    if memo.best_two().0.is_none() {
        evaluate_batch(&[vec![1usize; m]], evaluate, threads, memo, bar)?;
    }
    let Some(mut current) = memo.best_two().0.map(|t| t.thresholds().to_vec()) else {
        return Ok(());
    };
    loop {
        // Single-coordinate probes first; pair probes only when none of those improves.
        let mut improved = false;
        for pairs in [false, true] {
            let probes = neighbours(&current, step, n, pairs);
            evaluate_batch(&probes, evaluate, threads, memo, bar)?;
            let current_value = memo
                .seen
                .get(&current)
                .and_then(|t| t.as_ref())
                .map(|t| t.throughput_tok_s());
            let best_probe = probes
                .iter()
                .filter_map(|p| memo.seen.get(p).and_then(|t| t.as_ref()))
                .max_by(|a, b| rank(*a, *b));
            if let (Some(probe), Some(value)) = (best_probe, current_value) {
                if probe.throughput_tok_s() > value {
                    current = probe.thresholds().to_vec();
                    improved = true;
                    break;
                }
            }
        }
        if !improved {
            if step == 1 {
                return Ok(());
            }
            step /= 2;
        }
    }
}

/// Probes at distance `step`: each coordinate up and down, or (`pairs`) each pair of
/// coordinates in opposite directions.
fn neighbours(current: &[usize], step: usize, n: usize, pairs: bool) -> Vec<Vec<usize>> {
    let m = current.len();
    let shift = |v: &mut Vec<usize>, k: usize, up: bool| {
        v[k] = if up {
            (v[k] + step).min(n)
        } else {
            v[k].saturating_sub(step).max(1)
        };
    };
    let mut out = Vec::new();
    for k in 0..m {
        for up in [true, false] {
            if !pairs {
                let mut v = current.to_vec();
                shift(&mut v, k, up);
                out.push(v);
            }
        }
        for l in (k + 1..m).filter(|_| pairs) {
            for up in [true, false] {
                let mut v = current.to_vec();
                shift(&mut v, k, up);
                shift(&mut v, l, !up);
                out.push(v);
            }
        }
    }
    out.retain(|v| v.as_slice() != current);
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::tests::r2r;

    #[test]
    fn grid_covers_every_vector_once() {
        let g = grid_vectors(3, 2);
        assert_eq!(g.len(), 9);
        assert_eq!(g[0], vec![1, 1]);
        assert_eq!(g[8], vec![3, 3]);
        let mut sorted = g.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 9);
    }

    #[test]
    fn exhaustive_search_returns_the_maximum_and_counts_deadlocks() {
        let inputs = r2r(4);
        let options = SearchOptions {
            strategy: SearchStrategy::Exhaustive,
            keep_all: true,
            threads: 2,
            ..SearchOptions::default()
        };
        let result = best_with(&inputs, &options, None).unwrap();
        assert_eq!(result.evaluated, 16);
        assert_eq!(result.all.len() + result.infeasible, 16);
        assert!(result.infeasible > 0);
        let max = result
            .all
            .iter()
            .map(|p| p.throughput_tok_s)
            .fold(f64::MIN, f64::max);
        assert_eq!(result.best.throughput_tok_s, max);
        let runner_up = result.runner_up.as_ref().unwrap();
        assert!(runner_up.throughput_tok_s <= max);
        assert_eq!(runner_up.thresholds, result.all[1].thresholds);
        // Infeasible vectors are never ranked.
        for p in &result.all {
            assert!(crate::predict::predict(&inputs, &p.thresholds).is_ok());
        }
    }

    #[test]
    fn local_search_finds_exhaustive_optimum_with_fewer_evaluations() {
        let exhaustive = SearchOptions {
            strategy: SearchStrategy::Exhaustive,
            ..SearchOptions::default()
        };
        let local = SearchOptions {
            strategy: SearchStrategy::Local,
            ..SearchOptions::default()
        };
        let table = best_table(&r2r(1), &(1..=16).collect::<Vec<_>>(), &local).unwrap();
        for (n, found) in (1..=16).zip(&table) {
            let truth = best_with(&r2r(n), &exhaustive, None).unwrap();
            assert_eq!(found.best.thresholds, truth.best.thresholds, "N={n}");
            if n >= 8 {
                assert!(
                    found.evaluated * 4 < n * n,
                    "N={n}: {} evaluations",
                    found.evaluated
                );
            }
            // Without a hint too (coarse-grid start).
            let cold = best_with(&r2r(n), &local, None).unwrap();
            assert_eq!(cold.best.thresholds, truth.best.thresholds, "N={n} cold");
        }
    }

    #[test]
    fn neighbours_stay_on_the_grid() {
        let single = neighbours(&[1, 4], 2, 4, false);
        let pairs = neighbours(&[1, 4], 2, 4, true);
        for probes in [&single, &pairs] {
            assert!(probes
                .iter()
                .all(|v| v.iter().all(|&b| (1..=4).contains(&b))));
            assert!(!probes.contains(&vec![1, 4]));
        }
        assert!(single.contains(&vec![3, 4]));
        assert!(single.contains(&vec![1, 2]));
        assert_eq!(pairs, vec![vec![3, 2]]);
        assert_eq!(neighbours(&[2, 2, 2], 1, 4, true).len(), 6);
    }
}
