//! Percentiles and the latency summary of a set of samples.

use serde::{Deserialize, Serialize};

/// The `p`-th percentile (0..=100) of `samples`, linearly interpolated
/// between closest ranks (numpy's default, which vLLM's benchmark uses).
/// `None` for no samples.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (p.clamp(0.0, 100.0) / 100.0) * (v.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (rank - lo as f64))
}

/// Mean, p50, p90, p99 and max of a latency (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Number of samples.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Spread {
    /// The summary of `samples`; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let finite: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if finite.is_empty() {
            return None;
        }
        Some(Self {
            count: finite.len(),
            mean: finite.iter().sum::<f64>() / finite.len() as f64,
            p50: percentile(&finite, 50.0)?,
            p90: percentile(&finite, 90.0)?,
            p99: percentile(&finite, 99.0)?,
            max: percentile(&finite, 100.0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        // numpy.percentile([1,2,3,4], 90) == 3.7
        assert!((percentile(&v, 90.0).unwrap() - 3.7).abs() < 1e-12);
        assert_eq!(percentile(&[5.0], 99.0), Some(5.0));
        assert_eq!(percentile(&[], 50.0), None);
        // Order of the input does not matter; NaN is ignored.
        assert_eq!(percentile(&[4.0, f64::NAN, 1.0, 3.0, 2.0], 50.0), Some(2.5));
    }

    #[test]
    fn spread_summarizes() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Spread::of(&v).unwrap();
        assert_eq!(s.count, 100);
        assert!((s.mean - 50.5).abs() < 1e-12);
        assert!((s.p50 - 50.5).abs() < 1e-12);
        assert!((s.p99 - 99.01).abs() < 1e-9);
        assert_eq!(s.max, 100.0);
        assert!(Spread::of(&[]).is_none());
    }
}
