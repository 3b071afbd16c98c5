//! R2R, CITER and Co-LLM end to end: routers built and run by PyTorch
//! (tests/python/router_ref.py), converted with `tokenrouter
//! convert-router`, checked against PyTorch's outputs; then random Qwen3
//! pairs (real Qwen3 tokenizer) routed through a real in-process group and
//! through a YAML config.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use subserver::assets::dtype::StorageDtype;
use subserver::assets::random::{gen_random, GenRandomOptions, Preset};
use subserver::config::EngineConfig;
use subserver::policy::router::citer_net::CiterNet;
use subserver::policy::router::r2r_net::R2rNet;
use subserver::policy::router::RouterCheckpoint;
use subserver::policy::{build, Placement};
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::sampling::SamplingParams;
use subserver::scheduler::client::{StreamEvent, Usage};
use subserver::scheduler::group::Group;
use subserver::service::Service;
use tch::Tensor;

/// Runs tests/python/router_ref.py with `args`.
fn router_ref(args: &[&str]) {
    common::run_script("router_ref.py", args);
}

/// `tokenrouter convert-router IN OUT`; returns its stdout.
fn convert(input: &Path, out: &Path) -> String {
    let o = Command::new(common::binary())
        .arg("convert-router")
        .arg(input)
        .arg(out)
        .env("TOKENROUTER_PYTHON", common::python())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
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
fn r2r_router_matches_pytorch() {
    let tmp = tempfile::tempdir().unwrap();
    // A width-changing backbone with input normalization, and the released
    // layout (equal widths, raw logits) with an embedding narrower than H.
    for (name, extra) in [
        (
            "norm",
            vec!["--dims", "32,48,48", "--embed", "40", "--normalize"],
        ),
        (
            "plain",
            vec!["--dims", "64,64,64,64", "--embed", "24", "--expansion", "2"],
        ),
    ] {
        let dir = tmp.path().join(name);
        let d = dir.to_str().unwrap();
        let mut args = vec![
            "r2r",
            d,
            "--hidden",
            "48",
            "--batch",
            "9",
            "--vocab",
            "500",
            "--threshold",
            "0.3",
        ];
        args.extend(extra);
        router_ref(&args);
        let said = convert(&dir.join("router.pt"), &dir.join("conv"));
        assert!(
            said.contains("R2R router") && said.contains("threshold 0.3"),
            "{said}"
        );
        let mut ck = RouterCheckpoint::open(&dir.join("conv"), tch::Device::Cpu).unwrap();
        assert_eq!(ck.meta.threshold, Some(0.3));
        let net = R2rNet::load(&mut ck).unwrap();
        assert_eq!(net.hidden_size(), 48);
        let r = reference(&dir);
        let emb = r["embeddings"].index_select(0, &r["tokens"]);
        let got = net.forward(&r["hidden"], &emb, &r["logits"]).unwrap();
        let diff = max_abs_diff(&got, &r["probs"]);
        assert!(diff < 1e-5, "{name}: max |ours - pytorch| = {diff}");
        // The inputs matter: shuffling the logits' order does not change the
        // result (they are sorted), but other hidden states do.
        let other = net
            .forward(&r["hidden"].flip([0]), &emb, &r["logits"])
            .unwrap();
        assert!(max_abs_diff(&other, &r["probs"]) > 1e-4);
    }
}

#[test]
fn citer_router_matches_pytorch() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    router_ref(&["citer", d, "--hidden", "40", "--batch", "11", "--seed", "4"]);
    let said = convert(&tmp.path().join("router.pt"), &tmp.path().join("conv"));
    assert!(said.contains("CITER router: hidden 40"), "{said}");
    let mut ck = RouterCheckpoint::open(&tmp.path().join("conv"), tch::Device::Cpu).unwrap();
    let net = CiterNet::load(&mut ck).unwrap();
    let r = reference(tmp.path());
    let diff = max_abs_diff(&net.forward(&r["hidden"]).unwrap(), &r["probs"]);
    assert!(diff < 1e-5, "max |ours - pytorch| = {diff}");
}

#[test]
fn convert_router_rejects_what_it_cannot_use() {
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("bogus.pt");
    std::fs::write(&bogus, b"not a checkpoint").unwrap();
    let o = Command::new(common::binary())
        .arg("convert-router")
        .arg(&bogus)
        .arg(tmp.path().join("out"))
        .env("TOKENROUTER_PYTHON", common::python())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("bogus.pt"));
}

// ---- Routed generation with random Qwen3 pairs ----

/// Random models and converted routers, made once per test binary.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

