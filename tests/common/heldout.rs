//! The trainers' held-out numbers recomputed with our engine: the held-out
//! split the teacher file recorded (tools/heal/teacher.py, read through
//! tests/python/heldout_split.py) and our engine's greedy top-1 against the
//! teacher's tokens at every answer position (teacher forcing), so a leak
//! between splits or a scoring bug in a trainer fails a test instead of
//! being reported by the trainer itself.

use std::collections::HashSet;
use std::path::Path;

use subserver::config::DType;
use subserver::runner::memory::KvBudget;
use subserver::runner::tch_runner::{TchRunner, TchRunnerOptions};
use subserver::runner::{ModelRunner, StepBatch, StepItem, StepOutput};
use tch::Tensor;

/// The teacher file make writes (`$(TEACHER)` in the Makefile).
pub const TEACHER: &str = "teacher/smollm2-135m.pt";

/// One held-out item: prompt + the teacher's answer.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Item {
    /// Prompt and answer token ids.
    pub ids: Vec<u32>,
    /// Where the answer starts.
    pub answer_from: usize,
    /// Answer tokens (an ending EOS included).
    pub n: usize,
    /// The teacher's float32 top-1 at each answer position (transformers'
    /// teacher-forced pass): what r2r_router.py labels a divergence against.
    pub top1: Vec<u32>,
}

/// The teacher file's splits.
#[derive(Debug, serde::Deserialize)]
pub struct Split {
    /// Prompt ids of the training items.
    pub train_prompts: Vec<Vec<u32>>,
    /// The held-out items, in the file's order.
    pub holdout: Vec<Item>,
}

impl Split {
    /// The held-out items as r2r_router.py halves them: (calibration, test).
    /// It calibrates the threshold on the first half (`hold[:len // 2]`)
    /// and measures on the second; neither was trained on.
    pub fn router_halves(&self) -> (&[Item], &[Item]) {
        self.holdout.split_at(self.holdout.len() / 2)
    }
}

/// Reads the teacher file's splits; fails when a held-out prompt is also a
/// training prompt (a leak between the splits).
pub fn split() -> Split {
    let teacher = super::cache_dir().join(TEACHER);
    assert!(
        teacher.is_file(),
        "{} is missing: run `make assets`",
        teacher.display()
    );
    let stdout = super::run_script("heldout_split.py", &[&teacher]);
    let split: Split = serde_json::from_slice(&stdout).unwrap();
    assert!(!split.holdout.is_empty(), "no held-out items");
    let train: HashSet<&[u32]> = split.train_prompts.iter().map(Vec::as_slice).collect();
    for x in &split.holdout {
        assert!(
            !train.contains(&x.ids[..x.answer_from]),
            "a held-out prompt is also a training prompt"
        );
    }
    split
}

/// One teacher-forced step: the rows our engine computed for answer
/// position `j` of the `live` items (row `r` of `out` is item `live[r]`).
pub struct Forced<'a> {
    /// The answer position every live row predicts.
    pub j: usize,
    /// Indices (into the items) of the rows, in row order.
    pub live: &'a [usize],
    /// The forward's output: logits and final hidden states per row.
    pub out: &'a StepOutput,
    /// The runner's token embedding matrix (what a router embeds with).
    pub embeddings: Option<&'a Tensor>,
}

/// Runs `items` through our engine for `model` in `dtype`, teacher forced:
/// at each answer position every item still answering gets one row
/// predicting its next token, fed the teacher's tokens before it; `visit`
/// sees each step's rows. All items run as one batch.
pub fn teacher_forced(
    model: &Path,
    dtype: DType,
    items: &[Item],
    mut visit: impl FnMut(&Forced<'_>),
) {
    let mut opts = TchRunnerOptions::new(model);
    opts.dtype = dtype;
    opts.kv_budget = KvBudget::Tokens(items.iter().map(|x| x.ids.len() + 16).sum());
    let mut r = TchRunner::load(&opts).unwrap();
    let mut feed: Vec<StepItem> = items
        .iter()
        .enumerate()
        .map(|(i, x)| {
            r.kv().admit(i as u64, &x.ids[..x.answer_from]).unwrap();
            StepItem {
                rid: i as u64,
                start: 0,
                tokens: x.ids[..x.answer_from].to_vec(),
            }
        })
        .collect();
    let longest = items.iter().map(|x| x.n).max().unwrap_or(0);
    for j in 0..longest {
        // Items with an answer token j left; each row predicts that token.
        let live: Vec<usize> = (0..items.len()).filter(|&i| j < items[i].n).collect();
        for &i in &live {
            let end = feed[i].start + feed[i].tokens.len();
            r.kv().reserve(i as u64, end).unwrap();
        }
        let batch = StepBatch {
            items: live.iter().map(|&i| feed[i].clone()).collect(),
            entropy_items: vec![],
        };
        let out = r.forward(&batch).unwrap();
        visit(&Forced {
            j,
            live: &live,
            out: &out,
            embeddings: r.embeddings(),
        });
        for &i in &live {
            // Teacher forcing: the teacher's token goes in next.
            let x = &items[i];
            feed[i] = StepItem {
                rid: i as u64,
                start: x.answer_from + j,
                tokens: vec![x.ids[x.answer_from + j]],
            };
        }
    }
}

/// Per answer position of every item (in order): whether our engine's
/// greedy top-1 for `model` (f32), fed the teacher's tokens before it,
/// equals the teacher's token there.
pub fn top1_agrees(model: &Path, items: &[Item]) -> Vec<Vec<bool>> {
    let mut agrees: Vec<Vec<bool>> = vec![Vec::new(); items.len()];
    teacher_forced(model, DType::F32, items, |step| {
        let rows = step.out.logits_rows().unwrap();
        for (&i, row) in step.live.iter().zip(&rows) {
            let x = &items[i];
            agrees[i].push(kernels::argmax(row) == Some(x.ids[x.answer_from + step.j]));
        }
    });
    agrees
}

/// The fraction of `true` over every position of `items`.
pub fn rate(agrees: &[Vec<bool>]) -> f64 {
    let (hit, all) = agrees
        .iter()
        .flatten()
        .fold((0, 0), |(h, a), &ok| (h + usize::from(ok), a + 1));
    hit as f64 / all.max(1) as f64
}
