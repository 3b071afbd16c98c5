//! Drop-in for the official TokenRouter: its published R2R router format
//! read directly in Rust (checked against a Python reference written from
//! the official R2R code, tests/python/r2r_official_ref.py), and its YAML
//! layout, byte for byte, served from a Hugging Face cache of small
//! random-weight Qwen3 models under the official ids.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use subserver::assets::dtype::StorageDtype;
use subserver::assets::random::{gen_random, GenRandomOptions, Preset};
use subserver::config::EngineConfig;
use subserver::policy::router::citer_net::CiterNet;
use subserver::policy::router::r2r_net::R2rNet;
use subserver::policy::router::RouterCheckpoint;
use tch::Tensor;

/// The config of the issue and the seed article (`config/r2r/Qwen3-0.6B_Qwen3-32B.yaml`
/// of the official repository), byte for byte.
const OFFICIAL_YAML: &str = r#"model:
  quick:
    model_path: "Qwen/Qwen3-0.6B"
    port: 30000
    tp_size: 1
    scheduler_class: "r2r_slm"
    scheduler_kwargs:
      switching_strategy: "neural"
      model_path: "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt"
  reference:
    model_path: "Qwen/Qwen3-32B"
    tp_size: 2
    delayed_batching_threshold: [1,2,2,3,4,5,5,6,7,8,9,10,10,11,12,13]
    scheduler_class: "r2r_llm"
system:
  entry_model: "quick"
  mem_fraction_static: 0.85
"#;

fn run_python(script: &str, args: &[&str]) {
    common::run_script(script, args);
}

fn reference(dir: &Path) -> std::collections::HashMap<String, Tensor> {
    Tensor::read_safetensors(dir.join("reference.safetensors"))
        .unwrap()
        .into_iter()
        .collect()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[])
}

#[test]
fn published_r2r_routers_load_directly_and_match_the_official_math() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("plain", vec!["--dims", "64,64,64", "--topk", "100"]),
        (
            "norm",
            vec!["--dims", "32,48", "--topk", "50", "--normalize"],
        ),
    ] {
        let dir = tmp.path().join(name);
        let mut args = vec![
            dir.to_str().unwrap(),
            "--hidden",
            "48",
            "--vocab",
            "400",
            "--batch",
            "16",
            "--median-threshold",
            "--seed",
            "3",
        ];
        args.extend(extra);
        run_python("r2r_official_ref.py", &args);
        // The .pt file itself: no conversion step.
        let mut ck = RouterCheckpoint::open(&dir.join("router.pt"), tch::Device::Cpu).unwrap();
        // The bar is the batch's median probability, so both decisions occur.
        let bar = ck.meta.threshold.expect("common_args.threshold");
        assert_eq!(
            ck.meta.model_type.as_deref(),
            Some("HiddenStatesTokenLMHeadLogitsClassifier")
        );
        assert_eq!(
            ck.meta.init_args.get("dtype"),
            Some(&serde_json::json!("torch.float32"))
        );
        let net = R2rNet::load(&mut ck).unwrap();
        assert!(
            ck.weights.leftover().is_empty(),
            "{:?}",
            ck.weights.leftover()
        );
        assert_eq!((net.hidden_size(), net.embed_size()), (48, 48));
        let r = reference(&dir);
        let emb = r["embeddings"].index_select(0, &r["tokens"]);
        let got = net.forward(&r["hidden"], &emb, &r["logits"]).unwrap();
        let diff = max_abs_diff(&got, &r["probs"]);
        assert!(diff < 1e-4, "{name}: max |ours - official| = {diff}");
        // Same decisions (>= threshold goes large), except within the tolerance of the bar.
        let ours: Vec<f32> = Vec::try_from(&got).unwrap();
        let theirs: Vec<i64> = Vec::try_from(&r["to_large"]).unwrap();
        for (p, t) in ours.iter().zip(&theirs) {
            if (*p as f64 - bar).abs() > 1e-4 {
                assert_eq!(
                    subserver::policy::r2r::diverges(*p, bar),
                    *t == 1,
                    "{name}: p = {p}"
                );
            }
        }
        // The seeded batch has tokens on both sides of the bar (a check of a
        // check that could not fail otherwise).
        assert!(
            theirs.contains(&1) && theirs.contains(&0),
            "{name}: {theirs:?}"
        );
    }
}

