//! The two bucketings of `step_latency_seconds`: batch sizes into a fixed
//! set of label values, and step times into histogram buckets.
//!
//! Batch sizes are a label, not a histogram dimension, so that the tuner can
//! read one latency histogram per batch size class: a batch of `b` requests
//! goes into the smallest bucket `>= b` among `1, 2, 4, ..., 256`, i.e. the
//! bucket named `k` holds batches with `k/2 < b <= k`. Batches above 256 go
//! into `256`, the open-ended last class; an empty batch (`b = 0`) into `1`.

/// Upper batch size of each `batch_bucket` label value, ascending.
pub const BATCH_BUCKETS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// The `batch_bucket` label values, in the order of [`BATCH_BUCKETS`].
pub const BATCH_BUCKET_NAMES: [&str; 9] = ["1", "2", "4", "8", "16", "32", "64", "128", "256"];

/// Smallest and largest finite step-latency bucket bounds, seconds.
const LATENCY_MIN_S: f64 = 0.0005;
const LATENCY_MAX_S: f64 = 10.0;
/// Bounds in the log-spaced ladder (24 steps of about 1.51x).
const LATENCY_BOUNDS: usize = 25;

/// Index into [`BATCH_BUCKETS`] of the bucket for a batch of `b` requests.
pub fn batch_bucket_index(b: usize) -> usize {
    BATCH_BUCKETS
        .iter()
        .position(|&upper| b <= upper)
        .unwrap_or(BATCH_BUCKETS.len() - 1)
}

/// The `batch_bucket` label value for a batch of `b` requests: the smallest
/// of `1, 2, 4, ..., 256` that is `>= b` (`256` for anything larger).
pub fn batch_bucket(b: usize) -> &'static str {
    BATCH_BUCKET_NAMES[batch_bucket_index(b)]
}

/// Upper bounds (seconds) of the step-latency histogram: 25 log-spaced
/// values from 0.5 ms to 10 s, rounded to 3 significant digits so that the
/// `le` labels read cleanly (`0.000755`, `0.00114`, ...).
pub fn step_latency_buckets() -> Vec<f64> {
    let ratio = LATENCY_MAX_S / LATENCY_MIN_S;
    let steps = (LATENCY_BOUNDS - 1) as f64;
    (0..LATENCY_BOUNDS)
        .map(|i| round_significant(LATENCY_MIN_S * ratio.powf(i as f64 / steps), 3))
        .collect()
}

/// `x` rounded to `digits` significant decimal digits (x > 0).
fn round_significant(x: f64, digits: usize) -> f64 {
    // Going through the decimal text gives the f64 nearest to the rounded
    // decimal, which is what prints back as the short label.
    format!("{:.*e}", digits - 1, x).parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_goes_to_smallest_bucket_at_least_its_size() {
        let cases = [
            (0, "1"),
            (1, "1"),
            (2, "2"),
            (3, "4"),
            (4, "4"),
            (5, "8"),
            (8, "8"),
            (9, "16"),
            (17, "32"),
            (33, "64"),
            (64, "64"),
            (65, "128"),
            (128, "128"),
            (129, "256"),
            (256, "256"),
            (257, "256"),
            (100_000, "256"),
        ];
        for (b, want) in cases {
            assert_eq!(batch_bucket(b), want, "batch {b}");
        }
    }

    #[test]
    fn every_batch_size_lands_in_the_tightest_bucket() {
        for b in 1..=256usize {
            let i = batch_bucket_index(b);
            let upper = BATCH_BUCKETS[i];
            assert!(b <= upper, "batch {b} above its bucket {upper}");
            if i > 0 {
                assert!(b > BATCH_BUCKETS[i - 1], "batch {b} fits a smaller bucket");
            }
            assert_eq!(BATCH_BUCKET_NAMES[i], upper.to_string());
        }
    }

    #[test]
    fn latency_buckets_span_half_a_millisecond_to_ten_seconds_log_spaced() {
        let b = step_latency_buckets();
        assert_eq!(b.len(), LATENCY_BOUNDS);
        assert_eq!(b[0], 0.0005);
        assert_eq!(*b.last().unwrap(), 10.0);
        let want_ratio = (10.0f64 / 0.0005).powf(1.0 / 24.0);
        for w in b.windows(2) {
            let r = w[1] / w[0];
            assert!(
                (r / want_ratio - 1.0).abs() < 0.01,
                "{} -> {}: ratio {r}, want {want_ratio}",
                w[0],
                w[1]
            );
        }
        // Rounded labels: no long binary-fraction tails in the text.
        for x in &b {
            assert!(x.to_string().len() <= 8, "{x}");
        }
    }
}
