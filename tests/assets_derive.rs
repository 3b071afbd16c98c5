//! `derive-early-exit` from a sharded random Qwen3: the first K layers, byte
//! for byte, and a model transformers runs like the source cut to K layers.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use common::assets::{check_py, qwen3_tokenizer_dir};
use subserver::assets::random::{gen_random, GenRandomOptions, Preset};
use subserver::assets::safetensors_writer::INDEX_FILE;
use subserver::assets::{
    derive_early_exit, tensor_specs, Checkpoint, StorageDtype, DEFAULT_MAX_SHARD_BYTES,
};
use subserver::model::config::ModelConfig;

#[test]
fn derives_first_layers_from_sharded_source() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, out) = (tmp.path().join("src"), tmp.path().join("exit2"));
    let mut cfg = Preset::Tiny.config(StorageDtype::F32);
    cfg.num_hidden_layers = 4;
    let mut opts = GenRandomOptions::new(qwen3_tokenizer_dir(), Preset::Tiny.generation_eos());
    opts.seed = 11;
    // 30 MB shards: the 39 MB embedding and head each get their own.
    opts.max_shard_bytes = 30_000_000;
    gen_random(&cfg, &src, &opts).unwrap();
    assert!(src.join(INDEX_FILE).exists(), "source should be sharded");

    let summary = derive_early_exit(&src, &out, 2, DEFAULT_MAX_SHARD_BYTES).unwrap();
    let derived = ModelConfig::from_file(&out.join("config.json")).unwrap();
    assert_eq!(derived.num_hidden_layers, 2);
    assert_eq!(summary.config, derived);
    let (a, b) = (
        Checkpoint::open(&src).unwrap(),
        Checkpoint::open(&out).unwrap(),
    );
    let want: Vec<String> = tensor_specs(&derived).into_iter().map(|s| s.name).collect();
    let mut got: Vec<&str> = b.names().collect();
    got.sort();
    let mut want_sorted: Vec<&str> = want.iter().map(String::as_str).collect();
    want_sorted.sort();
    assert_eq!(got, want_sorted);
    assert!(!b.contains("model.layers.2.input_layernorm.weight"));
    for name in &want {
        assert!(
            a.tensor(name).unwrap().bytes == b.tensor(name).unwrap().bytes,
            "{name} differs"
        );
    }
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(
            std::fs::read(src.join(f)).unwrap() == std::fs::read(out.join(f)).unwrap(),
            "{f}"
        );
    }

    let py = check_py(&[&"early-exit", &src, &out, &"2"]);
    assert_eq!(py["layers"], 2);
}

#[test]
fn layer_count_out_of_range_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let opts = GenRandomOptions::new(qwen3_tokenizer_dir(), Preset::Tiny.generation_eos());
    gen_random(&Preset::Tiny.config(StorageDtype::F32), &src, &opts).unwrap();
    for k in [0, 3] {
        let err = derive_early_exit(
            &src,
            &tmp.path().join(format!("k{k}")),
            k,
            DEFAULT_MAX_SHARD_BYTES,
        )
        .unwrap_err();
        assert_eq!(err.error_type(), "invalid_argument", "{err}");
        assert!(err.to_string().contains("2 layers"), "{err}");
    }
    // K equal to the source's layer count is a plain copy.
    derive_early_exit(&src, &tmp.path().join("all"), 2, DEFAULT_MAX_SHARD_BYTES).unwrap();
}
