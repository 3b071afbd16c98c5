//! GGUF import against the real SmolLM2-135M-Instruct Q4_1 file, checked with
//! gguf-py, transformers and the `tokenizers` crate; and every supported
//! quantization type against gguf-py on random blocks.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::assets::{asset, check_py};
use subserver::assets::gguf::{import_gguf, GgufFile, ImportOptions};
use subserver::assets::{load_tokenizer, StorageDtype};

const SMOLLM2: &str = "assets/SmolLM2-135M-Instruct.Q4_1.gguf";

const TEXTS: &[&str] = &[
    "Hello, world!",
    "The year 2024 had 366 days.",
    "  indented\n\tcode() { return x**2; }",
    "naïve café — 東京 🚀",
    "<|im_start|>user\nWhat is 12+30?<|im_end|>\n<|im_start|>assistant\n",
];

#[test]
fn real_smollm2_gguf_imports_exactly_and_loads_in_transformers() {
    let gguf = asset(SMOLLM2);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("smollm2");
    let summary = import_gguf(&gguf, &out, &ImportOptions::default()).unwrap();

    let cfg = &summary.config;
    assert_eq!(cfg.architectures, ["LlamaForCausalLM"]);
    assert_eq!(
        (
            cfg.num_hidden_layers,
            cfg.hidden_size,
            cfg.intermediate_size
        ),
        (30, 576, 1536)
    );
    assert_eq!(
        (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim()),
        (9, 3, 64)
    );
    assert_eq!(cfg.vocab_size, 49152);
    assert!(cfg.tie_word_embeddings);
    assert_eq!(
        (
            cfg.rope_theta,
            cfg.rms_norm_eps,
            cfg.max_position_embeddings
        ),
        (100000.0, 1e-5, 8192)
    );
    assert_eq!(summary.tensors, 1 + 30 * 9 + 1);

    // (a) Dequantized (and un-permuted) tensors equal gguf-py's dequantization.
    let dq = check_py(&[&"dequant", &gguf, &out]);
    let types: Vec<&str> = dq["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(types, ["F32", "Q4_1", "Q8_0"]);
    assert!(dq["checked"].as_array().unwrap().len() >= 9, "{dq}");

    // (b) transformers loads model and tokenizer strictly; the model answers sensibly.
    let texts = serde_json::to_string(TEXTS).unwrap();
    let loaded = check_py(&[&"load", &out, &texts]);
    assert_eq!(loaded["architecture"], "LlamaForCausalLM");
    assert_eq!(loaded["im_start"], serde_json::json!([1]));
    let answer = loaded["answer"].as_str().unwrap();
    assert!(answer.contains("Paris"), "greedy answer: {answer:?}");

    // (c) The tokenizers crate encodes like transformers.
    let tok = load_tokenizer(&out.join("tokenizer.json")).unwrap();
    for (text, expected) in TEXTS.iter().zip(loaded["encodings"].as_array().unwrap()) {
        let ids = tok.encode(*text, false).unwrap().get_ids().to_vec();
        let expected: Vec<u32> = serde_json::from_value(expected.clone()).unwrap();
        assert_eq!(ids, expected, "encoding of {text:?}");
    }
}

#[test]
fn real_smollm2_imports_as_bf16() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("bf16");
    let opts = ImportOptions {
        dtype: StorageDtype::Bf16,
        ..ImportOptions::default()
    };
    let summary = import_gguf(&asset(SMOLLM2), &out, &opts).unwrap();
    assert_eq!(summary.config.torch_dtype.as_deref(), Some("bfloat16"));
    let ckpt = subserver::assets::Checkpoint::open(&out).unwrap();
    let t = ckpt
        .tensor("model.layers.3.self_attn.q_proj.weight")
        .unwrap();
    assert_eq!(
        (t.dtype, t.shape),
        (StorageDtype::Bf16, &[576usize, 576][..])
    );
    assert_eq!(t.bytes.len(), 576 * 576 * 2);
}

#[test]
fn every_supported_type_matches_gguf_py_on_random_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("blocks.gguf");
    let made = check_py(&[&"blocks", &path, &tmp.path()]);
    let file = GgufFile::open(&path).unwrap();
    let names: Vec<&str> = made["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 11);
    for name in names {
        let info = file.header().tensor(name).unwrap();
        assert_eq!(info.ggml_type.name(), name);
        let ours = file.dequantize(info).unwrap();
        let raw = std::fs::read(tmp.path().join(format!("{name}.f32"))).unwrap();
        let reference: Vec<f32> = raw
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(ours.len(), reference.len(), "{name}");
        for (i, (a, b)) in ours.iter().zip(&reference).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "{name}[{i}]: ours {a}, gguf-py {b}"
            );
        }
    }
}