const SMALL: &str = "small";
const SMALL_COLLM: &str = "small-collm";
const LARGE: &str = "large";

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let tok = common::cache_dir().join("assets/qwen3-tokenizer");
        let write =
            |name: &str, seed: u64, edit: &dyn Fn(&mut subserver::model::config::ModelConfig)| {
                let mut cfg = Preset::Tiny.config(StorageDtype::F32);
                edit(&mut cfg);
                let mut opts = GenRandomOptions::new(tok.clone(), Preset::Tiny.generation_eos());
                opts.seed = seed;
                gen_random(&cfg, &root.join("models").join(name), &opts).unwrap();
            };
        write(SMALL, 11, &|_| {});
        write(SMALL_COLLM, 11, &|c| c.deferral_columns = 1);
        // The large model is wider: routers read the small model's H only.
        write(LARGE, 22, &|c| {
            c.hidden_size = 96;
            c.intermediate_size = 192;
            c.num_hidden_layers = 3;
            c.head_dim = Some(24);
        });
        let r = root.join("routers");
        router_ref(&[
            "r2r",
            r.join("r2r").to_str().unwrap(),
            "--hidden",
            "64",
            "--dims",
            "32,32",
            "--seed",
            "5",
        ]);
        convert(&r.join("r2r/router.pt"), &r.join("r2r-conv"));
        router_ref(&[
            "citer",
            r.join("citer").to_str().unwrap(),
            "--hidden",
            "64",
            "--seed",
            "6",
        ]);
        convert(&r.join("citer/router.pt"), &r.join("citer-conv"));
        Fixture { _dir: dir, root }
    })
}

impl Fixture {
    fn model(&self, name: &str) -> PathBuf {
        self.root.join("models").join(name)
    }
    fn router(&self, name: &str) -> String {
        self.root
            .join("routers")
            .join(name)
            .to_string_lossy()
            .into_owned()
    }
}

fn runner(dir: &Path) -> TchRunner {
    let mut opts = TchRunnerOptions::new(dir);
    opts.kv_budget = KvBudget::Tokens(2048);
    TchRunner::load(&opts).unwrap()
}

fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![785, 6722, 315, 9625, 374],
        (0..23).map(|i| 1000 + (i * 7919) % 90_000).collect(),
        vec![151_644, 872, 198, 9707, 0, 13],
    ]
}

fn group(models: [&str; 2], policy: &str, kwargs: serde_json::Value) -> Group {
    let f = fixture();
    let runners = models
        .iter()
        .map(|n| (n.to_string(), runner(&f.model(n))))
        .collect();
    common::policy_group(runners, policy, &kwargs)
}

type Run = (Vec<u32>, Vec<u16>, Usage);

fn routed(g: &Group, n: usize) -> Vec<Run> {
    common::greedy_routed(g, prompts(), n)
}

fn alone(name: &str, n: usize) -> Vec<Vec<u32>> {
    common::greedy_alone(runner(&fixture().model(name)), prompts(), n)
}

fn check_accounting(runs: &[Run]) {
    for (toks, writers, usage) in runs {
        common::check_accounting(toks, writers, usage);
        assert!(toks
            .iter()
            .all(|&t| (t as usize) < subserver::assets::random::QWEN3_VOCAB));
    }
}

fn large_share(runs: &[Run]) -> f64 {
    let (large, all) = runs.iter().fold((0, 0), |(l, a), (_, _, u)| {
        (l + u.tokens_by_model[1], a + u.completion_tokens)
    });
    large as f64 / all as f64
}

/// The routing signal of the first generated token of each prompt,
/// computed outside the group from the small model's own forward: `signal`
/// gets hidden states, full logits, the embedding matrix and the greedy
/// tokens. Returns the median, a threshold that splits the prompts.
fn median_first_signal(
    small: &str,
    signal: impl Fn(&Tensor, &Tensor, &Tensor, &[u32]) -> Vec<f32>,
) -> f64 {
    use subserver::runner::{ModelRunner, StepBatch, StepItem};
    let mut r = runner(&fixture().model(small));
    let vocab = r.info().vocab_size;
    let mut values = Vec::new();
    for (i, p) in prompts().into_iter().enumerate() {
        r.kv().admit(i as u64, &p).unwrap();
        let out = r
            .forward(&StepBatch {
                entropy_items: vec![],
                items: vec![StepItem {
                    rid: i as u64,
                    start: 0,
                    tokens: p,
                }],
            })
            .unwrap();
        let row = &out.logits_rows().unwrap()[0][..vocab];
        let greedy = (0..row.len()).fold(0, |b, j| if row[j] > row[b] { j } else { b }) as u32;
        let (logits, hidden) = (out.logits.unwrap(), out.hidden.unwrap());
        values.extend(signal(&hidden, &logits, r.embeddings().unwrap(), &[greedy]));
    }
    values.sort_by(f32::total_cmp);
    assert!(
        values[0] < values[values.len() - 1],
        "the signal does not vary: {values:?}"
    );
    values[values.len() / 2] as f64
}

