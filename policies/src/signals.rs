//! Router signals of a step's logits, computed on the host by one pass per
//! row (`kernels::row_stats`) rather than a chain of tensor ops.

use tch::{TchError, Tensor};

use crate::host_logits::HostLogits;

pub use kernels::{row_stats, RowStats};

/// The signals of every row of host logits, in row order.
pub fn row_stats_all(logits: &HostLogits) -> Vec<RowStats> {
    (0..logits.rows())
        .filter_map(|i| logits.row(i).map(row_stats))
        .collect()
}

/// Normalized entropy `-Σ p log p / log V` of each row of `[B, V]` logits,
/// in [0, 1] (`NaN` for a row with a `NaN` or `+inf`).
pub fn normalized_entropy_rows(logits: &Tensor) -> Result<Vec<f32>, TchError> {
    let host = HostLogits::from_tensor(logits)?;
    Ok(row_stats_all(&host)
        .iter()
        .map(|s| s.normalized_entropy)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_cpu_reference() {
        let rows = [
            vec![0.0f32; 8],
            vec![10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            vec![1.0, 2.0, 3.0, 4.0, 0.5, -1.0, 2.5, 0.0],
        ];
        let flat: Vec<f32> = rows.concat();
        let t = Tensor::from_slice(&flat).view([3, 8]);
        let got = normalized_entropy_rows(&t).unwrap();
        for (g, r) in got.iter().zip(&rows) {
            let want = kernels::normalized_entropy(r);
            assert!((g - want).abs() < 1e-5, "{g} vs {want}");
        }
        assert!((got[0] - 1.0).abs() < 1e-6, "uniform logits have entropy 1");
        assert!(got[1] < 0.01);
    }
}
