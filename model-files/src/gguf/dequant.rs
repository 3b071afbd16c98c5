//! Dequantization of ggml blocks to f32, following `ggml-quants.c`
//! (`dequantize_row_*`) operation for operation so results match llama.cpp
//! and gguf-py bit for bit.

use half::{bf16, f16};

use super::ggml_type::{GgmlType, SUPPORTED_TYPES};
use crate::AssetError;

/// Whether [`dequantize`] handles `ty`.
pub fn is_dequantizable(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
    )
}

/// Dequantizes `n` weights of type `ty` stored in `bytes`. `tensor` names the
/// tensor in errors (unsupported type, size mismatch).
pub fn dequantize(
    ty: GgmlType,
    bytes: &[u8],
    n: usize,
    tensor: &str,
) -> Result<Vec<f32>, AssetError> {
    let unsupported = || AssetError::UnsupportedTensorType {
        tensor: tensor.to_string(),
        ggml_type: ty.name(),
        supported: SUPPORTED_TYPES,
    };
    let block_fn: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => f32_block,
        GgmlType::F16 => f16_block,
        GgmlType::BF16 => bf16_block,
        GgmlType::Q4_0 => q4_0_block,
        GgmlType::Q4_1 => q4_1_block,
        GgmlType::Q5_0 => q5_0_block,
        GgmlType::Q5_1 => q5_1_block,
        GgmlType::Q8_0 => q8_0_block,
        GgmlType::Q4_K => q4_k_block,
        GgmlType::Q5_K => q5_k_block,
        GgmlType::Q6_K => q6_k_block,
        _ => return Err(unsupported()),
    };
    let (block, block_bytes) = ty.block_layout().ok_or_else(unsupported)?;
    if !n.is_multiple_of(block) {
        return Err(AssetError::TensorShape {
            tensor: tensor.to_string(),
            reason: format!(
                "{n} weights is not a multiple of the {} block size {block}",
                ty.name()
            ),
        });
    }
    let expected = n / block * block_bytes;
    if bytes.len() != expected {
        return Err(AssetError::TensorShape {
            tensor: tensor.to_string(),
            reason: format!(
                "{} bytes of {} data for {n} weights, expected {expected}",
                bytes.len(),
                ty.name()
            ),
        });
    }
    let mut out = vec![0f32; n];
    for (src, dst) in bytes
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(block))
    {
        block_fn(src, dst);
    }
    Ok(out)
}

fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn f32_block(b: &[u8], y: &mut [f32]) {
    y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
}

fn f16_block(b: &[u8], y: &mut [f32]) {
    y[0] = half_at(b, 0);
}

fn bf16_block(b: &[u8], y: &mut [f32]) {
    y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32();
}

/// d: f16, qs[16]; low nibbles are weights 0..16, high nibbles 16..32.
fn q4_0_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 0x0f) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

/// d, m: f16, qs[16]; y = q * d + m.
fn q4_1_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let m = half_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0x0f) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// The fifth bits of a Q5_0/Q5_1 block: bit j of qh for weight j.
fn fifth_bits(qh: u32, j: usize) -> (u8, u8) {
    let lo = (((qh >> j) << 4) & 0x10) as u8;
    let hi = ((qh >> (j + 12)) & 0x10) as u8;
    (lo, hi)
}

/// d: f16, qh: u32, qs[16]; y = (q - 16) * d.
fn q5_0_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let (lo, hi) = fifth_bits(qh, j);
        y[j] = (((qs[j] & 0x0f) | lo) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) | hi) as i32 - 16) as f32 * d;
    }
}

/// d, m: f16, qh: u32, qs[16]; y = q * d + m.
fn q5_1_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let m = half_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let (lo, hi) = fifth_bits(qh, j);
        y[j] = ((qs[j] & 0x0f) | lo) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) | hi) as f32 * d + m;
    }
}

