//! Step-time models for the sim backend (and for the delayed-batching tuner):
//! how long one forward of a batch takes.

/// Why a latency model was rejected. The messages name the offending field
/// relative to `latency_ms`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LatencyError {
    /// A coefficient or table time is negative, NaN or infinite.
    #[error("{field} must be a finite number >= 0 (got {value})")]
    BadMs {
        /// `base`, `per_seq`, `per_token` or `table[i]`.
        field: String,
        /// The value given.
        value: f64,
    },
    /// `per_context` was given with a table (which depends on the batch only).
    #[error("per_context cannot be combined with table")]
    ContextOnTable,
    /// The table has no rows.
    #[error("table must have at least one [batch, ms] row")]
    EmptyTable,
    /// Table batch sizes must start at 1 or more and strictly increase.
    #[error("table[{index}]: batch sizes must be >= 1 and strictly increasing (got {batch} after {previous})")]
    Unordered {
        /// Row index.
        index: usize,
        /// This row's batch size.
        batch: usize,
        /// The previous row's batch size (0 for the first row).
        previous: usize,
    },
}

/// Milliseconds per step as a function of the batch.
#[derive(Debug, Clone, PartialEq)]
pub enum LatencyModel {
    /// `base + per_seq * batch + per_token * new_tokens + per_context * context_tokens`.
    Linear {
        /// Fixed cost of a step.
        base: f64,
        /// Cost per sequence in the batch.
        per_seq: f64,
        /// Cost per new token in the batch (prefill chunks cost more).
        per_token: f64,
        /// Cost per token of context the step attends over, summed over the
        /// batch (each sequence's KV is read once per step, so long answers
        /// make every step slower).
        per_context: f64,
    },
    /// Measured `(batch, ms)` points; linear interpolation between them,
    /// clamped to the first and last point outside the range.
    Table(Vec<(usize, f64)>),
}

impl LatencyModel {
    /// A validated linear model.
    pub fn linear(base: f64, per_seq: f64, per_token: f64) -> Result<Self, LatencyError> {
        for (field, value) in [
            ("base", base),
            ("per_seq", per_seq),
            ("per_token", per_token),
        ] {
            check_ms(field.to_string(), value)?;
        }
        Ok(Self::Linear {
            base,
            per_seq,
            per_token,
            per_context: 0.0,
        })
    }

    /// The same model with a cost per context token (see
    /// [`LatencyModel::Linear`]); a table model takes none and is returned as is
    /// only when `per_context` is 0.
    pub fn with_per_context(self, per_context: f64) -> Result<Self, LatencyError> {
        check_ms("per_context".to_string(), per_context)?;
        match self {
            Self::Linear {
                base,
                per_seq,
                per_token,
                ..
            } => Ok(Self::Linear {
                base,
                per_seq,
                per_token,
                per_context,
            }),
            Self::Table(_) if per_context == 0.0 => Ok(self),
            Self::Table(_) => Err(LatencyError::ContextOnTable),
        }
    }

    /// A validated table model (batch sizes >= 1, strictly increasing).
    pub fn table(points: Vec<(usize, f64)>) -> Result<Self, LatencyError> {
        if points.is_empty() {
            return Err(LatencyError::EmptyTable);
        }
        let mut previous = 0;
        for (index, &(batch, ms)) in points.iter().enumerate() {
            if batch <= previous {
                return Err(LatencyError::Unordered {
                    index,
                    batch,
                    previous,
                });
            }
            check_ms(format!("table[{index}]"), ms)?;
            previous = batch;
        }
        Ok(Self::Table(points))
    }

    /// Milliseconds one step takes with `batch` sequences bringing
    /// `new_tokens` tokens in all, with no context before them. The table
    /// form depends on `batch` only.
    pub fn step_ms(&self, batch: usize, new_tokens: usize) -> f64 {
        self.step_ms_in_context(batch, new_tokens, 0)
    }

    /// Like [`step_ms`](Self::step_ms), for a batch whose sequences span
    /// `context_tokens` positions in all (cached and new, summed over the batch).
    pub fn step_ms_in_context(
        &self,
        batch: usize,
        new_tokens: usize,
        context_tokens: usize,
    ) -> f64 {
        match self {
            Self::Linear {
                base,
                per_seq,
                per_token,
                per_context,
            } => {
                base + per_seq * batch as f64
                    + per_token * new_tokens as f64
                    + per_context * context_tokens as f64
            }
            Self::Table(points) => interpolate(points, batch),
        }
    }
}

