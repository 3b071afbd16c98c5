//! The tuner's inputs: step latencies, routing matrix, credit matrix, slot width, concurrency.
//!
//! Everything is validated once, in [`TunerInputs::new`], so the solvers can index freely.

use super::error::TunerError;
use serde::{Deserialize, Serialize};

/// Row sums of the routing matrix may differ from 1 by this much (measured rates are rounded).
const ROW_SUM_TOLERANCE: f64 = 1e-6;

/// Step latency of one model as a function of the batch size, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StepLatency {
    /// The same latency at every batch size (the paper's model).
    Constant(f64),
    /// Measured `(batch size, ms)` points, sorted by batch size. Between points the latency is
    /// interpolated linearly; beyond the ends it is held at the nearest point, because
    /// extrapolating a measurement invents data.
    Table(Vec<(usize, f64)>),
}

impl StepLatency {
    /// Latency in ms of a step with `batch` requests.
    pub fn at(&self, batch: usize) -> f64 {
        match self {
            StepLatency::Constant(ms) => *ms,
            StepLatency::Table(points) => interpolate(points, batch),
        }
    }

    fn validate(&self, model: usize) -> Result<(), TunerError> {
        let field = format!("latency[{model}]");
        let check_ms = |ms: f64, at: &str| -> Result<(), TunerError> {
            if !ms.is_finite() || ms <= 0.0 {
                return Err(TunerError::InvalidInput {
                    field: field.clone(),
                    reason: format!("step latency{at} must be a positive number of ms, got {ms}"),
                });
            }
            Ok(())
        };
        match self {
            StepLatency::Constant(ms) => check_ms(*ms, ""),
            StepLatency::Table(points) => {
                if points.is_empty() {
                    return Err(TunerError::InvalidInput {
                        field,
                        reason: "latency table has no points".into(),
                    });
                }
                let mut previous = 0usize;
                for &(batch, ms) in points {
                    if batch <= previous {
                        return Err(TunerError::InvalidInput {
                            field,
                            reason: format!(
                                "batch sizes must be >= 1 and strictly increasing, got {batch} after {previous}"
                            ),
                        });
                    }
                    check_ms(ms, &format!(" at batch {batch}"))?;
                    previous = batch;
                }
                Ok(())
            }
        }
    }
}

fn interpolate(points: &[(usize, f64)], batch: usize) -> f64 {
    let Some(&(first_batch, first_ms)) = points.first() else {
        return f64::NAN;
    };
    if batch <= first_batch {
        return first_ms;
    }
    for pair in points.windows(2) {
        let ((b0, l0), (b1, l1)) = (pair[0], pair[1]);
        if batch <= b1 {
            let t = (batch - b0) as f64 / (b1 - b0) as f64;
            return l0 + t * (l1 - l0);
        }
    }
    points.last().map_or(f64::NAN, |p| p.1)
}

/// Validated inputs of the delayed-batching model for one concurrency.
#[derive(Debug, Clone, PartialEq)]
pub struct TunerInputs {
    names: Vec<String>,
    latency: Vec<StepLatency>,
    transition: Vec<Vec<f64>>,
    credit: Vec<Vec<f64>>,
    delta_ms: f64,
    concurrency: usize,
    entry_model: usize,
    /// `slots[m][b]`: step length of model m with batch b, in slots (index 0 unused).
    slots: Vec<Vec<u32>>,
}

