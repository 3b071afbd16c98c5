//! Entry points for hostile bytes, shared by the cargo-fuzz targets in
//! `fuzz/` (nightly, `make fuzz`) and the property tests that run them on
//! stable in `make test`. Each takes arbitrary input and must come back,
//! with a value or a typed error: a panic, a hang or an allocation the
//! input's size does not justify is a bug the fuzzer reports.

use std::io::Write;
use std::path::Path;

use crate::config::EngineConfig;
use crate::peer::codec::{decode_msg, encode_msg, read_frame, Handshake};
use model_files::checkpoint_reader::Checkpoint;
use model_files::gguf::GgufFile;

/// Largest tensor (in elements) the checkpoint entry points read back; the
/// readers bound sizes by the file, this only keeps one run short.
const MAX_READ_ELEMENTS: u64 = 1 << 22;

/// The peer wire: frames off a byte stream, each decoded as a handshake and
/// as a message; a message that decodes must encode to bytes that decode
/// to the same encoding.
pub fn peer_wire(data: &[u8]) {
    let mut stream = data;
    while let Ok(Some(payload)) = read_frame(&mut stream) {
        let _ = Handshake::decode(&payload);
        if let Ok(msg) = decode_msg(&payload) {
            let frame = encode_msg(&msg).expect("a decoded message encodes");
            let again = decode_msg(&frame[4..]).expect("an encoded message decodes");
            let frame2 = encode_msg(&again).expect("a decoded message encodes");
            assert_eq!(frame, frame2, "encode/decode is not stable");
        }
    }
    // The payload alone, as a reader that got the frame from elsewhere.
    let _ = decode_msg(data);
}

/// The engine config loader on any text (relative paths resolve under a
/// directory that does not exist, so nothing on disk is read).
pub fn config_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = EngineConfig::from_yaml_str(text, Path::new("/nonexistent/fuzz"));
    }
}

/// The GGUF reader: the file is parsed, and every tensor whose type we can
/// dequantize is read back (bounded by what the file holds).
pub fn gguf(data: &[u8], scratch: &Path) {
    let path = scratch.join("fuzz.gguf");
    if write(&path, data).is_err() {
        return;
    }
    let Ok(file) = GgufFile::open(&path) else {
        return;
    };
    for info in &file.header().tensors {
        if info.n_elements() <= MAX_READ_ELEMENTS {
            let _ = file.dequantize(info);
        }
    }
}

/// The safetensors checkpoint reader: `model.safetensors` holding `data`,
/// every tensor read back as f32.
pub fn safetensors(data: &[u8], scratch: &Path) {
    if write(&scratch.join("model.safetensors"), data).is_err() {
        return;
    }
    let _ = std::fs::remove_file(scratch.join("model.safetensors.index.json"));
    let Ok(ckpt) = Checkpoint::open(scratch) else {
        return;
    };
    let names: Vec<String> = ckpt.names().map(str::to_string).collect();
    for name in names {
        if let Ok(t) = ckpt.tensor(&name) {
            let n = t
                .shape
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
                .unwrap_or(u64::MAX);
            if n <= MAX_READ_ELEMENTS {
                let _ = ckpt.to_f32(&name);
            }
        }
    }
}

/// The converted-router reader: the first two bytes split `data` into the
/// metadata JSON and the weights file of a router directory.
pub fn router_checkpoint(data: &[u8], scratch: &Path) {
    let Some((&[a, b], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes([a, b])).min(rest.len());
    let (meta, weights) = rest.split_at(split);
    let dir = scratch.join("router");
    if std::fs::create_dir_all(&dir).is_err()
        || write(&dir.join(policies::router::checkpoint::META_FILE), meta).is_err()
        || write(
            &dir.join(policies::router::checkpoint::WEIGHTS_FILE),
            weights,
        )
        .is_err()
    {
        return;
    }
    let _ = policies::router::RouterCheckpoint::open(&dir, tch::Device::Cpu);
}

fn write(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(data)
}

#[cfg(test)]
mod tests;
