//! The element types of the KV pool and of the activations around it
//! (`f32`, `bfloat16`), as the host kernels read and write them.

/// An element of the KV pool, and of a layer's activations in the model
/// dtype.
pub trait KvElem: Copy + Send + Sync + 'static {
    /// Whether it is stored as `bfloat16` (else as `f32`): the SIMD loads
    /// read the pool by this layout.
    const IS_BF16: bool;
    /// The value as `f32`.
    fn widen(self) -> f32;
    /// `x` rounded to this type the way libtorch casts (nearest, ties to
    /// even; NaN stays NaN).
    fn narrow(x: f32) -> Self;
}

impl KvElem for f32 {
    const IS_BF16: bool = false;
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        x
    }
}

impl KvElem for half::bf16 {
    const IS_BF16: bool = true;
    #[inline(always)]
    fn widen(self) -> f32 {
        // bf16 is the top half of an f32: a shift, which vectorizes.
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        // c10::BFloat16's round_to_nearest_even, branch-free so that loops
        // of it vectorize: NaN is selected, not branched on.
        let bits = x.to_bits();
        let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
        let out = if x.is_nan() { 0x7fc0 } else { rounded };
        half::bf16::from_bits(out as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::KvElem;
    use half::bf16;

    #[test]
    fn narrow_rounds_like_half_and_keeps_nan_and_infinities() {
        let cases = [
            0.0f32,
            -0.0,
            1.0,
            1.0 + 1.0 / 256.0, // a tie: to even (1.0)
            1.0 + 3.0 / 256.0, // a tie: to even (up)
            3.3,
            -2.7,
            1e-40, // subnormal
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for x in cases {
            assert_eq!(
                <bf16 as KvElem>::narrow(x).to_bits(),
                bf16::from_f32(x).to_bits(),
                "{x}"
            );
            assert_eq!(
                <bf16 as KvElem>::narrow(x).widen(),
                bf16::from_f32(x).to_f32()
            );
        }
        assert!(<bf16 as KvElem>::narrow(f32::NAN).to_f32().is_nan());
        assert_eq!(<f32 as KvElem>::narrow(0.3), 0.3);
    }
}