impl TunerInputs {
    /// Validates and builds the inputs.
    ///
    /// `transition[m][j]` is the probability that a request leaving a step of model m goes to
    /// model j (`j == m`: it stays); `credit[m][j]` the output tokens that move counts.
    /// Requests enter at model 0 (see [`TunerInputs::with_entry_model`]).
    pub fn new(
        latency: Vec<StepLatency>,
        transition: Vec<Vec<f64>>,
        credit: Vec<Vec<f64>>,
        delta_ms: f64,
        concurrency: usize,
    ) -> Result<Self, TunerError> {
        let models = latency.len();
        if models == 0 {
            return Err(TunerError::InvalidInput {
                field: "latency".into(),
                reason: "at least one model is needed".into(),
            });
        }
        for (m, l) in latency.iter().enumerate() {
            l.validate(m)?;
        }
        check_square("transition", &transition, models)?;
        check_square("credit", &credit, models)?;
        for (m, row) in transition.iter().enumerate() {
            for (j, &p) in row.iter().enumerate() {
                if !p.is_finite() || !(0.0..=1.0).contains(&p) {
                    return Err(TunerError::InvalidInput {
                        field: format!("transition[{m}][{j}]"),
                        reason: format!("a probability must lie in [0, 1], got {p}"),
                    });
                }
            }
            let sum: f64 = row.iter().sum();
            if (sum - 1.0).abs() > ROW_SUM_TOLERANCE {
                return Err(TunerError::InvalidInput {
                    field: format!("transition[{m}]"),
                    reason: format!("row must sum to 1, sums to {sum}"),
                });
            }
        }
        for (m, row) in credit.iter().enumerate() {
            for (j, &c) in row.iter().enumerate() {
                if !c.is_finite() || c < 0.0 {
                    return Err(TunerError::InvalidInput {
                        field: format!("credit[{m}][{j}]"),
                        reason: format!("credit must be a finite number >= 0, got {c}"),
                    });
                }
            }
        }
        if !delta_ms.is_finite() || delta_ms <= 0.0 {
            return Err(TunerError::InvalidInput {
                field: "delta_ms".into(),
                reason: format!("slot width must be a positive number of ms, got {delta_ms}"),
            });
        }
        let names = (0..models).map(|m| format!("model{m}")).collect();
        let mut inputs = TunerInputs {
            names,
            latency,
            transition,
            credit,
            delta_ms,
            concurrency: 0,
            entry_model: 0,
            slots: Vec::new(),
        };
        inputs.warn_on_inexact_slots();
        inputs.set_concurrency(concurrency)?;
        Ok(inputs)
    }

    /// Names the models (for reports and YAML); `names.len()` must equal the model count.
    pub fn with_names(mut self, names: Vec<String>) -> Result<Self, TunerError> {
        if names.len() != self.models() {
            return Err(TunerError::InvalidInput {
                field: "names".into(),
                reason: format!("{} names for {} models", names.len(), self.models()),
            });
        }
        self.names = names;
        Ok(self)
    }

    /// Sets the model at which every request starts (default 0, the entry model).
    pub fn with_entry_model(mut self, entry_model: usize) -> Result<Self, TunerError> {
        if entry_model >= self.models() {
            return Err(TunerError::InvalidInput {
                field: "entry_model".into(),
                reason: format!(
                    "model {entry_model} does not exist ({} models)",
                    self.models()
                ),
            });
        }
        self.entry_model = entry_model;
        Ok(self)
    }

    /// The same inputs at another concurrency.
    pub fn with_concurrency(&self, concurrency: usize) -> Result<Self, TunerError> {
        let mut inputs = self.clone();
        inputs.set_concurrency(concurrency)?;
        Ok(inputs)
    }

    fn set_concurrency(&mut self, concurrency: usize) -> Result<(), TunerError> {
        if concurrency == 0 {
            return Err(TunerError::InvalidInput {
                field: "concurrency".into(),
                reason: "at least one active request is needed".into(),
            });
        }
        let mut slots = Vec::with_capacity(self.models());
        for (m, latency) in self.latency.iter().enumerate() {
            let mut row = vec![0u32; concurrency + 1];
            for (batch, slot) in row.iter_mut().enumerate().skip(1) {
                let ms = latency.at(batch);
                let k = (ms / self.delta_ms).round();
                if k < 1.0 || k > f64::from(u32::MAX) {
                    return Err(TunerError::InvalidInput {
                        field: format!("latency[{m}]"),
                        reason: format!(
                            "{ms} ms at batch {batch} rounds to {k} slots of {} ms; need at least 1",
                            self.delta_ms
                        ),
                    });
                }
                *slot = k as u32;
            }
            slots.push(row);
        }
        self.slots = slots;
        self.concurrency = concurrency;
        Ok(())
    }

