//! `ModelRunner` on libtorch: a `Decoder`, its KV tensors, and the KV bookkeeping.

use std::path::{Path, PathBuf};

use tch::{Device, Tensor};
use tracing::info;

use crate::config::DType;
use crate::cuda::graphs::{DecodeStep, GraphCounts};
use crate::cuda::{CudaExec, CudaOptions};
use crate::device::ensure_device;
use crate::error::EngineError;
use crate::kv::storage::{bytes_per_block, KvStorage};
use crate::kv::KvManager;
use crate::model::decoder::Decoder;
use crate::model::dir::{ModelDir, WeightSource};
use crate::model::quantized::{self, QuantWeights};
use crate::model::weights::Weights;
use crate::runner::layout::{BatchLayout, LayoutItem};
use crate::runner::memory::{num_blocks, KvBudget};
use crate::runner::{ModelRunner, RunnerInfo, StepBatch, StepOutput};

/// How to load a model.
#[derive(Debug, Clone)]
pub struct TchRunnerOptions {
    /// Hugging Face model directory.
    pub model_dir: PathBuf,
    /// Where weights, activations and KV live.
    pub device: Device,
    /// Weight and activation dtype.
    pub dtype: DType,
    /// On the CPU, a GGUF-backed model's projections are computed on the
    /// file's quantized blocks (`dtype: auto`); else dequantized to `dtype`.
    pub keep_quantized: bool,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Size of the KV pool.
    pub kv_budget: KvBudget,
    /// Reuse KV of earlier requests with the same prefix.
    pub enable_prefix_cache: bool,
    /// Streams and CUDA graphs (CUDA devices only).
    pub cuda: CudaOptions,
}

impl TchRunnerOptions {
    /// Defaults for `dir`: CPU, f32, blocks of 16, 20% of free memory, prefix cache on.
    pub fn new(dir: &Path) -> Self {
        Self {
            model_dir: dir.to_path_buf(),
            device: Device::Cpu,
            dtype: DType::F32,
            keep_quantized: false,
            block_size: 16,
            kv_budget: KvBudget::Fraction(0.2),
            enable_prefix_cache: true,
            cuda: CudaOptions::default(),
        }
    }
}

/// A loaded model with its KV cache.
pub struct TchRunner {
    decoder: Decoder,
    storage: KvStorage,
    kv: KvManager,
    info: RunnerInfo,
    exec: CudaExec,
}

impl TchRunner {
    /// Loads weights, checks them against the config, and sizes the KV pool.
    pub fn load(opts: &TchRunnerOptions) -> Result<Self, EngineError> {
        if opts.block_size == 0 {
            return Err(EngineError::InvalidRequest(
                "block_size must be positive".into(),
            ));
        }
        ensure_device(opts.device)?;
        let dir = ModelDir::open(&opts.model_dir)?;
        let kind: tch::Kind = opts.dtype.into();
        let (weights, quant) = match dir.weight_source()? {
            WeightSource::Safetensors(files) => (
                Weights::load(&dir.path, &files, kind, opts.device)?,
                QuantWeights::default(),
            ),
            WeightSource::Gguf(gguf) if opts.keep_quantized && opts.device == tch::Device::Cpu => {
                quantized::load(&dir.path, &gguf, kind)?
            }
            WeightSource::Gguf(gguf) => (
                Weights::load_gguf(&dir.path, &gguf, kind, opts.device)?,
                QuantWeights::default(),
            ),
        };
        let decoder = Decoder::with_quantized(&dir.config, weights, quant, kind, opts.device)?;
        info!(model = %dir.path.display(), precision = decoder.precision(), "weights loaded");
        Self::with_decoder(decoder, &dir, opts)
    }