/// d: f16, qs[32]: i8; y = q * d.
fn q8_0_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// The 6-bit scale and min of sub-block `j` from the 12 packed bytes
/// (`get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// d, dmin: f16, scales[12], qs[128]; four groups of 64 weights, each two
/// sub-blocks of 32 (low nibbles, then high nibbles).
fn q4_k_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let dmin = half_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for group in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * group, scales);
        let (sc2, m2) = scale_min_k4(2 * group + 1, scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let q = &qs[32 * group..32 * group + 32];
        let out = &mut y[64 * group..64 * group + 64];
        for l in 0..32 {
            out[l] = d1 * (q[l] & 0x0f) as f32 - m1;
            out[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// d, dmin: f16, scales[12], qh[32], qs[128]; Q4_K plus one high bit per
/// weight, taken from qh bit 2*group (low nibbles) and 2*group+1 (high).
fn q5_k_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let dmin = half_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for group in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * group, scales);
        let (sc2, m2) = scale_min_k4(2 * group + 1, scales);
        let (d1, m1) = (d * sc1 as f32, dmin * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, dmin * m2 as f32);
        let (u1, u2) = (1u8 << (2 * group), 2u8 << (2 * group));
        let q = &qs[32 * group..32 * group + 32];
        let out = &mut y[64 * group..64 * group + 64];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            out[l] = d1 * ((q[l] & 0x0f) + h1) as f32 - m1;
            out[l + 32] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// ql[128], qh[64], scales[16]: i8, d: f16; two halves of 128 weights, each
/// weight 4 low bits from ql and 2 high bits from qh, minus 32.
fn q6_k_block(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let out = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            out[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            out[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            out[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            out[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    fn deq(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
        dequantize(ty, bytes, n, "t").unwrap()
    }

    #[test]
    fn plain_float_types() {
        let mut b = Vec::new();
        for v in [1.5f32, -2.0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(deq(GgmlType::F32, &b, 2), [1.5, -2.0]);
        let b = [h(0.5), h(-3.0)].concat();
        assert_eq!(deq(GgmlType::F16, &b, 2), [0.5, -3.0]);
        let b = [
            bf16::from_f32(2.0).to_le_bytes(),
            bf16::from_f32(-0.25).to_le_bytes(),
        ]
        .concat();
        assert_eq!(deq(GgmlType::BF16, &b, 2), [2.0, -0.25]);
    }

    #[test]
    fn q4_0_known_values() {
        // qs[j] = low j, high 15-j; d = 0.5 → y[j] = (j-8)/2, y[16+j] = (7-j)/2.
        let mut b = h(0.5).to_vec();
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::Q4_0, &b, 32);
        for j in 0..16 {
            assert_eq!(y[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(y[16 + j], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn q4_1_known_values() {
        // d = 2, m = -1: y = 2q - 1.
        let mut b = [h(2.0), h(-1.0)].concat();
        b.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = deq(GgmlType::Q4_1, &b, 32);
        for j in 0..16 {
            assert_eq!(y[j], 2.0 * j as f32 - 1.0);
            assert_eq!(y[16 + j], 2.0 * (15 - j) as f32 - 1.0);
        }
    }

    #[test]
    fn q5_0_and_q5_1_use_the_fifth_bit() {
        // qh bit j set for even j (weights 0..16) and bit 16+j set for j < 8
        // (weights 16..24); all nibbles 3.
        let qh: u32 = (0..16)
            .filter(|j| j % 2 == 0)
            .map(|j| 1u32 << j)
            .sum::<u32>()
            | (0..8).map(|j| 1u32 << (16 + j)).sum::<u32>();
        let expected_q = |i: usize| -> i32 {
            let fifth = if i < 16 { i.is_multiple_of(2) } else { i < 24 };
            3 + if fifth { 16 } else { 0 }
        };
        let mut b = h(0.25).to_vec();
        b.extend_from_slice(&qh.to_le_bytes());
        b.extend([0x33u8; 16]);
        let y = deq(GgmlType::Q5_0, &b, 32);
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v, (expected_q(i) - 16) as f32 * 0.25, "weight {i}");
        }
        let mut b = [h(0.5), h(1.0)].concat();
        b.extend_from_slice(&qh.to_le_bytes());
        b.extend([0x33u8; 16]);
        let y = deq(GgmlType::Q5_1, &b, 32);
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v, expected_q(i) as f32 * 0.5 + 1.0, "weight {i}");
        }
    }

    #[test]
    fn q8_0_known_values() {
        let mut b = h(0.125).to_vec();
        b.extend((0..32).map(|j: i32| (j * 8 - 128) as i8 as u8));
        let y = deq(GgmlType::Q8_0, &b, 32);
        for (j, v) in y.iter().enumerate() {
            assert_eq!(*v, (j as f32 * 8.0 - 128.0) * 0.125);
        }
    }

    /// Packs eight 6-bit scales and mins the way `make_qkx2_quants` callers do.
    fn pack_scales(sc: [u8; 8], mn: [u8; 8]) -> [u8; 12] {
        let mut q = [0u8; 12];
        for j in 0..8 {
            if j < 4 {
                q[j] = sc[j];
                q[j + 4] = mn[j];
            } else {
                q[j + 4] = (sc[j] & 0x0f) | ((mn[j] & 0x0f) << 4);
                q[j - 4] |= (sc[j] >> 4) << 6;
                q[j] |= (mn[j] >> 4) << 6;
            }
        }
        q
    }

    #[test]
    fn scale_min_unpacking_inverts_packing() {
        let sc = [1, 63, 17, 32, 5, 48, 60, 33];
        let mn = [62, 0, 9, 40, 51, 16, 3, 63];
        let q = pack_scales(sc, mn);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &q), (sc[j], mn[j]), "sub-block {j}");
        }
    }

    #[test]
    fn q4_k_known_values() {
        let sc = [1, 2, 3, 4, 5, 6, 7, 40];
        let mn = [0, 1, 2, 3, 4, 5, 6, 50];
        let (d, dmin) = (0.5f32, 0.25f32);
        let mut b = [h(d), h(dmin)].concat();
        b.extend_from_slice(&pack_scales(sc, mn));
        // Byte l of group g: low nibble (l % 16), high nibble g.
        for g in 0..4u8 {
            b.extend((0..32u8).map(|l| (l % 16) | (g << 4)));
        }
        let y = deq(GgmlType::Q4_K, &b, 256);
        for (i, got) in y.iter().enumerate() {
            let (g, r) = (i / 64, i % 64);
            let sub = 2 * g + r / 32;
            let q = if r < 32 { (r % 16) as f32 } else { g as f32 };
            let want = d * sc[sub] as f32 * q - dmin * mn[sub] as f32;
            assert_eq!(*got, want, "weight {i}");
        }
    }

    #[test]
    fn q5_k_known_values() {
        let sc = [3, 1, 4, 1, 5, 9, 2, 6];
        let mn = [2, 7, 1, 8, 2, 8, 1, 8];
        let (d, dmin) = (0.25f32, 0.5f32);
        let mut b = [h(d), h(dmin)].concat();
        b.extend_from_slice(&pack_scales(sc, mn));
        // qh[l]: bit k set when l % (k+2) == 0, an irregular but known pattern.
        let qh: Vec<u8> = (0..32usize)
            .map(|l| (0..8).filter(|k| l % (k + 2) == 0).map(|k| 1u8 << k).sum())
            .collect();
        b.extend_from_slice(&qh);
        for _ in 0..4 {
            b.extend((0..32u8).map(|l| (l % 16) | ((15 - l % 16) << 4)));
        }
        let y = deq(GgmlType::Q5_K, &b, 256);
        for (i, got) in y.iter().enumerate() {
            let (g, r) = (i / 64, i % 64);
            let (l, upper) = (r % 32, r >= 32);
            let sub = 2 * g + usize::from(upper);
            let low4 = if upper { 15 - l % 16 } else { l % 16 };
            let bit = 2 * g + usize::from(upper);
            let q = low4 + if qh[l] & (1 << bit) != 0 { 16 } else { 0 };
            let want = d * sc[sub] as f32 * q as f32 - dmin * mn[sub] as f32;
            assert_eq!(*got, want, "weight {i}");
        }
    }

    #[test]
    fn q6_k_known_values() {
        // Weight i has 6-bit code c(i) = (i * 7) % 64; build ql/qh from it.
        let code = |i: usize| ((i * 7) % 64) as u8;
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for half in 0..2 {
            for l in 0..32 {
                let base = 128 * half;
                let (c1, c2, c3, c4) = (
                    code(base + l),
                    code(base + l + 32),
                    code(base + l + 64),
                    code(base + l + 96),
                );
                ql[64 * half + l] = (c1 & 0x0f) | ((c3 & 0x0f) << 4);
                ql[64 * half + l + 32] = (c2 & 0x0f) | ((c4 & 0x0f) << 4);
                qh[32 * half + l] =
                    (c1 >> 4) | ((c2 >> 4) << 2) | ((c3 >> 4) << 4) | ((c4 >> 4) << 6);
            }
        }
        let scales: [i8; 16] = [
            1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12, 13, -14, 15, -16,
        ];
        let d = 0.125f32;
        let mut b = ql.to_vec();
        b.extend_from_slice(&qh);
        b.extend(scales.iter().map(|s| *s as u8));
        b.extend_from_slice(&h(d));
        let y = deq(GgmlType::Q6_K, &b, 256);
        for (i, got) in y.iter().enumerate() {
            // Weights are in runs of 16 sharing a scale, in order.
            let want = d * scales[i / 16] as f32 * (code(i) as i32 - 32) as f32;
            assert_eq!(*got, want, "weight {i}");
        }
    }

    #[test]
    fn unsupported_type_names_tensor_and_type() {
        let err =
            dequantize(GgmlType::from_id(20), &[0; 18], 32, "blk.3.ffn_up.weight").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("blk.3.ffn_up.weight") && msg.contains("IQ4_NL"),
            "{msg}"
        );
        assert_eq!(err.error_type(), "unsupported_tensor_type");
        let err = dequantize(GgmlType::Q2_K, &[0; 84], 256, "x").unwrap_err();
        assert!(err.to_string().contains("Q2_K"));
    }

    #[test]
    fn size_mismatch_is_an_error() {
        let err = dequantize(GgmlType::Q8_0, &[0; 33], 32, "tok").unwrap_err();
        assert!(
            err.to_string().contains("tok") && err.to_string().contains("34"),
            "{err}"
        );
        let err = dequantize(GgmlType::Q8_0, &[0; 34], 31, "tok").unwrap_err();
        assert!(err.to_string().contains("block size 32"), "{err}");
    }
}