    fn warn_on_inexact_slots(&self) {
        for (m, latency) in self.latency.iter().enumerate() {
            let points: Vec<f64> = match latency {
                StepLatency::Constant(ms) => vec![*ms],
                StepLatency::Table(points) => points.iter().map(|p| p.1).collect(),
            };
            for ms in points {
                let exact = ms / self.delta_ms;
                if (exact - exact.round()).abs() > 1e-6 * exact.max(1.0) {
                    tracing::warn!(
                        model = m,
                        latency_ms = ms,
                        delta_ms = self.delta_ms,
                        "latency is not a whole number of slots; rounded to {}",
                        exact.round()
                    );
                }
            }
        }
    }

    /// Number of models M.
    pub fn models(&self) -> usize {
        self.latency.len()
    }
    /// Number of active requests N.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }
    /// Slot width in ms.
    pub fn delta_ms(&self) -> f64 {
        self.delta_ms
    }
    /// Model names, in model order.
    pub fn names(&self) -> &[String] {
        &self.names
    }
    /// Step latency of each model.
    pub fn latency(&self) -> &[StepLatency] {
        &self.latency
    }
    /// Routing matrix P.
    pub fn transition(&self) -> &[Vec<f64>] {
        &self.transition
    }
    /// Credit matrix C.
    pub fn credit(&self) -> &[Vec<f64>] {
        &self.credit
    }
    /// Model where requests start.
    pub fn entry_model(&self) -> usize {
        self.entry_model
    }
    /// Step length of model `model` with `batch` requests, in slots.
    ///
    /// # Panics
    /// If `model >= M` or `batch > N` (a caller bug, not bad input: the solvers only ask for
    /// batches they formed from N requests).
    pub fn slots(&self, model: usize, batch: usize) -> u32 {
        self.slots[model][batch]
    }
    /// Expected output tokens one request earns from one step of `model`: sum_j P[m][j] C[m][j].
    pub fn mean_credit(&self, model: usize) -> f64 {
        self.transition[model]
            .iter()
            .zip(&self.credit[model])
            .map(|(p, c)| p * c)
            .sum()
    }
    /// Checks that a threshold vector has one entry in `1..=N` per model.
    pub fn check_thresholds(&self, thresholds: &[usize]) -> Result<(), TunerError> {
        if thresholds.len() != self.models() {
            return Err(TunerError::InvalidInput {
                field: "thresholds".into(),
                reason: format!(
                    "{} thresholds for {} models",
                    thresholds.len(),
                    self.models()
                ),
            });
        }
        for (m, &b) in thresholds.iter().enumerate() {
            if b == 0 || b > self.concurrency {
                return Err(TunerError::InvalidInput {
                    field: format!("thresholds[{m}]"),
                    reason: format!(
                        "must lie in 1..={} (the concurrency), got {b}",
                        self.concurrency
                    ),
                });
            }
        }
        Ok(())
    }
}