    /// Wraps an already-built decoder (random weights made on the device, tests).
    pub fn with_decoder(
        decoder: Decoder,
        dir: &ModelDir,
        opts: &TchRunnerOptions,
    ) -> Result<Self, EngineError> {
        let cfg = decoder.config().clone();
        let per_block = bytes_per_block(
            cfg.num_hidden_layers,
            opts.block_size,
            cfg.kv_heads(),
            cfg.head_dim(),
            decoder.kind(),
        );
        let blocks = num_blocks(opts.kv_budget, opts.device, per_block, opts.block_size)?;
        // One scratch slot past the pool, owned by no request: the padding
        // rows of CUDA graphs write there.
        let pad_slot = (blocks * opts.block_size) as i64;
        let storage = KvStorage::new(
            cfg.num_hidden_layers,
            blocks * opts.block_size + 1,
            cfg.kv_heads(),
            cfg.head_dim(),
            decoder.kind(),
            opts.device,
        )?;
        info!(
            model = %dir.path.display(),
            blocks,
            tokens = blocks * opts.block_size,
            mib = (blocks * per_block) >> 20,
            dtype = ?decoder.kind(),
            "KV cache allocated"
        );
        let name = dir
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let info = RunnerInfo {
            name,
            vocab_size: cfg.vocab_size,
            hidden_size: cfg.hidden_size,
            eos_ids: dir.eos_ids(),
            max_context: decoder.max_positions(),
            block_size: opts.block_size,
            num_blocks: blocks,
        };
        let exec = CudaExec::new(
            &info.name,
            &opts.cuda,
            opts.device,
            info.max_context,
            pad_slot,
        )?;
        Ok(Self {
            decoder,
            storage,
            kv: KvManager::new(blocks, opts.block_size, opts.enable_prefix_cache)?,
            info,
            exec,
        })
    }

    /// CUDA graph hits, captures and misses, when graphs are on.
    pub fn graph_counts(&self) -> Option<GraphCounts> {
        self.exec.graph_counts()
    }

    /// A pure-decode step through a CUDA graph; `None`: run it eagerly.
    fn decode_graph(
        &mut self,
        batch: &StepBatch,
        slots: &[Vec<i64>],
    ) -> Result<Option<StepOutput>, EngineError> {
        if !self.exec.has_graphs() || batch.items.iter().any(|i| i.tokens.len() != 1) {
            return Ok(None);
        }
        if !batch.entropy_items.is_empty() {
            self.exec.count_miss();
            return Ok(None);
        }
        let steps: Vec<DecodeStep<'_>> = batch
            .items
            .iter()
            .zip(slots)
            .map(|(item, s)| DecodeStep {
                token: item.tokens[0],
                slots: s,
            })
            .collect();
        let out = self.exec.decode(&self.decoder, &mut self.storage, &steps)?;
        Ok(out.map(|(logits, hidden)| StepOutput {
            logits: Some(logits),
            hidden: Some(hidden),
            tokens: None,
            entropy_sums: None,
        }))
    }

    /// Replaces the CUDA execution (tests drive graphs on the CPU).
    #[cfg(test)]
    pub(crate) fn set_exec(&mut self, exec: CudaExec) {
        self.exec = exec;
    }

    /// The scratch slot past the pool, if the storage has one.
    #[cfg(test)]
    pub(crate) fn pad_slot(&self) -> i64 {
        (self.info.num_blocks * self.info.block_size) as i64
    }

    /// The decoder (routers read its embedding matrix).
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }
}

impl ModelRunner for TchRunner {
    fn info(&self) -> &RunnerInfo {
        &self.info
    }

