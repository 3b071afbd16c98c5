//! `gen-random`: deterministic bytes per seed, the real Qwen3 tokenizer, and
//! a checkpoint transformers loads as Qwen3ForCausalLM with well-spread logits.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::Path;

use common::assets::{check_py, qwen3_tokenizer_dir};
use subserver::assets::random::{gen_random, GenRandomOptions, Preset};
use subserver::assets::{tensor_specs, Checkpoint, StorageDtype};
use subserver::model::config::ModelConfig;

fn tiny(out: &Path, seed: u64, dtype: StorageDtype, layers: Option<usize>) -> ModelConfig {
    let mut cfg = Preset::Tiny.config(dtype);
    if let Some(l) = layers {
        cfg.num_hidden_layers = l;
    }
    let mut opts = GenRandomOptions::new(qwen3_tokenizer_dir(), Preset::Tiny.generation_eos());
    opts.seed = seed;
    opts.dtype = dtype;
    gen_random(&cfg, out, &opts).unwrap();
    cfg
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn tiny_is_deterministic_per_seed_and_loads_as_qwen3() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    tiny(&a, 7, StorageDtype::F32, None);
    tiny(&b, 7, StorageDtype::F32, None);
    tiny(&c, 8, StorageDtype::F32, None);
    let weights = |d: &Path| read(&d.join("model.safetensors"));
    assert!(weights(&a) == weights(&b), "same seed, different bytes");
    assert!(weights(&a) != weights(&c), "different seeds, same bytes");

    let cfg = ModelConfig::from_file(&a.join("config.json")).unwrap();
    assert_eq!(cfg.architectures, ["Qwen3ForCausalLM"]);
    assert_eq!(
        (
            cfg.hidden_size,
            cfg.intermediate_size,
            cfg.num_hidden_layers
        ),
        (64, 128, 2)
    );
    assert_eq!(
        (
            cfg.num_attention_heads,
            cfg.kv_heads(),
            cfg.head_dim(),
            cfg.vocab_size
        ),
        (4, 2, 16, 151936)
    );
    assert!(!cfg.tie_word_embeddings);
    assert_eq!(cfg.torch_dtype.as_deref(), Some("float32"));
    let gen: serde_json::Value =
        serde_json::from_slice(&read(&a.join("generation_config.json"))).unwrap();
    assert_eq!(
        gen,
        serde_json::json!({ "bos_token_id": 151643, "eos_token_id": [151645, 151643] })
    );
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        assert!(
            read(&a.join(f)) == read(&qwen3_tokenizer_dir().join(f)),
            "{f} not copied verbatim"
        );
    }

    // Every planned tensor, with the planned init statistics.
    let ckpt = Checkpoint::open(&a).unwrap();
    let specs = tensor_specs(&cfg);
    assert_eq!(ckpt.names().count(), specs.len());
    let emb = ckpt.to_f32("model.embed_tokens.weight").unwrap();
    let std = (emb.iter().map(|v| v * v).sum::<f32>() / emb.len() as f32).sqrt();
    assert!((std - 1.0).abs() < 0.01, "embedding std {std}");
    let down = ckpt.to_f32("model.layers.1.mlp.down_proj.weight").unwrap();
    let std = (down.iter().map(|v| v * v).sum::<f32>() / down.len() as f32).sqrt();
    assert!(
        (std - 1.0 / 128f32.sqrt()).abs() < 0.005,
        "down_proj std {std}"
    );
    let norm = ckpt
        .to_f32("model.layers.0.self_attn.q_norm.weight")
        .unwrap();
    assert!(norm.iter().all(|v| (0.5..1.5).contains(v)) && norm.iter().any(|v| *v != 1.0));

    let py = check_py(&[&"random", &a]);
    assert_eq!(py["architecture"], "Qwen3ForCausalLM");
    assert_eq!(py["layers"], 2);
    let mut gaps: Vec<f64> = serde_json::from_value(py["top2_gaps"].clone()).unwrap();
    gaps.sort_by(f64::total_cmp);
    // Greedy decoding must not hinge on near-ties: top-1 clears top-2 clearly.
    assert!(gaps[gaps.len() / 2] > 0.1, "median top-2 gap {:?}", gaps);
    assert!(py["logit_std"].as_f64().unwrap() > 1.0, "{py}");
}

#[test]
fn dtype_and_layer_overrides_keep_per_tensor_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let (f32_dir, bf16_dir) = (tmp.path().join("f32"), tmp.path().join("bf16"));
    tiny(&f32_dir, 3, StorageDtype::F32, None);
    let cfg = tiny(&bf16_dir, 3, StorageDtype::Bf16, Some(3));
    let written = ModelConfig::from_file(&bf16_dir.join("config.json")).unwrap();
    assert_eq!(
        (written.num_hidden_layers, written.torch_dtype.as_deref()),
        (3, Some("bfloat16"))
    );
    let (full, half) = (
        Checkpoint::open(&f32_dir).unwrap(),
        Checkpoint::open(&bf16_dir).unwrap(),
    );
    assert_eq!(half.names().count(), tensor_specs(&cfg).len());
    // A tensor's values depend on the seed and its name only: the bf16 file
    // holds the f32 file's values, rounded.
    let name = "model.layers.1.self_attn.k_proj.weight";
    assert_eq!(half.tensor(name).unwrap().dtype, StorageDtype::Bf16);
    let rounded: Vec<f32> = full
        .to_f32(name)
        .unwrap()
        .iter()
        .map(|v| half::bf16::from_f32(*v).to_f32())
        .collect();
    assert_eq!(half.to_f32(name).unwrap(), rounded);
    assert!(half.contains("model.layers.2.mlp.up_proj.weight"));
}

#[test]
fn missing_tokenizer_dir_and_non_empty_output_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = Preset::Tiny.config(StorageDtype::F32);
    let opts = GenRandomOptions::new(tmp.path().join("nowhere"), Preset::Tiny.generation_eos());
    let err = gen_random(&cfg, &tmp.path().join("out"), &opts).unwrap_err();
    assert!(err.to_string().contains("nowhere/tokenizer.json"), "{err}");
    assert!(!tmp.path().join("out").exists());

    std::fs::write(tmp.path().join("file"), "x").unwrap();
    let opts = GenRandomOptions::new(qwen3_tokenizer_dir(), Preset::Tiny.generation_eos());
    let err = gen_random(&cfg, tmp.path(), &opts).unwrap_err();
    assert_eq!(err.error_type(), "output_not_empty");
}
