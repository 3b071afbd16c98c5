//! Whether a safetensors file holds everything its header promises
//! (torch-free: the asset reader and the tch loader both ask it).

use safetensors::SafeTensors;

/// Checks that a safetensors file holds everything its header promises,
/// so that a cut-off download or write is named as such ("truncated:
/// expected N bytes, file has M") rather than in the parser's words.
pub fn check_complete(bytes: &[u8]) -> Result<(), String> {
    let have = bytes.len();
    let Some(len) = bytes.get(..8) else {
        return Err(format!(
            "truncated: expected at least 8 bytes (the header length), file has {have}"
        ));
    };
    let header_len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    let header_end = header_len.saturating_add(8);
    if header_end > have as u64 {
        return Err(format!(
            "truncated: expected a {header_end}-byte header, file has {have} bytes"
        ));
    }
    // The data's extent from the header's own offsets (the library only
    // says "not fully covered" when the file is short).
    let data_end = serde_json::from_slice::<serde_json::Value>(&bytes[8..header_end as usize])
        .ok()
        .and_then(|v| {
            v.as_object()?
                .values()
                .filter_map(|t| t.get("data_offsets")?.get(1)?.as_u64())
                .max()
        })
        .unwrap_or(0);
    let need = header_end.saturating_add(data_end);
    if need > have as u64 {
        return Err(format!("truncated: expected {need} bytes, file has {have}"));
    }
    SafeTensors::read_metadata(bytes).map_err(|e| format!("safetensors: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod completeness_tests {
    use super::check_complete;

    fn file() -> Vec<u8> {
        let data = vec![0u8; 16];
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &data).unwrap();
        safetensors::serialize([("w", view)], None).unwrap()
    }

    #[test]
    fn truncation_is_named_with_both_sizes() {
        let full = file();
        assert_eq!(check_complete(&full), Ok(()));
        let cut = &full[..full.len() - 3];
        let e = check_complete(cut).unwrap_err();
        assert_eq!(
            e,
            format!(
                "truncated: expected {} bytes, file has {}",
                full.len(),
                cut.len()
            )
        );
        assert!(check_complete(&full[..20])
            .unwrap_err()
            .starts_with("truncated: expected a "));
        assert!(check_complete(&full[..3])
            .unwrap_err()
            .contains("file has 3"));
    }
}