    fn forward(&mut self, batch: &StepBatch) -> Result<StepOutput, EngineError> {
        self.exec.enter()?;
        let mut slots: Vec<Vec<i64>> = Vec::with_capacity(batch.items.len());
        for item in &batch.items {
            let end = item.start + item.tokens.len();
            if end > self.info.max_context {
                return Err(EngineError::InvalidRequest(format!(
                    "request {}: context {end} exceeds the model's {}",
                    item.rid, self.info.max_context
                )));
            }
            self.kv.reserve(item.rid, end)?;
            let mut s = Vec::with_capacity(end);
            self.kv.slots(item.rid, 0, end, &mut s)?;
            slots.push(s);
        }
        if let Some(out) = self.decode_graph(batch, &slots)? {
            return Ok(out);
        }
        let items: Vec<LayoutItem<'_>> = batch
            .items
            .iter()
            .zip(&slots)
            .map(|(item, s)| LayoutItem {
                tokens: &item.tokens,
                start: item.start,
                slots: s,
            })
            .collect();
        let layout = BatchLayout::build(&items, self.decoder.device())?;
        // Rows (in the `[T]` new tokens) of the items whose entropies are wanted.
        let mut starts = Vec::with_capacity(batch.items.len());
        let mut offset = 0usize;
        for item in &batch.items {
            starts.push(offset);
            offset += item.tokens.len();
        }
        let rows: Vec<i64> = batch
            .entropy_items
            .iter()
            .filter_map(|&i| Some((starts.get(i)?, batch.items.get(i)?.tokens.len())))
            .flat_map(|(&s, n)| (s..s + n).map(|r| r as i64))
            .collect();
        let rows = (!rows.is_empty())
            .then(|| Tensor::f_from_slice(&rows)?.f_to_device(self.decoder.device()))
            .transpose()?;
        let (logits, hidden, entropies) =
            self.decoder
                .forward(&layout, &mut self.storage, rows.as_ref())?;
        let entropy_sums = entropies.map(|h| {
            let mut sums = vec![0.0f32; batch.items.len()];
            let mut next = h.into_iter();
            for &i in &batch.entropy_items {
                if let Some(item) = batch.items.get(i) {
                    sums[i] = next.by_ref().take(item.tokens.len()).sum();
                }
            }
            sums
        });
        Ok(StepOutput {
            logits: Some(logits),
            hidden: Some(hidden),
            tokens: None,
            entropy_sums,
        })
    }

    fn kv(&mut self) -> &mut KvManager {
        &mut self.kv
    }

    fn kv_ref(&self) -> &KvManager {
        &self.kv
    }