#[test]
fn torch_save_state_dicts_load_directly_and_bad_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    // A CITER router as CITER saves it: torch.save(state_dict).
    run_python(
        "router_ref.py",
        &["citer", d, "--hidden", "40", "--batch", "7", "--seed", "4"],
    );
    let mut ck = RouterCheckpoint::open(&tmp.path().join("router.pt"), tch::Device::Cpu).unwrap();
    assert_eq!(ck.meta.threshold, None);
    let net = CiterNet::load(&mut ck).unwrap();
    let r = reference(tmp.path());
    let diff = max_abs_diff(&net.forward(&r["hidden"]).unwrap(), &r["probs"]);
    assert!(diff < 1e-5, "max |ours - pytorch| = {diff}");

    let bogus = tmp.path().join("bogus.pt");
    std::fs::write(&bogus, b"not a checkpoint").unwrap();
    let e = RouterCheckpoint::open(&bogus, tch::Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("bogus.pt") && e.contains("not a torch.save zip archive"),
        "{e}"
    );
}

// ---- The official YAML, served ----

/// Creates `hub/models--ORG--NAME/snapshots/REV` with `refs/main`; returns the snapshot.
fn hub_snapshot(hub: &Path, id: &str, rev: &str) -> PathBuf {
    let folder = hub.join(format!("models--{}", id.replace('/', "--")));
    let snap = folder.join("snapshots").join(rev);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(folder.join("refs")).unwrap();
    std::fs::write(folder.join("refs/main"), rev).unwrap();
    snap
}

/// A Hugging Face cache with tiny random Qwen3 models under the official
/// ids (real Qwen3 tokenizer) and an official-format router for the pair.
fn official_hub(root: &Path) -> PathBuf {
    let hub = root.join("hub");
    let tok = common::cache_dir().join("assets/qwen3-tokenizer");
    let write = |id: &str, seed: u64, edit: &dyn Fn(&mut subserver::model::config::ModelConfig)| {
        let mut cfg = Preset::Tiny.config(StorageDtype::F32);
        edit(&mut cfg);
        let mut opts = GenRandomOptions::new(tok.clone(), Preset::Tiny.generation_eos());
        opts.seed = seed;
        gen_random(&cfg, &hub_snapshot(&hub, id, "0123abc"), &opts).unwrap();
        cfg.hidden_size
    };
    let small_hidden = write("Qwen/Qwen3-0.6B", 11, &|_| {});
    write("Qwen/Qwen3-32B", 22, &|c| {
        c.hidden_size = 96;
        c.intermediate_size = 192;
        c.num_hidden_layers = 3;
        c.head_dim = Some(24);
    });
    let routers = hub_snapshot(&hub, "nics-efc/R2R_router_collections", "feed42");
    let hidden = small_hidden.to_string();
    run_python(
        "r2r_official_ref.py",
        &[
            routers.join("Qwen3-0.6B+Qwen3-32B").to_str().unwrap(),
            "--hidden",
            &hidden,
            "--dims",
            "32,32",
            // Every token diverges: the served answer must be the large
            // model's alone, which shows the file's threshold is used.
            "--threshold",
            "0.0",
            "--seed",
            "9",
        ],
    );
    std::fs::rename(
        routers.join("Qwen3-0.6B+Qwen3-32B/router.pt"),
        routers.join("Qwen3-0.6B+Qwen3-32B/default_router.pt"),
    )
    .unwrap();
    hub
}

