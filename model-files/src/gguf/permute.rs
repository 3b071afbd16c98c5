//! llama.cpp's rotary row permutation of q_proj/k_proj, and its inverse.
//!
//! `convert_hf_to_gguf.py` stores q/k with the rows of each head interleaved
//! (GPT-J rotary layout): `w.reshape(n_head, 2, rows/n_head/2, cols)
//! .swapaxes(1, 2).reshape(rows, cols)`. Transformers expects the original
//! (NeoX, rotate-half) order, so the importer applies the inverse.

/// Validates that `rows` splits into `n_head` heads of even width.
fn head_half(rows: usize, n_head: usize) -> Result<usize, String> {
    if n_head == 0 || !rows.is_multiple_of(n_head) || !(rows / n_head).is_multiple_of(2) {
        return Err(format!(
            "{rows} rows do not split into {n_head} heads of even width"
        ));
    }
    Ok(rows / n_head / 2)
}

/// Moves rows: output row `dst(h, a, b)` takes input row `src(h, a, b)`.
fn move_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_head: usize,
    map: impl Fn(usize, usize, usize, usize) -> (usize, usize),
) -> Result<Vec<f32>, String> {
    if data.len() != rows * cols {
        return Err(format!("{} values for a {rows}x{cols} matrix", data.len()));
    }
    let half = head_half(rows, n_head)?;
    let mut out = vec![0f32; data.len()];
    for h in 0..n_head {
        for i in 0..half {
            for j in 0..2 {
                let (src, dst) = map(h, i, j, half);
                out[dst * cols..(dst + 1) * cols]
                    .copy_from_slice(&data[src * cols..(src + 1) * cols]);
            }
        }
    }
    Ok(out)
}

/// Undoes llama.cpp's permutation: row `h*hd + 2i + j` of the GGUF tensor is
/// row `h*hd + j*hd/2 + i` of the transformers tensor. `n_head` is the number
/// of query heads for q_proj and of KV heads for k_proj.
pub fn unpermute_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_head: usize,
) -> Result<Vec<f32>, String> {
    move_rows(data, rows, cols, n_head, |h, i, j, half| {
        let hd = 2 * half;
        (h * hd + 2 * i + j, h * hd + j * half + i)
    })
}

/// llama.cpp's permutation (transformers order → GGUF order), the inverse of
/// [`unpermute_rows`].
pub fn permute_rows(
    data: &[f32],
    rows: usize,
    cols: usize,
    n_head: usize,
) -> Result<Vec<f32>, String> {
    move_rows(data, rows, cols, n_head, |h, i, j, half| {
        let hd = 2 * half;
        (h * hd + j * half + i, h * hd + 2 * i + j)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_numpy_formula_on_a_small_case() {
        // 2 heads of width 4, 1 column: HF rows [0..8). numpy:
        // reshape(2, 2, 2, 1).swapaxes(1, 2) → per head [r0, r2, r1, r3].
        let hf: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let gguf = permute_rows(&hf, 8, 1, 2).unwrap();
        assert_eq!(gguf, [0., 2., 1., 3., 4., 6., 5., 7.]);
        assert_eq!(unpermute_rows(&gguf, 8, 1, 2).unwrap(), hf);
    }

    #[test]
    fn round_trips_rectangular_matrices() {
        let (rows, cols, heads) = (3 * 12, 5, 3);
        let hf: Vec<f32> = (0..rows * cols).map(|v| v as f32 * 0.5).collect();
        let gguf = permute_rows(&hf, rows, cols, heads).unwrap();
        assert_ne!(gguf, hf);
        assert_eq!(unpermute_rows(&gguf, rows, cols, heads).unwrap(), hf);
        assert_eq!(
            permute_rows(
                &unpermute_rows(&hf, rows, cols, heads).unwrap(),
                rows,
                cols,
                heads
            )
            .unwrap(),
            hf
        );
    }

    #[test]
    fn rejects_rows_that_do_not_split_into_heads() {
        assert!(unpermute_rows(&[0.0; 10], 10, 1, 3)
            .unwrap_err()
            .contains("3 heads"));
        assert!(unpermute_rows(&[0.0; 6], 6, 1, 2).is_err()); // head width 3 is odd
        assert!(unpermute_rows(&[0.0; 5], 8, 1, 2)
            .unwrap_err()
            .contains("5 values"));
    }
}