fn check_square(field: &str, matrix: &[Vec<f64>], models: usize) -> Result<(), TunerError> {
    if matrix.len() != models {
        return Err(TunerError::InvalidInput {
            field: field.into(),
            reason: format!("{} rows for {models} models", matrix.len()),
        });
    }
    for (m, row) in matrix.iter().enumerate() {
        if row.len() != models {
            return Err(TunerError::InvalidInput {
                field: format!("{field}[{m}]"),
                reason: format!("{} columns for {models} models", row.len()),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The reference R2R setting of the issue at concurrency `n`.
    pub(crate) fn r2r(n: usize) -> TunerInputs {
        TunerInputs::new(
            vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
            vec![vec![0.65, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            n,
        )
        .unwrap()
    }

    fn field_of(err: TunerError) -> String {
        match err {
            TunerError::InvalidInput { field, .. } => field,
            other => panic!("expected InvalidInput, got {other}"),
        }
    }

    #[test]
    fn slots_round_latency_to_whole_slots() {
        let inputs = r2r(4);
        assert_eq!(inputs.slots(0, 1), 60);
        assert_eq!(inputs.slots(1, 4), 279);
        assert!((inputs.mean_credit(0) - 0.65).abs() < 1e-12);
        assert!((inputs.mean_credit(1) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn rows_not_summing_to_one_are_rejected() {
        let err = TunerInputs::new(
            vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
            vec![vec![0.6, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            4,
        )
        .unwrap_err();
        assert!(err.to_string().contains("sums to 0.95"), "{err}");
        assert_eq!(field_of(err), "transition[0]");
    }

    #[test]
    fn negative_latency_is_rejected() {
        let err = TunerInputs::new(
            vec![StepLatency::Constant(-6.0), StepLatency::Constant(27.9)],
            vec![vec![0.65, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            4,
        )
        .unwrap_err();
        assert_eq!(field_of(err), "latency[0]");
        let err = TunerInputs::new(
            vec![
                StepLatency::Constant(6.0),
                StepLatency::Table(vec![(1, 20.0), (4, -1.0)]),
            ],
            vec![vec![0.65, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            4,
        )
        .unwrap_err();
        assert!(err.to_string().contains("at batch 4"), "{err}");
    }

    #[test]
    fn mismatched_dimensions_are_rejected() {
        let err = TunerInputs::new(
            vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
            vec![vec![0.65, 0.35]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0]],
            0.1,
            4,
        )
        .unwrap_err();
        assert_eq!(field_of(err), "transition");
        let err = TunerInputs::new(
            vec![StepLatency::Constant(6.0), StepLatency::Constant(27.9)],
            vec![vec![0.65, 0.35], vec![1.0, 0.0]],
            vec![vec![1.0, 0.0], vec![1.0, 0.0, 0.0]],
            0.1,
            4,
        )
        .unwrap_err();
        assert_eq!(field_of(err), "credit[1]");
        let err = r2r(4).check_thresholds(&[1, 2, 3]).unwrap_err();
        assert_eq!(field_of(err), "thresholds");
        let err = r2r(4).check_thresholds(&[1, 5]).unwrap_err();
        assert_eq!(field_of(err), "thresholds[1]");
    }

    #[test]
    fn bad_delta_and_concurrency_are_rejected() {
        let base = r2r(4);
        let err = TunerInputs::new(
            base.latency().to_vec(),
            base.transition().to_vec(),
            base.credit().to_vec(),
            0.0,
            4,
        )
        .unwrap_err();
        assert_eq!(field_of(err), "delta_ms");
        assert_eq!(
            field_of(base.with_concurrency(0).unwrap_err()),
            "concurrency"
        );
        let err = TunerInputs::new(
            base.latency().to_vec(),
            base.transition().to_vec(),
            base.credit().to_vec(),
            100.0,
            4,
        )
        .unwrap_err();
        assert!(err.to_string().contains("rounds to 0 slots"), "{err}");
    }

    #[test]
    fn latency_table_interpolates_and_holds_ends() {
        let table = StepLatency::Table(vec![(2, 10.0), (6, 14.0)]);
        assert_eq!(table.at(1), 10.0);
        assert_eq!(table.at(2), 10.0);
        assert_eq!(table.at(4), 12.0);
        assert_eq!(table.at(6), 14.0);
        assert_eq!(table.at(9), 14.0);
        let err = StepLatency::Table(vec![(4, 1.0), (4, 2.0)])
            .validate(1)
            .unwrap_err();
        assert!(err.to_string().contains("strictly increasing"), "{err}");
    }
}
