//! Why the long-output section comes out as it does: what the fitted cost
//! per context position adds to one step at the mean context of each cap,
//! and the throughput ratio that context alone predicts.

/// One model's step at batch 1: fixed part (base + one new token) and cost
/// per context position, both in ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepCost {
    /// Base plus one new token, ms.
    pub fixed_ms: f64,
    /// Cost per position of context, ms.
    pub per_position_ms: f64,
}

impl StepCost {
    /// Step time at context `positions`, ms.
    pub fn at(&self, positions: f64) -> f64 {
        self.fixed_ms + self.per_position_ms * positions
    }

    /// Step time at the short cap's mean context over the long cap's: the
    /// throughput ratio context alone predicts (answers span every length
    /// up to the cap, so the mean context is half of it).
    pub fn predicted_ratio(&self, short_cap: usize, long_cap: usize) -> f64 {
        self.at(short_cap as f64 / 2.0) / self.at(long_cap as f64 / 2.0)
    }
}

/// The page's explanation for the small and large model.
pub fn explain(small: StepCost, large: StepCost, short_cap: usize, long_cap: usize) -> String {
    let (s, l) = (short_cap as f64 / 2.0, long_cap as f64 / 2.0);
    let part = |name: &str, c: StepCost| {
        format!(
            "the {name} model's step is {:.1} ms without context, {:.1} ms at {s:.0} positions and \
             {:.1} ms at {l:.0} (context {:.0}% / {:.0}% of the step)",
            c.fixed_ms,
            c.at(s),
            c.at(l),
            100.0 * (c.at(s) - c.fixed_ms) / c.at(s),
            100.0 * (c.at(l) - c.fixed_ms) / c.at(l),
        )
    };
    format!(
        "Why: at the mean context of each cap (half of it), {}; {}. Context alone therefore predicts \
         throughput at cap {long_cap} of **{:.2}× / {:.2}×** (small / large) of cap {short_cap}, for \
         either system (compare the table above). The paper's flat TokenRouter needs a cost per \
         position that is small against the step, as on a GPU, where a step is dominated by reading \
         the weights; this CPU engine's profile charges {:.2e} of a one-sequence step per position, so \
         at these lengths attention over the context, not the schedule, sets the throughput of both \
         systems. A GPU machine's `make bench-engine` profile feeds this section the same way.",
        part("small", small),
        part("large", large),
        small.predicted_ratio(short_cap, long_cap),
        large.predicted_ratio(short_cap, long_cap),
        small.per_position_ms / small.fixed_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_alone_predicts_the_step_ratio() {
        let c = StepCost {
            fixed_ms: 6.0,
            per_position_ms: 0.004,
        };
        // 6 + 4.096 ms at 1024 positions, 6 + 16.384 at 4096.
        assert!((c.predicted_ratio(2048, 8192) - 10.096 / 22.384).abs() < 1e-12);
        let free = StepCost {
            fixed_ms: 6.0,
            per_position_ms: 0.0,
        };
        assert_eq!(free.predicted_ratio(2048, 8192), 1.0);
        let text = explain(c, c, 2048, 8192);
        assert!(text.contains("**0.45× / 0.45×**"), "{text}");
        assert!(text.contains("10.1 ms at 1024 positions"), "{text}");
    }
}