fn check_ms(field: String, value: f64) -> Result<(), LatencyError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(LatencyError::BadMs { field, value })
    }
}

/// Piecewise-linear lookup in points sorted by batch (non-empty).
fn interpolate(points: &[(usize, f64)], batch: usize) -> f64 {
    let upper = points.partition_point(|&(b, _)| b < batch);
    if upper == 0 {
        return points[0].1;
    }
    let Some(&(b1, ms1)) = points.get(upper) else {
        return points[points.len() - 1].1;
    };
    let (b0, ms0) = points[upper - 1];
    let t = (batch - b0) as f64 / (b1 - b0) as f64;
    ms0 + t * (ms1 - ms0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_adds_its_terms() {
        let m = LatencyModel::linear(6.0, 0.5, 0.01).unwrap();
        assert_eq!(m.step_ms(1, 1), 6.0 + 0.5 + 0.01);
        assert_eq!(m.step_ms(8, 100), 6.0 + 4.0 + 1.0);
        assert_eq!(m.step_ms(0, 0), 6.0);
        let c = m.with_per_context(0.001).unwrap();
        assert_eq!(c.step_ms(1, 1), 6.0 + 0.5 + 0.01);
        assert!((c.step_ms_in_context(2, 2, 3000) - (6.0 + 1.0 + 0.02 + 3.0)).abs() < 1e-12);
    }

    #[test]
    fn table_interpolates_and_clamps() {
        let m = LatencyModel::table(vec![(1, 6.0), (8, 6.4), (64, 9.0)]).unwrap();
        assert_eq!(m.step_ms(0, 0), 6.0);
        assert_eq!(m.step_ms(1, 99), 6.0);
        assert_eq!(m.step_ms(8, 0), 6.4);
        assert!((m.step_ms(36, 0) - 7.7).abs() < 1e-12);
        assert!((m.step_ms(2, 0) - (6.0 + 0.4 / 7.0)).abs() < 1e-12);
        assert_eq!(m.step_ms(64, 0), 9.0);
        assert_eq!(m.step_ms(1000, 0), 9.0);
        let one = LatencyModel::table(vec![(4, 3.0)]).unwrap();
        assert_eq!(one.step_ms(1, 0), 3.0);
        assert_eq!(one.step_ms(100, 0), 3.0);
    }

    #[test]
    fn rejects_bad_numbers_and_orders() {
        assert_eq!(
            LatencyModel::linear(-1.0, 0.0, 0.0)
                .unwrap_err()
                .to_string(),
            "base must be a finite number >= 0 (got -1)"
        );
        assert!(LatencyModel::linear(1.0, f64::NAN, 0.0).is_err());
        assert!(LatencyModel::linear(1.0, 0.0, f64::INFINITY).is_err());
        let lin = LatencyModel::linear(1.0, 0.0, 0.0).unwrap();
        assert!(lin.clone().with_per_context(-0.1).is_err());
        let table = LatencyModel::table(vec![(1, 1.0)]).unwrap();
        assert_eq!(table.clone().with_per_context(0.0).unwrap(), table);
        assert_eq!(
            table.with_per_context(0.5).unwrap_err(),
            LatencyError::ContextOnTable
        );
        assert_eq!(
            LatencyModel::table(vec![]).unwrap_err(),
            LatencyError::EmptyTable
        );
        assert_eq!(
            LatencyModel::table(vec![(0, 1.0)]).unwrap_err(),
            LatencyError::Unordered {
                index: 0,
                batch: 0,
                previous: 0
            }
        );
        assert_eq!(
            LatencyModel::table(vec![(1, 1.0), (8, 2.0), (8, 3.0)]).unwrap_err(),
            LatencyError::Unordered {
                index: 2,
                batch: 8,
                previous: 8
            }
        );
        assert!(LatencyModel::table(vec![(1, 1.0), (2, -0.5)])
            .unwrap_err()
            .to_string()
            .starts_with("table[1] must be"));
    }
}