/// The shared checks: each extreme threshold equals one model alone, a
/// middle one mixes the two writers deterministically, and every token is
/// accounted to exactly one model.
fn check_policy(
    small: &str,
    policy: &str,
    kwargs: impl Fn(f64) -> serde_json::Value,
    small_only: f64,
    large_only: f64,
    mid: f64,
) {
    let n = 12;
    for (t, model, writer) in [(small_only, small, 0u16), (large_only, LARGE, 1u16)] {
        let got = routed(&group([small, LARGE], policy, kwargs(t)), n);
        check_accounting(&got);
        for ((toks, writers, _), want) in got.iter().zip(alone(model, n)) {
            // Token for token and the same length.
            assert_eq!(toks, &want, "{policy} at {t}: differs from {model} alone");
            assert!(
                writers.iter().all(|&w| w == writer),
                "{policy} at {t}: {writers:?}"
            );
        }
    }
    let a = routed(&group([small, LARGE], policy, kwargs(mid)), 16);
    let b = routed(&group([small, LARGE], policy, kwargs(mid)), 16);
    check_accounting(&a);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            x, y,
            "{policy}: greedy routed generation is not deterministic"
        );
    }
    let share = large_share(&a);
    assert!(
        share > 0.0 && share < 1.0,
        "{policy} at {mid}: large share {share} (the share must move between the extremes)"
    );
}

#[test]
fn r2r_routes_by_the_router_probability() {
    let path = fixture().router("r2r-conv");
    let mut ck = RouterCheckpoint::open(Path::new(&path), tch::Device::Cpu).unwrap();
    let net = R2rNet::load(&mut ck).unwrap();
    let mid = median_first_signal(SMALL, |h, l, emb, toks| {
        let ids = Tensor::from_slice(&toks.iter().map(|&t| t as i64).collect::<Vec<_>>());
        Vec::<f32>::try_from(&net.forward(h, &emb.index_select(0, &ids), l).unwrap()).unwrap()
    });
    check_policy(
        SMALL,
        "R2R",
        |t| serde_json::json!({"router_path": path, "threshold": t}),
        1.0,
        0.0,
        mid,
    );
}

#[test]
fn citer_routes_low_confidence_tokens() {
    let path = fixture().router("citer-conv");
    let mut ck = RouterCheckpoint::open(Path::new(&path), tch::Device::Cpu).unwrap();
    let net = CiterNet::load(&mut ck).unwrap();
    let mid = median_first_signal(SMALL, |h, _, _, _| {
        Vec::<f32>::try_from(&net.forward(h).unwrap()).unwrap()
    });
    check_policy(
        SMALL,
        "CITER",
        |t| serde_json::json!({"router_path": path, "threshold": t}),
        0.0,
        1.0,
        mid,
    );
}

#[test]
fn co_llm_defers_on_the_extra_head_column() {
    let mid = median_first_signal(SMALL_COLLM, |_, l, emb, _| {
        subserver::policy::collm::deferral_scores(l, emb.size()[0]).unwrap()
    });
    check_policy(
        SMALL_COLLM,
        "CoLLM",
        |t| serde_json::json!({"threshold": t}),
        1.0,
        0.0,
        mid,
    );
}

