//! A weight packed into panels of 16 output columns.

use half::bf16;

use super::{GemmError, PANEL};

/// An `[n, k]` bf16 weight as `[n_panels][k][16]` (the last panel padded
/// with zeros): one panel's weights at one `k` are contiguous.
#[derive(Debug, Clone)]
pub struct PackedWeight {
    n: usize,
    k: usize,
    data: Vec<bf16>,
}

impl PackedWeight {
    /// Packs `w` (`[n, k]` row-major, the layout of a linear layer's
    /// weight).
    pub fn pack(w: &[bf16], n: usize, k: usize) -> Result<Self, GemmError> {
        if w.len() != n * k || k == 0 {
            return Err(GemmError(format!(
                "a [{n}, {k}] weight needs {} values, got {}",
                n * k,
                w.len()
            )));
        }
        let panels = n.div_ceil(PANEL);
        let mut data = vec![bf16::ZERO; panels * k * PANEL];
        for (row, values) in w.chunks_exact(k).enumerate() {
            let (p, c) = (row / PANEL, row % PANEL);
            let panel = &mut data[p * k * PANEL..(p + 1) * k * PANEL];
            for (kk, &v) in values.iter().enumerate() {
                panel[kk * PANEL + c] = v;
            }
        }
        Ok(Self { n, k, data })
    }

    /// Output columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input columns.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Panels of 16 output columns.
    pub fn panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// Panel `p`, `[k][16]`.
    pub(crate) fn panel(&self, p: usize) -> &[bf16] {
        &self.data[p * self.k * PANEL..(p + 1) * self.k * PANEL]
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.data.len() * 2
    }
}
