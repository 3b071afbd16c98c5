//! Does token-level routing beat query-level routing at equal cost? Each
//! method is a point (large-model share, quality); the token-level methods'
//! points, joined in share order, form a curve, read at the query-level
//! method's share by linear interpolation.

/// Why a query-level point cannot be compared with the token-level curve.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FrontierError {
    /// The point has no measured share.
    #[error("the query-level method reported no large-model share (was the server asked to attribute tokens with --large-model?)")]
    NoShare,
    /// Share 0 or 1: the policy routed nothing, so it is a single model.
    #[error(
        "the query-level method's large share is {0:.3}: it sent every query to one model, so it \
         is single-model serving, not a query-level baseline; set its threshold or share \
         (e.g. `query_share`) so that some queries go to each model"
    )]
    Degenerate(f64),
    /// The point sits on or outside the ends of the token-level curve.
    #[error(
        "the query-level share {share:.3} is not strictly inside the token-level curve's \
         range [{lo:.3}, {hi:.3}]: at an end point the two methods are the same single \
         model, and outside it there is no token-level point to compare with; pick a \
         query-level share between the token-level runs' shares"
    )]
    OutsideCurve {
        /// The query-level share.
        share: f64,
        /// The curve's smallest share.
        lo: f64,
        /// The curve's largest share.
        hi: f64,
    },
}

/// Distance below which two shares count as the same.
const SAME_SHARE: f64 = 5e-4;

/// Refuses a query-level share that is missing, 0 or 1.
pub fn check_query_level_share(share: Option<f64>) -> Result<f64, FrontierError> {
    let s = share.ok_or(FrontierError::NoShare)?;
    if s <= SAME_SHARE || s >= 1.0 - SAME_SHARE {
        return Err(FrontierError::Degenerate(s));
    }
    Ok(s)
}

/// Refuses a query-level share that is degenerate or not strictly inside
/// the range of the token-level `shares`.
pub fn check_inside(shares: &[f64], query_share: Option<f64>) -> Result<f64, FrontierError> {
    let s = check_query_level_share(query_share)?;
    let lo = shares.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = shares.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !(s > lo + SAME_SHARE && s < hi - SAME_SHARE) {
        return Err(FrontierError::OutsideCurve { share: s, lo, hi });
    }
    Ok(s)
}

/// One method's cost and quality.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Large-model token share (the cost).
    pub share: f64,
    /// Agreement with the large model's output (higher is better).
    pub agreement: f64,
    /// The large model's perplexity of the output (lower is better).
    pub perplexity: Option<f64>,
}

/// Linear interpolation of `(x, y)` points (sorted by x) at `x`; `None`
/// outside their range or with fewer than one point.
pub fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let first = points.first()?;
    let last = points.last()?;
    if x < first.0 - 1e-12 || x > last.0 + 1e-12 {
        return None;
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if x >= x0 - 1e-12 && x <= x1 + 1e-12 {
            if (x1 - x0).abs() < 1e-12 {
                return Some((y0 + y1) / 2.0);
            }
            return Some(y0 + (y1 - y0) * (x - x0) / (x1 - x0));
        }
    }
    Some(first.1)
}

