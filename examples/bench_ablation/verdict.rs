//! Verdicts of the ablation page: a ratio over seeds against its target.

/// A ratio of two throughputs measured seed by seed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    /// Mean over the seeds.
    pub mean: f64,
    /// Half the range over the seeds.
    pub spread: f64,
}

/// `long[i] / short[i]` per seed (`None` when the lengths differ, a list
/// is empty or a short-cap throughput is 0).
pub fn per_seed_ratio(long: &[f64], short: &[f64]) -> Option<Ratio> {
    if long.len() != short.len() || long.is_empty() || short.iter().any(|&s| s <= 0.0) {
        return None;
    }
    let r: Vec<f64> = long.iter().zip(short).map(|(l, s)| l / s).collect();
    let (lo, hi) = r
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    Some(Ratio {
        mean: r.iter().sum::<f64>() / r.len() as f64,
        spread: (hi - lo) / 2.0,
    })
}

/// "met" when `value >= min` (and `<= max` if given), else "not met".
pub fn within(value: f64, min: f64, max: Option<f64>) -> &'static str {
    if value >= min && max.is_none_or(|m| value <= m) {
        "met"
    } else {
        "not met"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_taken_seed_by_seed() {
        let r = per_seed_ratio(&[50.0, 30.0], &[100.0, 100.0]).unwrap();
        assert!((r.mean - 0.4).abs() < 1e-12 && (r.spread - 0.1).abs() < 1e-12);
        assert_eq!(per_seed_ratio(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(per_seed_ratio(&[], &[]), None);
        assert_eq!(per_seed_ratio(&[1.0], &[0.0]), None);
    }

    #[test]
    fn verdicts_follow_the_bounds() {
        assert_eq!(within(0.6, 0.58, Some(0.85)), "met");
        assert_eq!(within(0.9, 0.58, Some(0.85)), "not met");
        assert_eq!(within(0.5, 0.58, None), "not met");
        assert_eq!(within(0.5, 0.5, None), "met");
    }
}
