//! Percentiles, the latency summary of a set of samples, and confidence
//! intervals of proportions.

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

/// z of a two-sided 95% interval.
pub const Z95: f64 = 1.959_963_985;

/// The Wilson score 95% interval of `k` successes in `n` trials (`(0, 1)`
/// for no trials): unlike the normal interval it stays inside [0, 1] and
/// is not empty at 0/n.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, p) = (n as f64, k as f64 / n as f64);
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Newcombe's 95% interval of the difference `k1/n1 - k2/n2` of two
/// independent proportions (method 10, from their Wilson intervals).
pub fn difference_interval(k1: usize, n1: usize, k2: usize, n2: usize) -> (f64, f64) {
    let p1 = k1 as f64 / n1.max(1) as f64;
    let p2 = k2 as f64 / n2.max(1) as f64;
    let (l1, u1) = wilson(k1, n1);
    let (l2, u2) = wilson(k2, n2);
    let d = p1 - p2;
    (
        d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt(),
        d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_intervals_match_published_values() {
        // Newcombe (1998), table I: 81/263 -> 0.2553 to 0.3662.
        let (lo, hi) = wilson(81, 263);
        assert!(
            (lo - 0.2553).abs() < 5e-4 && (hi - 0.3662).abs() < 5e-4,
            "{lo} {hi}"
        );
        // 0/10 -> 0 to 0.2775; 10/10 -> 0.7225 to 1.
        let (lo, hi) = wilson(0, 10);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 5e-4, "{hi}");
        let (lo, hi) = wilson(10, 10);
        assert!((lo - 0.7225).abs() < 5e-4 && hi == 1.0, "{lo}");
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn newcombe_difference_matches_the_published_example() {
        // Newcombe (1998), table II example (a): 56/70 - 48/80 -> 0.0524 to 0.3339.
        let (lo, hi) = difference_interval(56, 70, 48, 80);
        assert!(
            (lo - 0.0524).abs() < 5e-4 && (hi - 0.3339).abs() < 5e-4,
            "{lo} {hi}"
        );
        let (lo, hi) = difference_interval(5, 10, 5, 10);
        assert!(lo < 0.0 && hi > 0.0);
    }

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
