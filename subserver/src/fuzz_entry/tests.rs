//! The fuzz entry points on stable: random bytes and random mutations of the
//! committed seed corpus (`fuzz/corpus/<target>/`), a few hundred cases per
//! target so that `make test` stays short. `make fuzz` runs the same entry
//! points under libFuzzer for longer.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::peer::message::{PeerMsg, PeerReq};
use model_files::gguf::test_file::GgufBuilder;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// The committed seeds of `target` (at least one: the corpus is part of
/// the repository).
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// One edit of a seed.
#[derive(Debug, Clone)]
enum Edit {
    Flip { at: usize, bits: u8 },
    Set { at: usize, byte: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Remove { at: usize, len: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, bits)| Edit::Flip { at, bits }),
        (
            any::<usize>(),
            prop_oneof![Just(0u8), Just(0xff), Just(0x7f), Just(0x80), any::<u8>()]
        )
            .prop_map(|(at, byte)| Edit::Set { at, byte }),
        any::<usize>().prop_map(|at| Edit::Truncate { at }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Edit::Insert { at, bytes }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Edit::Remove { at, len }),
    ]
}

fn apply(mut data: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = data.len();
        match e {
            Edit::Flip { at, bits } if n > 0 => data[at % n] ^= bits,
            Edit::Set { at, byte } if n > 0 => data[at % n] = *byte,
            Edit::Truncate { at } => data.truncate(at % (n + 1)),
            Edit::Insert { at, bytes } => {
                let at = at % (n + 1);
                data.splice(at..at, bytes.iter().copied());
            }
            Edit::Remove { at, len } if n > 0 => {
                let at = at % n;
                data.drain(at..(at + len).min(n));
            }
            _ => {}
        }
    }
    data
}

/// Inputs for `target`: raw random bytes, or a seed with a few edits.
fn inputs(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds(target);
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..256),
        4 => (0..seeds.len(), prop::collection::vec(edit(), 1..6))
            .prop_map(move |(i, edits)| apply(seeds[i].clone(), &edits)),
    ]
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Failures are reported with the input; nothing to persist in-tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn peer_wire_never_panics(data in inputs("peer_wire")) {
        peer_wire(&data);
    }

    #[test]
    fn config_yaml_never_panics(data in inputs("config_yaml")) {
        config_yaml(&data);
    }
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn gguf_never_panics(data in inputs("gguf")) {
        let dir = tempfile::tempdir().unwrap();
        gguf(&data, dir.path());
    }

    #[test]
    fn safetensors_never_panics(data in inputs("safetensors")) {
        let dir = tempfile::tempdir().unwrap();
        safetensors(&data, dir.path());
    }

    #[test]
    fn router_checkpoint_never_panics(data in inputs("router_checkpoint")) {
        let dir = tempfile::tempdir().unwrap();
        router_checkpoint(&data, dir.path());
    }
}

/// The seeds are what the readers accept (so mutations start from valid
/// files, not from noise they refuse at the first byte).
#[test]
fn every_seed_is_accepted() {
    for s in seeds("peer_wire") {
        let mut r = s.as_slice();
        let payload = read_frame(&mut r).unwrap().unwrap();
        assert!(decode_msg(&payload).is_ok() || Handshake::decode(&payload).is_ok());
    }
    for s in seeds("config_yaml") {
        let text = String::from_utf8(s).unwrap();
        // Relative model paths do not exist here: only a path error is allowed.
        if let Err(e) = EngineConfig::from_yaml_str(&text, Path::new("/nonexistent/fuzz")) {
            let e = e.to_string();
            assert!(!e.contains("unknown field"), "{e}\n{text}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for (i, s) in seeds("gguf").into_iter().enumerate() {
        let p = dir.path().join(format!("{i}.gguf"));
        std::fs::write(&p, s).unwrap();
        GgufFile::open(&p).unwrap();
    }
    for s in seeds("safetensors") {
        std::fs::write(dir.path().join("model.safetensors"), s).unwrap();
        Checkpoint::open(dir.path()).unwrap();
    }
}

/// Writes the seed corpus (run once, with `--ignored`, when a format
/// changes; the files are committed).
#[test]
#[ignore]
fn regenerate_seed_corpus() {
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    // Peer wire: a handshake, and one frame of each message kind.
    put("peer_wire", "handshake", &Handshake::new(1).encode());
    let req = PeerMsg::Req(PeerReq {
        rid: 77,
        from: 0,
        to: 1,
        loc: 12,
        tokens: vec![1, 2, 300, 70_000],
        finished: false,
        budget: 5,
        n_active: 3,
        meta: None,
        logprobs: vec![],
        next: None,
    });
    let release = PeerMsg::Release {
        rid: 77,
        from: 0,
        n_active: 2,
    };
    let failed = PeerMsg::Failed {
        rid: 9,
        from: 1,
        reason: "peer timed out".into(),
    };
    for (name, m) in [("req", req), ("release", release), ("failed", failed)] {
        put("peer_wire", name, &encode_msg(&m).unwrap());
    }
    // Config: the shipped examples.
    let configs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    for name in [
        "sim-r2r.yaml",
        "tcp-split.yaml",
        "r-stitch.yaml",
        "default.yaml",
    ] {
        put(
            "config_yaml",
            name,
            &std::fs::read(configs.join(name)).unwrap(),
        );
    }
    // GGUF: a small llama-like file with metadata and f32/f16 tensors.
    use model_files::gguf::GgmlType;
    use model_files::gguf::MetadataValue;
    let mut b = GgufBuilder::new(3);
    b.kv(
        "general.architecture",
        MetadataValue::String("llama".into()),
    );
    b.kv("llama.block_count", MetadataValue::U32(1));
    b.kv(
        "tokenizer.ggml.tokens",
        MetadataValue::Array(vec![MetadataValue::String("a".into()); 3]),
    );
    b.tensor_f32("token_embd.weight", &[4, 3], &[0.5; 12]);
    b.tensor(
        "output_norm.weight",
        &[4],
        GgmlType::F16,
        half::f16::from_f32(1.0).to_le_bytes().repeat(4),
    );
    put("gguf", "small.gguf", &b.build());
    // Safetensors: two tensors of different dtypes.
    let w = vec![0u8; 24];
    let h = vec![1u8; 8];
    let views = [
        (
            "model.embed_tokens.weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2, 3], &w).unwrap(),
        ),
        (
            "model.norm.weight",
            safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![4], &h).unwrap(),
        ),
    ];
    let st = safetensors::serialize(views, None).unwrap();
    put("safetensors", "two.safetensors", &st);
    // Router: metadata JSON then weights, split by the first two bytes.
    let meta = br#"{"model_type":"HiddenStatesTokenLMHeadLogitsClassifier","init_args":{"hidden_size":4},"threshold":0.5}"#;
    let mut router = (meta.len() as u16).to_le_bytes().to_vec();
    router.extend_from_slice(meta);
    router.extend_from_slice(&st);
    put("router_checkpoint", "r2r", &router);
}
