//! Router signals computed from a step's logits on the runner's device
//! (checked against the CPU references in `kernels`).

use tch::{Kind, Tensor};

use tch::TchError;

/// Normalized entropy `-Σ p log p / log V` of each row of `[B, V]` logits, in [0, 1].
pub fn normalized_entropy_rows(logits: &Tensor) -> Result<Vec<f32>, TchError> {
    let v = logits.size().last().copied().unwrap_or(1).max(2);
    let logp = logits
        .f_to_kind(Kind::Float)?
        .f_log_softmax(-1, Kind::Float)?;
    let h = logp
        .f_exp()?
        .f_mul(&logp)?
        .f_sum_dim_intlist(-1, false, Kind::Float)?
        .f_neg()?;
    let h = h
        .f_div_scalar((v as f64).ln())?
        .f_to_device(tch::Device::Cpu)?;
    Vec::<f32>::try_from(&h)
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