#[test]
fn each_policy_is_selectable_from_a_yaml_config() {
    let f = fixture();
    for (class, small, kwargs, built) in [
        (
            "r2r",
            SMALL,
            "{router_path: routers/r2r-conv, threshold: 0.5}",
            "R2R",
        ),
        ("CITER", SMALL, "{router_path: routers/citer-conv}", "CITER"),
        ("co-llm", SMALL_COLLM, "{threshold: 0.15}", "CoLLM"),
    ] {
        let yaml = format!(
            "model:\n  quick: {{path: models/{small}}}\n  reference: {{path: models/{LARGE}}}\n\
             system: {{entry_model: quick, kv_cache_tokens: 4096}}\n\
             scheduler_class: {class}\nscheduler_kwargs: {kwargs}\nbackend: tch\ndevice: cpu\ndtype: f32\n"
        );
        let file = f.root.join(format!("{small}-{class}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let cfg = EngineConfig::from_file(&file).unwrap();
        // The config selects this policy, on every member of the group.
        let members = subserver::service::build::members(&cfg).unwrap();
        let names: Vec<&str> = members.iter().map(|m| m.policy.name()).collect();
        assert_eq!(names, [built, built], "{class}");
        drop(members);
        let svc = Service::start(&cfg, None).unwrap();
        let (_, mut rx) = svc
            .group()
            .submit(prompts()[1].clone(), SamplingParams::greedy(10));
        loop {
            match rx.blocking_recv().expect("stream ended early") {
                StreamEvent::Finished { usage, .. } => {
                    assert_eq!(
                        usage.tokens_by_model.iter().sum::<usize>(),
                        usage.completion_tokens
                    );
                    assert!(usage.completion_tokens > 0);
                    break;
                }
                StreamEvent::Failed(e) => panic!("{class}: {e}"),
                StreamEvent::Token { .. } => {}
            }
        }
    }
    // A missing router is a precise config error.
    let yaml = format!(
        "model:\n  quick: {{path: models/{SMALL}}}\n  reference: {{path: models/{LARGE}}}\n\
         system: {{entry_model: quick, kv_cache_tokens: 4096}}\n\
         scheduler_class: R2R\nscheduler_kwargs: {{router_path: routers/none}}\nbackend: tch\n"
    );
    let file = f.root.join("missing-router.yaml");
    std::fs::write(&file, yaml).unwrap();
    let e = Service::start(&EngineConfig::from_file(&file).unwrap(), None)
        .err()
        .unwrap();
    assert!(e.to_string().contains("router_path"), "{e}");
}

#[test]
fn target_large_share_steers_router_thresholds() {
    // CITER sends a token large when confidence < τ: a high target must
    // raise τ, a near-zero target must lower it, live, through the group's cell.
    let f = fixture();
    for (target, rises) in [(0.95, true), (0.01, false)] {
        let yaml = format!(
            "model:\n  quick: {{path: models/{SMALL}}}\n  reference: {{path: models/{LARGE}}}\n\
             system: {{entry_model: quick, kv_cache_tokens: 8192}}\n\
             scheduler_class: CITER\nscheduler_kwargs: {{router_path: routers/citer-conv, threshold: 0.5}}\n\
             target_large_share: {target}\nbackend: tch\ndevice: cpu\n"
        );
        let file = f.root.join(format!("citer-target-{target}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let svc = Service::start(&EngineConfig::from_file(&file).unwrap(), None).unwrap();
        let rxs: Vec<_> = (0..4)
            .map(|i| {
                let mut p = prompts()[i % 3].clone();
                p.push(100 + i as u32);
                svc.group().submit(p, SamplingParams::greedy(40)).1
            })
            .collect();
        for mut rx in rxs {
            let (_, writers, usage) = common::collect_stream(&mut rx);
            assert_eq!(writers.len(), usage.completion_tokens);
        }
        let t = svc.group().stats(0).routing_threshold.expect("steered");
        assert_eq!(t > 0.5, rises, "target {target}: threshold {t}");
    }
}

#[test]
fn gen_random_writes_a_co_llm_head() {
    use subserver::runner::{ModelRunner, StepBatch, StepItem};
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m");
    let o = Command::new(common::binary())
        .args([
            "gen-random",
            "--preset",
            "tiny",
            "--layers",
            "1",
            "--deferral-columns",
            "1",
        ])
        .arg("--tokenizer-dir")
        .arg(common::cache_dir().join("assets/qwen3-tokenizer"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["deferral_columns"], 1);
    let mut r = runner(&out);
    let vocab = r.info().vocab_size;
    r.kv().admit(1, &[1, 2, 3]).unwrap();
    let step = r
        .forward(&StepBatch {
            entropy_items: vec![],
            items: vec![StepItem {
                rid: 1,
                start: 0,
                tokens: vec![1, 2, 3],
            }],
        })
        .unwrap();
    assert_eq!(step.logits.as_ref().unwrap().size(), [1, vocab as i64 + 1]);
    // The deferral column rides after the vocabulary: sampling reads only `vocab` columns.
    assert_eq!(step.logits_rows().unwrap()[0].len(), vocab + 1);
}

#[test]
fn a_torch_file_as_router_path_points_at_the_converter() {
    let tmp = tempfile::tempdir().unwrap();
    let pt = tmp.path().join("router.pt");
    std::fs::write(&pt, b"x").unwrap();
    let at = Placement {
        model: 0,
        num_models: 2,
        entry: 0,
    };
    for policy in ["R2R", "CITER"] {
        let e = build(policy, &serde_json::json!({"router_path": pt}), at)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("scheduler_kwargs.router_path") && e.contains("convert-router"),
            "{e}"
        );
    }
}
