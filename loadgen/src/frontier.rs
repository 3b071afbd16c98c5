//! Does token-level routing beat query-level routing at equal cost? Each
//! method is a point (large-model share, quality); the token-level methods'
//! points, joined in share order, form a curve, read at the query-level
//! method's share by linear interpolation.

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
/// perplexity.
pub fn compare(token_level: &[Point], query_level: &Point) -> String {
    let mut pts = token_level.to_vec();
    pts.sort_by(|a, b| a.share.total_cmp(&b.share));
    let s = query_level.share;
    let agree: Vec<(f64, f64)> = pts.iter().map(|p| (p.share, p.agreement)).collect();
    let Some(a) = interpolate(&agree, s) else {
        return format!(
            "Token-level against query-level at equal share: query-level's share {s:.3} lies \
             outside the token-level methods' measured range, so no comparison is made."
        );
    };
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
    out
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
        let above = compare(&curve, &p(0.2, 0.3, Some(7.0)));
        assert!(
            above.contains("**above** query-level on agreement"),
            "{above}"
        );
        assert!(above.contains("agreement 0.400 against 0.300"), "{above}");
        assert!(above.contains("perplexity 6.50 against 7.00"), "{above}");
        assert!(above.contains("**above** it on perplexity"), "{above}");
        let below = compare(&curve, &p(0.2, 0.5, None));
        assert!(below.contains("**below**"), "{below}");
        assert!(!below.contains("perplexity"), "{below}");
        let outside = compare(&curve[1..], &p(0.2, 0.5, None));
        assert!(outside.contains("outside"), "{outside}");
    }
}
