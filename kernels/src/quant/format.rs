//! The ggml block types the CPU computes on, their layouts, and a portable
//! decoder of one block into unsigned codes and per-16 affine parameters.
//!
//! Every supported type is, per group of 16 weights `g`, an affine map of
//! an unsigned code: `w_i = a_g · u_i + c_g`. That one form serves the
//! integer dot product (`Σ w·x̂ = dx · (a·Σu·q + c·Σq)`), the dequantized
//! tiles and the tests:
//!
//! | type | block | bytes | code `u` | `a` | `c` |
//! |------|-------|-------|----------|-----|-----|
//! | Q4_0 | 32 | 18 | 4-bit | `d` | `-8d` |
//! | Q4_1 | 32 | 20 | 4-bit | `d` | `m` |
//! | Q5_0 | 32 | 22 | 5-bit | `d` | `-16d` |
//! | Q5_1 | 32 | 24 | 5-bit | `d` | `m` |
//! | Q8_0 | 32 | 34 | int8 + 128 | `d` | `-128d` |
//! | Q4_K | 256 | 144 | 4-bit | `d·sc_j` | `-dmin·m_j` (6-bit `sc`, `m` per 32) |
//! | Q6_K | 256 | 210 | 6-bit | `d·sc_g` | `-32·d·sc_g` (int8 `sc` per 16) |
//!
//! The byte layouts are ggml's (`block_q4_0` ... `block_q6_K`): an f16
//! scale first for the 32-weight types (then the min, the fifth bits, the
//! nibbles), low nibbles holding weights 0..16 and high nibbles 16..32.

use half::f16;

/// A ggml block type with a CPU kernel.
#[allow(non_camel_case_types)] // ggml's names
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// ggml type 2.
    Q4_0,
    /// ggml type 3.
    Q4_1,
    /// ggml type 6.
    Q5_0,
    /// ggml type 7.
    Q5_1,
    /// ggml type 8.
    Q8_0,
    /// ggml type 12.
    Q4_K,
    /// ggml type 14.
    Q6_K,
}

impl QuantType {
    /// Every type with a kernel.
    pub const ALL: [QuantType; 7] = [
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q4_K,
        Self::Q6_K,
    ];

    /// The type of a ggml type id (`ggml.h`), if it has a kernel.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// The ggml type id.
    pub fn ggml_id(self) -> u32 {
        match self {
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4_K => 12,
            Self::Q6_K => 14,
        }
    }

    /// The name llama.cpp uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4_K => "Q4_K",
            Self::Q6_K => "Q6_K",
        }
    }

    /// Weights per block.
    pub fn block_weights(self) -> usize {
        match self {
            Self::Q4_K | Self::Q6_K => 256,
            _ => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q4_K => 144,
            Self::Q6_K => 210,
        }
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The f16 at `b[i..i + 2]`.
pub(crate) fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The 6-bit scale and min of Q4_K sub-block `j` from its 12 packed bytes
/// (ggml's `get_scale_min_k4`).
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Decodes one block of `ty`: `codes[i]` (one per weight) and, per group
/// of 16 weights, `a[g]` and `c[g]` with `w_i = a[g] · codes[i] + c[g]`.
pub(crate) fn decode(ty: QuantType, b: &[u8], codes: &mut [u8], a: &mut [f32], c: &mut [f32]) {
    match ty {
        QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 => {
            let (d, m, qh, qs) = match ty {
                QuantType::Q4_0 => (half_at(b, 0), None, None, &b[2..18]),
                QuantType::Q4_1 => (half_at(b, 0), Some(half_at(b, 2)), None, &b[4..20]),
                QuantType::Q5_0 => (half_at(b, 0), None, Some(&b[2..6]), &b[6..22]),
                _ => (
                    half_at(b, 0),
                    Some(half_at(b, 2)),
                    Some(&b[4..8]),
                    &b[8..24],
                ),
            };
            let qh = qh.map_or(0, |h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]));
            for j in 0..16 {
                // Weight i's fifth bit is bit i of qh (zero for Q4).
                let fifth = |i: usize| (((qh >> i) & 1) << 4) as u8;
                codes[j] = (qs[j] & 0x0f) | fifth(j);
                codes[j + 16] = (qs[j] >> 4) | fifth(j + 16);
            }
            let off = if qh_type(ty) { 16.0 } else { 8.0 };
            let cst = m.unwrap_or(-off * d);
            a[..2].fill(d);
            c[..2].fill(cst);
        }
        QuantType::Q8_0 => {
            let d = half_at(b, 0);
            for (u, q) in codes[..32].iter_mut().zip(&b[2..34]) {
                *u = q ^ 0x80; // int8 + 128
            }
            a[..2].fill(d);
            c[..2].fill(-128.0 * d);
        }
        QuantType::Q4_K => decode_q4_k(b, codes, a, c),
        QuantType::Q6_K => decode_q6_k(b, codes, a, c),
    }
}

/// Whether `ty` is a 5-bit type (offset 16, not 8, where it has no min).
fn qh_type(ty: QuantType) -> bool {
    matches!(ty, QuantType::Q5_0 | QuantType::Q5_1)
}

/// Q4_K: d, dmin, scales[12], qs[128]; four groups of 64 weights, each
/// the low nibbles of 32 bytes then their high nibbles.
fn decode_q4_k(b: &[u8], codes: &mut [u8], a: &mut [f32], c: &mut [f32]) {
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, scales);
        a[2 * j..2 * j + 2].fill(d * f32::from(sc));
        c[2 * j..2 * j + 2].fill(-dmin * f32::from(m));
    }
    for g in 0..4 {
        for l in 0..32 {
            let q = qs[32 * g + l];
            codes[64 * g + l] = q & 0x0f;
            codes[64 * g + 32 + l] = q >> 4;
        }
    }
}

/// Q6_K: ql[128], qh[64], scales[16] (int8), d; two halves of 128, each
/// code 4 low bits from ql and 2 high bits from qh, minus 32.
fn decode_q6_k(b: &[u8], codes: &mut [u8], a: &mut [f32], c: &mut [f32]) {
    let d = half_at(b, 208);
    for g in 0..16 {
        let s = d * f32::from(b[192 + g] as i8);
        a[g] = s;
        c[g] = -32.0 * s;
    }
    for h in 0..2 {
        let ql = &b[64 * h..64 * h + 64];
        let qh = &b[128 + 32 * h..128 + 32 * h + 32];
        let out = &mut codes[128 * h..128 * h + 128];
        for l in 0..32 {
            out[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
            out[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
            out[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            out[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
}

/// Dequantizes one row of blocks into `out` (f32), as `a·u + c`.
pub(crate) fn dequantize_row(ty: QuantType, row: &[u8], out: &mut [f32]) {
    let (bw, bb) = (ty.block_weights(), ty.block_bytes());
    let mut codes = [0u8; 256];
    let (mut a, mut c) = ([0f32; 16], [0f32; 16]);
    for (blk, dst) in row.chunks_exact(bb).zip(out.chunks_exact_mut(bw)) {
        decode(ty, blk, &mut codes, &mut a, &mut c);
        for (i, (o, &u)) in dst.iter_mut().zip(&codes[..bw]).enumerate() {
            *o = a[i / 16].mul_add(f32::from(u), c[i / 16]);
        }
    }
}