/// One sentence comparing the token-level curve with the query-level point
/// at the query-level share, for agreement and (when every point has it)
/// perplexity. Refused (see [`check_inside`]) unless the query-level share
/// lies strictly inside the curve.
pub fn compare(token_level: &[Point], query_level: &Point) -> Result<String, FrontierError> {
    let mut pts = token_level.to_vec();
    pts.sort_by(|a, b| a.share.total_cmp(&b.share));
    let shares: Vec<f64> = pts.iter().map(|p| p.share).collect();
    let s = check_inside(&shares, Some(query_level.share))?;
    let agree: Vec<(f64, f64)> = pts.iter().map(|p| (p.share, p.agreement)).collect();
    let a = interpolate(&agree, s).ok_or(FrontierError::OutsideCurve {
        share: s,
        lo: shares[0],
        hi: shares[shares.len() - 1],
    })?;
    let verdict = |better: bool, equal: bool| {
        if equal {
            "level with"
        } else if better {
            "above"
        } else {
            "below"
        }
    };
    let mut out = format!(
        "Token-level against query-level at equal share ({s:.3}, computed by linear \
         interpolation between the token-level points): agreement {a:.3} against {:.3}, so \
         token-level routing sits **{}** query-level on agreement",
        query_level.agreement,
        verdict(
            a > query_level.agreement,
            (a - query_level.agreement).abs() < 5e-4
        )
    );
    let ppl: Option<Vec<(f64, f64)>> = pts
        .iter()
        .map(|p| p.perplexity.map(|v| (p.share, v)))
        .collect();
    if let (Some(ppl), Some(q)) = (ppl, query_level.perplexity) {
        if let Some(t) = interpolate(&ppl, s) {
            out.push_str(&format!(
                "; large-model perplexity {t:.2} against {q:.2}, so it sits **{}** it on \
                 perplexity (lower is better)",
                verdict(t < q, (t - q).abs() < 5e-3)
            ));
        }
    }
    out.push('.');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(share: f64, agreement: f64, perplexity: Option<f64>) -> Point {
        Point {
            share,
            agreement,
            perplexity,
        }
    }

    #[test]
    fn interpolates_inside_and_refuses_outside() {
        let pts = [(0.0, 0.0), (0.5, 1.0), (1.0, 1.0)];
        assert_eq!(interpolate(&pts, 0.25), Some(0.5));
        assert_eq!(interpolate(&pts, 0.75), Some(1.0));
        assert_eq!(interpolate(&pts, 1.5), None);
        assert_eq!(interpolate(&[], 0.5), None);
    }

    #[test]
    fn says_above_or_below_from_the_numbers() {
        let curve = [
            p(0.0, 0.1, Some(9.0)),
            p(0.4, 0.7, Some(4.0)),
            p(1.0, 1.0, Some(2.0)),
        ];
        let above = compare(&curve, &p(0.2, 0.3, Some(7.0))).unwrap();
        assert!(
            above.contains("**above** query-level on agreement"),
            "{above}"
        );
        assert!(above.contains("agreement 0.400 against 0.300"), "{above}");
        assert!(above.contains("perplexity 6.50 against 7.00"), "{above}");
        assert!(above.contains("**above** it on perplexity"), "{above}");
        let below = compare(&curve, &p(0.2, 0.5, None)).unwrap();
        assert!(below.contains("**below**"), "{below}");
        assert!(!below.contains("perplexity"), "{below}");
        let outside = compare(&curve[1..], &p(0.2, 0.5, None)).unwrap_err();
        assert!(
            outside.to_string().contains("not strictly inside"),
            "{outside}"
        );
    }

    #[test]
    fn degenerate_and_end_point_query_level_points_are_refused() {
        let curve = [p(0.0, 0.1, None), p(0.4, 0.7, None), p(1.0, 1.0, None)];
        // Share 0: the old `QueryLevel {}` that sent everything to the small model.
        let e = compare(&curve, &p(0.0, 0.1, None)).unwrap_err();
        assert_eq!(e, FrontierError::Degenerate(0.0));
        assert!(e.to_string().contains("single-model serving"), "{e}");
        assert!(matches!(
            compare(&curve, &p(1.0, 1.0, None)),
            Err(FrontierError::Degenerate(_))
        ));
        // On an end of a curve that does not reach 0 or 1.
        let e = compare(&curve[1..], &p(0.4, 0.7, None)).unwrap_err();
        assert!(matches!(e, FrontierError::OutsideCurve { .. }), "{e}");
        assert_eq!(check_query_level_share(None), Err(FrontierError::NoShare));
        assert_eq!(check_query_level_share(Some(0.3)), Ok(0.3));
    }
}