    fn embeddings(&self) -> Option<&tch::Tensor> {
        Some(self.decoder.embeddings())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use tch::{Device, Kind, Tensor};

    use super::{TchRunner, TchRunnerOptions};
    use crate::model::decoder::Decoder;
    use crate::model::dir::ModelDir;
    use crate::model::weights::Weights;
    use crate::runner::memory::KvBudget;
    use crate::runner::testing::{random_weights, tiny_config};

    use crate::cuda::graphs::eager::EagerGraphs;
    use crate::cuda::graphs::GraphCounts;
    use crate::cuda::{CudaExec, CudaOptions};
    use crate::model::paged_cpu::CpuAttention;
    use crate::runner::testing::{greedy_alone, tiny_runner};
    use crate::runner::{ModelRunner, StepBatch, StepItem};

    /// A request being decoded by the test: its next item, tokens and logits so far.
    type Decoding = (StepItem, Vec<u32>, Vec<Vec<f32>>);

    /// Greedy decode of one prompt alone: (tokens, logits of each step).
    fn alone(prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
        alone_reading(prompt, steps, CpuAttention::Paged)
    }

    /// [`alone`], with the CPU's attention reading K/V the given way.
    fn alone_reading(
        prompt: &[u32],
        steps: usize,
        mode: CpuAttention,
    ) -> (Vec<u32>, Vec<Vec<f32>>) {
        let mut r = tiny_runner(512, 4).unwrap();
        r.decoder().set_cpu_attention(mode);
        greedy_alone(&mut r, prompt, steps).unwrap()
    }

    fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    #[test]
    fn paged_attention_matches_the_gathered_path() {
        // 12 tokens: the prompt's prefill is paged too; 200: it is gathered
        // (past PAGED_MAX_ROWS) and only decode steps are paged.
        for len in [12u32, 200] {
            let prompt: Vec<u32> = (0..len).map(|i| (i * 37 + 5) % 97).collect();
            let (paged_toks, paged) = alone_reading(&prompt, 8, CpuAttention::Paged);
            let (toks, gathered) = alone_reading(&prompt, 8, CpuAttention::Gather);
            assert_eq!(paged_toks, toks, "prompt of {len}");
            let diff = max_diff(&paged, &gathered);
            assert!(diff < 1e-4, "prompt of {len}: logits differ by {diff}");
        }
    }

    #[test]
    fn ragged_batches_match_single_request_decoding() {
        let prompts: Vec<Vec<u32>> = vec![
            vec![3, 14, 15, 92, 65],
            vec![35, 89, 79, 32, 38, 46, 26, 43, 38],
            vec![27, 18],
        ];
        let steps = 8;
        let expected: Vec<_> = prompts.iter().map(|p| alone(p, steps)).collect();

        // Together: request 0 starts first; 1 arrives at step 2 and prefills in
        // two chunks (a multi-token extend mid-sequence); 2 arrives at step 3.
        let mut r = tiny_runner(512, 4).unwrap();
        let mut state: Vec<Option<Decoding>> = vec![None, None, None];
        let mut pending_chunks: Vec<Vec<u32>> = vec![vec![], prompts[1][5..].to_vec(), vec![]];
        for tick in 0..20 {
            for (i, arrive) in [(0usize, 0usize), (1, 2), (2, 3)] {
                if tick == arrive {
                    r.kv().admit(i as u64, &prompts[i]).unwrap();
                    let first = if i == 1 {
                        prompts[1][..5].to_vec()
                    } else {
                        prompts[i].clone()
                    };
                    state[i] = Some((
                        StepItem {
                            rid: i as u64,
                            start: 0,
                            tokens: first,
                        },
                        vec![],
                        vec![],
                    ));
                }
            }
            let active: Vec<usize> = (0..3)
                .filter(|&i| state[i].as_ref().is_some_and(|s| s.1.len() < steps))
                .collect();
            if active.is_empty() {
                break;
            }
            let batch = StepBatch {
                entropy_items: vec![],
                items: active
                    .iter()
                    .map(|&i| state[i].as_ref().unwrap().0.clone())
                    .collect(),
            };
            let rows = r.forward(&batch).unwrap().logits_rows().unwrap();
            for (&i, row) in active.iter().zip(rows) {
                let (item, toks, logits) = state[i].as_mut().unwrap();
                item.start += item.tokens.len();
                if !pending_chunks[i].is_empty() {
                    item.tokens = std::mem::take(&mut pending_chunks[i]);
                    continue;
                }
                let t = kernels::argmax(&row).unwrap();
                item.tokens = vec![t];
                toks.push(t);
                logits.push(row);
            }
        }
        for (i, (toks, rows)) in expected.iter().enumerate() {
            let (_, got_toks, got_rows) = state[i].as_ref().unwrap();
            assert_eq!(got_toks, toks, "request {i} tokens differ when batched");
            for (a, b) in got_rows.iter().zip(rows) {
                let diff = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                assert!(diff < 1e-4, "request {i}: batched logits differ by {diff}");
            }
        }
    }

    /// A tiny runner over copies of `w` (one set of weights for both runs
    /// of a comparison: the seeded generator is process-global, and tests
    /// run in parallel).
    fn runner_with(w: &HashMap<String, Tensor>) -> TchRunner {
        let cfg = tiny_config();
        let path = Path::new("tiny-random");
        let map = w.iter().map(|(k, v)| (k.clone(), v.copy())).collect();
        let decoder =
            Decoder::new(&cfg, Weights::from_map(path, map), Kind::Float, Device::Cpu).unwrap();
        let dir = ModelDir {
            path: path.to_path_buf(),
            config: cfg,
        };
        let mut opts = TchRunnerOptions::new(path);
        opts.kv_budget = KvBudget::Tokens(512);
        opts.block_size = 4;
        TchRunner::with_decoder(decoder, &dir, &opts).unwrap()
    }

    /// Greedy decoding of three requests (one leaves after three steps, so
    /// the batch bucket changes), with or without decode graphs.
    fn decode_three(
        w: &HashMap<String, Tensor>,
        graphs: bool,
    ) -> (Vec<Vec<u32>>, Vec<Vec<f32>>, Option<GraphCounts>) {
        let prompts: Vec<Vec<u32>> = vec![vec![3, 14, 15], vec![9, 2, 6, 5, 3, 5], vec![8, 1]];
        let mut r = runner_with(w);
        if graphs {
            let (cap, pad) = (r.info().max_context, r.pad_slot());
            r.set_exec(CudaExec::with_graph_api(EagerGraphs, cap, pad, Device::Cpu));
        }
        let mut items: Vec<StepItem> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                r.kv().admit(i as u64, p).unwrap();
                StepItem {
                    rid: i as u64,
                    start: 0,
                    tokens: p.clone(),
                }
            })
            .collect();
        let (mut toks, mut rows) = (vec![vec![]; 3], vec![]);
        for step in 0..6 {
            let active: Vec<StepItem> = items
                .iter()
                .filter(|it| it.rid != 2 || step < 3)
                .cloned()
                .collect();
            let out = r.forward(&StepBatch::new(active.clone())).unwrap();
            for (it, row) in active.iter().zip(out.logits_rows().unwrap()) {
                let t = kernels::argmax(&row).unwrap();
                let item = &mut items[it.rid as usize];
                item.start += item.tokens.len();
                item.tokens = vec![t];
                toks[it.rid as usize].push(t);
                rows.push(row);
            }
        }
        (toks, rows, r.graph_counts())
    }

    /// What this checks is the graph path's plumbing on the CPU: padded
    /// static buffers, batch buckets and the capture / replay bookkeeping.
    /// `EagerGraphs` is a stand-in that "replays" by running the step again;
    /// a real CUDA capture is checked by `scripts/gpu-check.sh` (graphs on).
    #[test]
    fn padded_buckets_through_the_rerunning_graph_stand_in_match_eager_decoding() {
        let w = random_weights(&tiny_config(), 3);
        let (want_toks, want_rows, none) = decode_three(&w, false);
        assert_eq!(none, None);
        let (toks, rows, counts) = decode_three(&w, true);
        assert_eq!(toks, want_toks);
        for (a, b) in rows.iter().zip(&want_rows) {
            let diff = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(diff < 1e-4, "padded graph logits differ by {diff}");
        }
        // Step 0 is a prefill (eager, not a miss); steps 1-2 run at batch
        // bucket 4 (capture, replay), steps 3-5 at bucket 2 (capture, 2 replays).
        assert_eq!(
            counts,
            Some(GraphCounts {
                replays: 3,
                captures: 2,
                misses: 0
            })
        );
    }

    #[test]
    fn graphs_on_a_cpu_device_are_refused() {
        let opts = CudaOptions {
            graphs: true,
            streams: true,
        };
        let err = CudaExec::new("m", &opts, Device::Cpu, 64, 0).err().unwrap();
        assert!(err.to_string().contains("needs a CUDA device"), "{err}");
    }

    #[test]
    fn context_beyond_the_model_is_an_error_not_a_panic() {
        let mut r = tiny_runner(4096, 16).unwrap();
        let long: Vec<u32> = vec![1; 300];
        r.kv().admit(9, &long).unwrap();
        let err = r.forward(&StepBatch {
            entropy_items: vec![],
            items: vec![StepItem {
                rid: 9,
                start: 0,
                tokens: long,
            }],
        });
        assert!(err.err().unwrap().to_string().contains("exceeds"));
    }
}
