//! The R2R router scored on held-out answers by our engine and our router,
//! not by the trainer: the entry model of an R2R config runs the teacher's
//! answers teacher forced (`heldout::teacher_forced`), and at each answer
//! position the policy the service would build from that config
//! (`R2rPolicy::from_kwargs`, the same checkpoint loader, threshold and
//! predicate) routes the exit's greedy token, while the network it loads
//! (`load_router` + `R2rNet`, read through `HandoverSignal::signals`, the
//! serve-time path) gives the divergence probability. The label is
//! r2r_router.py's: the exit's top-1 differs from the teacher's. AUC,
//! share and precision are computed here, so a leak between the splits, a
//! wrong label or a scoring bug in the trainer cannot pass on its word.

use subserver::config::EngineConfig;
use subserver::policy::handover::{load_router, HandoverSignal};
use subserver::policy::r2r::{diverges, R2rPolicy};
use subserver::policy::router::r2r_net::R2rNet;
use subserver::policy::{Placement, PolicyEnv};
use subserver::routing::{Dest, RouteItem, RoutingPolicy, StepView};

use super::heldout::{teacher_forced, Item};

/// Every answer position of the scored items, flattened in step order.
#[derive(Debug, Default)]
pub struct Scored {
    /// The router's divergence probability.
    pub probability: Vec<f32>,
    /// Whether the policy handed the position to the large model.
    pub flagged: Vec<bool>,
    /// The label: the exit's greedy top-1 is not the teacher's top-1.
    pub diverges: Vec<bool>,
    /// The bar the policy routes at (the checkpoint's calibrated threshold
    /// unless the config passes one).
    pub threshold: f64,
}

/// Scores `items` under `cfg`'s R2R policy, at its entry (small) model.
pub fn score_r2r(cfg: &EngineConfig, items: &[Item]) -> Scored {
    let entry = cfg.entry_index();
    let spec = &cfg.models()[entry];
    let kwargs = serde_json::Value::Object(cfg.policy().kwargs.clone());
    let at = Placement::member(cfg, entry);
    // As the service builds it (service/build.rs), on the CPU.
    let env = PolicyEnv {
        base_dir: cfg.base_dir().to_path_buf(),
        ..PolicyEnv::default()
    };
    let mut policy = R2rPolicy::from_kwargs(&kwargs, at, &env).unwrap();
    let threshold = policy
        .knob()
        .expect("R2R at the entry has a bar")
        .cell
        .get();
    // The policy keeps its network private; the same loader gives a twin
    // whose probabilities AUC ranks (`flagged` must agree with them).
    let (net, _, _) = load_router(&kwargs, &env, R2rNet::load).unwrap();
    let mut s = Scored {
        threshold,
        ..Scored::default()
    };
    let model = spec.path.as_deref().expect("the entry model has a path");
    teacher_forced(model, spec.dtype, items, |step| {
        let rows = step.out.logits_rows().unwrap();
        let route_items: Vec<RouteItem> = step
            .live
            .iter()
            .zip(&rows)
            .map(|(&i, row)| RouteItem {
                rid: i as u64,
                home: at.entry,
                // Greedy: the token the exit would write here.
                token: kernels::argmax(row).unwrap(),
                position: items[i].answer_from + step.j,
                written_this_turn: step.j,
                seed: 0,
                prompt_entropy: None,
            })
            .collect();
        let view = StepView {
            model: at.model,
            num_models: at.num_models,
            items: &route_items,
            logits: step.out.logits.as_ref(),
            hidden: step.out.hidden.as_ref(),
            embeddings: step.embeddings,
            signals: None,
        };
        s.probability.extend(net.signals(&view).unwrap());
        s.flagged.extend(policy.route(&view).iter().map(|d| {
            matches!(
                d,
                Dest::Peer {
                    keep_token: false,
                    ..
                }
            )
        }));
        s.diverges.extend(
            step.live
                .iter()
                .zip(&route_items)
                .map(|(&i, r)| r.token != items[i].top1[step.j]),
        );
    });
    let routed_as_scored = s
        .probability
        .iter()
        .zip(&s.flagged)
        .all(|(&p, &f)| diverges(p, threshold) == f);
    assert!(
        routed_as_scored,
        "the policy's hand-overs are not its network's probabilities at its threshold"
    );
    s
}

/// Area under the ROC curve of `scores` for `labels` (the Mann-Whitney
/// rank statistic, tied scores counted half); `None` without both classes.
pub fn auc(scores: &[f32], labels: &[bool]) -> Option<f64> {
    assert_eq!(scores.len(), labels.len());
    let pos = labels.iter().filter(|&&l| l).count();
    let neg = labels.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // 1-based ranks, each run of equal scores given its mean rank.
    let mut ranks = vec![0.0f64; scores.len()];
    let mut from = 0;
    while from < order.len() {
        let mut to = from + 1;
        while to < order.len() && scores[order[to]] == scores[order[from]] {
            to += 1;
        }
        let mean = (from + 1 + to) as f64 / 2.0;
        for &k in &order[from..to] {
            ranks[k] = mean;
        }
        from = to;
    }
    let pos_ranks: f64 = ranks
        .iter()
        .zip(labels)
        .filter(|(_, &l)| l)
        .map(|(r, _)| r)
        .sum();
    let u = pos_ranks - (pos * (pos + 1)) as f64 / 2.0;
    Some(u / (pos * neg) as f64)
}

/// What a set of hand-overs achieves against the labels.
#[derive(Debug, Clone, Copy)]
pub struct AtThreshold {
    /// Share of positions handed to the large model.
    pub share: f64,
    /// Share of the handed positions that diverge.
    pub precision: f64,
    /// Share of the diverging positions that were handed.
    pub recall: f64,
}

/// Share, precision and recall of `flagged` against `labels`.
pub fn at_threshold(flagged: &[bool], labels: &[bool]) -> AtThreshold {
    assert_eq!(flagged.len(), labels.len());
    let count = |f: &dyn Fn(bool, bool) -> bool| {
        flagged
            .iter()
            .zip(labels)
            .filter(|(&a, &b)| f(a, b))
            .count() as f64
    };
    let (hit, flags, pos) = (count(&|a, b| a && b), count(&|a, _| a), count(&|_, b| b));
    AtThreshold {
        share: flags / flagged.len().max(1) as f64,
        precision: hit / flags.max(1.0),
        recall: hit / pos.max(1.0),
    }
}

/// The share of `true` labels (the base divergence rate).
pub fn base_rate(labels: &[bool]) -> f64 {
    labels.iter().filter(|&&l| l).count() as f64 / labels.len().max(1) as f64
}
