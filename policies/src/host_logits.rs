//! A step's logits on the host: one contiguous `f32` copy per step, which
//! sampling, log-probabilities and the routing signals all read (instead of
//! one `Vec` per row, or a device-side chain of tensor ops per policy).

use tch::{Device, Kind, Tensor};

use tch::TchError;

/// `[rows, width]` logits in host memory, row-major. The buffer is kept
/// across steps ([`HostLogits::refill`]) so a warm engine allocates none.
#[derive(Debug, Default, Clone)]
pub struct HostLogits {
    data: Vec<f32>,
    rows: usize,
    width: usize,
}

impl HostLogits {
    /// Copies `logits` (`[B, V]`, any dtype, any device) in.
    pub fn from_tensor(logits: &Tensor) -> Result<Self, TchError> {
        let mut h = Self::default();
        h.refill(logits)?;
        Ok(h)
    }

    /// Replaces the contents with `logits` (`[B, V]`), reusing the buffer.
    /// On the CPU, an f32 contiguous tensor is copied exactly once.
    pub fn refill(&mut self, logits: &Tensor) -> Result<(), TchError> {
        let size = logits.size();
        let (rows, width) = match size.as_slice() {
            [b, v] => (*b as usize, *v as usize),
            _ => {
                return Err(TchError::Shape(format!(
                    "logits must be [B, V], got {size:?}"
                )))
            }
        };
        let cpu = logits
            .f_to_device(Device::Cpu)?
            .f_to_kind(Kind::Float)?
            .f_contiguous()?;
        let n = rows * width;
        self.data.resize(n, 0.0);
        cpu.f_copy_data(&mut self.data[..n], n)?;
        self.rows = rows;
        self.width = width;
        Ok(())
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i` over the whole head (`None` past the end).
    pub fn row(&self, i: usize) -> Option<&[f32]> {
        (i < self.rows).then(|| &self.data[i * self.width..(i + 1) * self.width])
    }

    /// The first `vocab` columns of row `i`: what the sampler draws from (a
    /// head may be wider than the vocabulary, e.g. Co-LLM's deferral column).
    pub fn sample_row(&self, i: usize, vocab: usize) -> Option<&[f32]> {
        self.row(i).map(|r| &r[..vocab.min(r.len())])
    }

    /// Every row as its own `Vec` (tests and tools that keep rows).
    pub fn to_rows(&self) -> Vec<Vec<f32>> {
        (0..self.rows)
            .filter_map(|i| self.row(i).map(<[f32]>::to_vec))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_with_rows_and_vocab_views() {
        let t = Tensor::from_slice(&[1f32, 2., 3., 4., 5., 6.]).view([2, 3]);
        let mut h = HostLogits::from_tensor(&t).unwrap();
        assert_eq!(h.rows(), 2);
        assert_eq!(h.row(1).unwrap(), &[4., 5., 6.]);
        assert_eq!(h.sample_row(0, 2).unwrap(), &[1., 2.]);
        assert!(h.row(2).is_none());
        // Refilled with fewer rows and another dtype: the buffer is reused.
        let t = Tensor::from_slice(&[7f32, 8.])
            .view([1, 2])
            .to_kind(Kind::BFloat16);
        h.refill(&t).unwrap();
        assert_eq!(h.to_rows(), vec![vec![7., 8.]]);
        let bad = Tensor::from_slice(&[1f32, 2.]);
        assert!(HostLogits::from_tensor(&bad).is_err());
    }
}