#[test]
fn the_official_yaml_loads_byte_for_byte_and_serves_a_chat_request() {
    // The committed copy is the official file, unchanged.
    let committed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/official/r2r/Qwen3-0.6B_Qwen3-32B.yaml");
    assert_eq!(std::fs::read_to_string(&committed).unwrap(), OFFICIAL_YAML);

    let tmp = tempfile::tempdir().unwrap();
    let hub = official_hub(tmp.path());
    let config = tmp.path().join("Qwen3-0.6B_Qwen3-32B.yaml");
    std::fs::write(&config, OFFICIAL_YAML).unwrap();

    // Loaded in-process with the same cache: ids, classes, per-model lists.
    std::env::set_var("HF_HUB_CACHE", &hub);
    let cfg = EngineConfig::from_file(&config).unwrap();
    assert_eq!(cfg.policy().name.as_str(), "R2R");
    assert_eq!(
        cfg.policy().kwargs.get("router_path"),
        Some(&serde_json::json!(
            "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt"
        ))
    );
    let quick = cfg.model(0).unwrap();
    assert_eq!(quick.hub_id.as_deref(), Some("Qwen/Qwen3-0.6B"));
    assert!(quick.path.as_ref().unwrap().starts_with(&hub));
    assert_eq!((quick.port, quick.tp_size), (Some(30000), 1));
    assert_eq!(cfg.model(1).unwrap().tp_size, 2);
    assert_eq!(cfg.thresholds().for_model(0), Some(&[1][..]));
    assert_eq!(cfg.thresholds().get(1, 4), 3);
    assert_eq!(
        cfg.gateway().port,
        30000,
        "the entry model's port is the API port"
    );

    // Served by the binary: the port is overridden so tests do not collide,
    // and the KV pool sized for a shared CPU host.
    let mut child = Command::new(common::binary())
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--port", "0", "--max-total-tokens", "4096"])
        .env("HF_HUB_CACHE", &hub)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
        }
    });
    let (etx, erx) = mpsc::channel();
    std::thread::spawn(move || {
        let text: Vec<String> = BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect();
        let _ = etx.send(text.join("\n"));
    });
    let url = match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(url) => url,
        Err(_) => {
            let _ = child.kill();
            panic!(
                "serve did not start: {}",
                erx.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
            );
        }
    };
    let body = serde_json::json!({
        "model": "default",
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "temperature": 0,
        "max_tokens": 12
    });
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "120",
            "-H",
            "content-type: application/json",
        ])
        .args(["-d", &body.to_string()])
        .arg(format!("{url}/v1/chat/completions"))
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let warnings = erx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_default();
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(reply["object"], "chat.completion", "{reply}");
    assert!(
        reply["choices"][0]["message"]["content"].is_string(),
        "{reply}"
    );
    let usage = &reply["usage"];
    let n = usage["completion_tokens"].as_u64().unwrap();
    assert!(n > 0, "{reply}");
    assert_eq!(
        usage["completion_tokens_by_model"]["reference"].as_u64(),
        Some(n),
        "{reply}"
    );
    // tp_size 2 runs whole on one device, and start-up says so.
    assert!(
        warnings.contains("tensor parallelism is not implemented"),
        "{warnings}"
    );

    // A router trained for another pair (other hidden width) is refused at start-up.
    let wrong = tmp.path().join("wrong");
    run_python(
        "r2r_official_ref.py",
        &[wrong.to_str().unwrap(), "--hidden", "48", "--dims", "32"],
    );
    let yaml = OFFICIAL_YAML.replace(
        "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt",
        wrong.join("router.pt").to_str().unwrap(),
    );
    let mut cfg = EngineConfig::from_yaml_str(&yaml, tmp.path()).unwrap();
    cfg.override_kv_tokens(256).unwrap();
    let e = subserver::service::build::members(&cfg)
        .err()
        .expect("a router of the wrong width must be refused")
        .to_string();
    assert!(
        e.contains("R2R cannot run here") && e.contains("hidden states 48 wide"),
        "{e}"
    );
}
