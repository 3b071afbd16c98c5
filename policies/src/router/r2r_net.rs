//! The R2R router network (the official `HiddenStatesTokenLMHeadLogitsClassifier`):
//!
//! ```text
//! l = logits_projection(top-k raw logits, sorted descending)      k -> H
//! x = combined_projection(cat[h, embed(token), l])               2H+E -> d0
//! x = backbone.input_projection(x)                               d0 -> d0
//! x = x + mlp.3(GELU(mlp.0(layer_norm(x))))   per block i        (dim_change on width changes)
//! p = sigmoid(output_layer.1(output_layer.0(x)))                  LN, d -> 1
//! ```
//!
//! `h` is the small model's final hidden state, `embed` its token embedding
//! matrix. With `normalize_input`, `h` and the embedding go through their
//! own LayerNorms and the top-k logits through a softmax first. Widths are
//! read off the weights (the official code records only the constructor
//! arguments a trainer passed) and checked against `init_args` where it
//! records them; the official router is `H`=1024 (Qwen3-0.6B), k = 100,
//! `hidden_dims` = six 1024s (six blocks, ~54.7M parameters), expansion 4.

use tch::{Kind, Tensor};

use crate::router::checkpoint::{LayerNorm, Linear, RouterCheckpoint, RouterError};

/// The class the published R2R routers are saved as.
pub const MODEL_TYPE: &str = "HiddenStatesTokenLMHeadLogitsClassifier";

struct Block {
    norm: LayerNorm,
    up: Linear,
    down: Linear,
    dim_change: Option<Linear>,
}

/// A loaded R2R router.
pub struct R2rNet {
    hidden_size: i64,
    embed_size: i64,
    top_k: i64,
    input_norms: Option<(LayerNorm, LayerNorm)>,
    logits_projection: Linear,
    combined_projection: Linear,
    input_projection: Linear,
    blocks: Vec<Block>,
    output_norm: LayerNorm,
    output: Linear,
}

impl R2rNet {
    /// Builds the network from a converted checkpoint, checking every shape.
    pub fn load(ck: &mut RouterCheckpoint) -> Result<Self, RouterError> {
        check_supported(ck)?;
        let inputs = load_inputs(ck)?;
        let input_projection =
            load_input_projection(ck, inputs.combined_projection.out_features())?;
        let backbone = load_blocks(ck, input_projection.out_features())?;
        check_hidden_dims(ck, &backbone.dims)?;
        let (output_norm, output) = load_output(ck, backbone.width)?;
        Ok(Self {
            hidden_size: inputs.hidden_size,
            embed_size: inputs.embed_size,
            top_k: inputs.top_k,
            input_norms: inputs.input_norms,
            logits_projection: inputs.logits_projection,
            combined_projection: inputs.combined_projection,
            input_projection,
            blocks: backbone.blocks,
            output_norm,
            output,
        })
    }

    /// Width of the hidden state it reads (the small model's `hidden_size`).
    pub fn hidden_size(&self) -> i64 {
        self.hidden_size
    }

    /// Width of the token embedding it reads.
    pub fn embed_size(&self) -> i64 {
        self.embed_size
    }

    /// How many of the largest logits it reads.
    pub fn top_k(&self) -> i64 {
        self.top_k
    }

    /// Residual blocks in the backbone.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Divergence probabilities `[B]` from hidden states `[B, H]`, embeddings
    /// of the sampled tokens `[B, E]` and full logits `[B, V]` (any float
    /// dtype; computed in float32 on the router's device).
    pub fn forward(
        &self,
        hidden: &Tensor,
        token_embeddings: &Tensor,
        logits: &Tensor,
    ) -> Result<Tensor, tch::TchError> {
        let _guard = tch::no_grad_guard();
        let device = self.output.weight.device();
        let f32 = |t: &Tensor| t.f_to_device(device)?.f_to_kind(Kind::Float);
        let (mut h, mut e) = (f32(hidden)?, f32(token_embeddings)?);
        let (mut top, _) = f32(logits)?.f_topk(self.top_k, -1, true, true)?;
        if let Some((nh, ne)) = &self.input_norms {
            h = nh.forward(&h)?;
            e = ne.forward(&e)?;
            top = top.f_softmax(-1, Kind::Float)?;
        }
        let l = self.logits_projection.forward(&top)?;
        let x = self
            .combined_projection
            .forward(&Tensor::f_cat(&[h, e, l], -1)?)?;
        let mut x = self.input_projection.forward(&x)?;
        for b in &self.blocks {
            let y = b
                .down
                .forward(&b.up.forward(&b.norm.forward(&x)?)?.f_gelu("none")?)?;
            let residual = match &b.dim_change {
                Some(l) => l.forward(&x)?,
                None => x,
            };
            x = residual.f_add(&y)?;
        }
        let out = self.output.forward(&self.output_norm.forward(&x)?)?;
        out.f_squeeze_dim(-1)?.f_sigmoid()
    }
}

/// The input side: the logits projection, the combined projection and the
/// optional input LayerNorms, with the widths they fix.
struct Inputs {
    hidden_size: i64,
    embed_size: i64,
    top_k: i64,
    input_norms: Option<(LayerNorm, LayerNorm)>,
    logits_projection: Linear,
    combined_projection: Linear,
}

/// The residual blocks, the widths before each block and after the last.
struct Backbone {
    blocks: Vec<Block>,
    dims: Vec<usize>,
    width: i64,
}

/// Refuses other classes and the position embedding the released routers
/// do not use.
fn check_supported(ck: &RouterCheckpoint) -> Result<(), RouterError> {
    if let Some(t) = ck.meta.model_type.as_deref() {
        if t != MODEL_TYPE {
            return Err(ck.arch_error(format!(
                "model_type `{t}` is not supported (R2R routers: `{MODEL_TYPE}`)"
            )));
        }
    }
    if ck.has("backbone.position_embedding")
        || ck.init_bool("use_position_embedding")? == Some(true)
    {
        return Err(ck.arch_error(
            "use_position_embedding is not supported (the released routers do not use it)",
        ));
    }
    Ok(())
}

/// The logits and combined projections and the input LayerNorms; `H`, `k`
/// and `E` are read off their shapes and checked against `init_args`.
fn load_inputs(ck: &mut RouterCheckpoint) -> Result<Inputs, RouterError> {
    let logits_projection = ck.linear("logits_projection")?;
    let (hidden_size, top_k) = (
        logits_projection.out_features(),
        logits_projection.in_features(),
    );
    ck.check_init("hidden_states_size", hidden_size as usize)?;
    ck.check_init("logits_size", top_k as usize)?;
    let combined_projection = ck.linear("combined_projection")?;
    let embed_size = combined_projection.in_features() - 2 * hidden_size;
    if embed_size <= 0 {
        return Err(ck.arch_error(format!(
            "combined_projection takes {} inputs; expected 2 x {hidden_size} (hidden, \
             projected logits) plus the token embedding width",
            combined_projection.in_features()
        )));
    }
    let normalize = ck.has("layer_norm_hidden_states.weight");
    if let Some(flag) = ck.init_bool("normalize_input")? {
        if flag != normalize {
            return Err(ck.arch_error(format!(
                "init_args.normalize_input is {flag} but the input LayerNorms are {}",
                if normalize { "present" } else { "absent" }
            )));
        }
    }
    let input_norms = if normalize {
        Some((
            ck.layer_norm("layer_norm_hidden_states", hidden_size)?,
            ck.layer_norm("layer_norm_token", embed_size)?,
        ))
    } else {
        None
    };
    Ok(Inputs {
        hidden_size,
        embed_size,
        top_k,
        input_norms,
        logits_projection,
        combined_projection,
    })
}

/// `backbone.input_projection`, which must take the combined projection's `d0`.
fn load_input_projection(ck: &mut RouterCheckpoint, d0: i64) -> Result<Linear, RouterError> {
    let input_projection = ck.linear("backbone.input_projection")?;
    if input_projection.in_features() != d0 {
        return Err(ck.arch_error(format!(
            "backbone.input_projection takes {} inputs, combined_projection gives {d0}",
            input_projection.in_features()
        )));
    }
    Ok(input_projection)
}

/// Every `backbone.blocks.{i}` present, chained from `width`, with one
/// expansion factor (checked against `init_args`).
fn load_blocks(ck: &mut RouterCheckpoint, mut width: i64) -> Result<Backbone, RouterError> {
    let mut dims = vec![width as usize];
    let mut blocks = Vec::new();
    let mut expansion = None;
    while ck.has(&format!(
        "backbone.blocks.{}.layer_norm.weight",
        blocks.len()
    )) {
        let block = load_block(ck, blocks.len(), width, &mut expansion)?;
        width = block.down.out_features();
        blocks.push(block);
        dims.push(width as usize);
    }
    if blocks.is_empty() {
        return Err(ck.arch_error("no backbone.blocks.0 (is this an R2R router?)"));
    }
    if let Some(e) = expansion {
        ck.check_init("expansion_factor", e as usize)?;
    }
    Ok(Backbone {
        blocks,
        dims,
        width,
    })
}

/// Block `i` from `width`: its LayerNorm, MLP and (on a width change)
/// `dim_change`; its expansion factor must match the blocks' before it.
fn load_block(
    ck: &mut RouterCheckpoint,
    i: usize,
    width: i64,
    expansion: &mut Option<i64>,
) -> Result<Block, RouterError> {
    let p = format!("backbone.blocks.{i}");
    let norm = ck.layer_norm(&format!("{p}.layer_norm"), width)?;
    let up = ck.linear(&format!("{p}.mlp.0"))?;
    let down = ck.linear(&format!("{p}.mlp.3"))?;
    if up.in_features() != width || down.in_features() != up.out_features() {
        return Err(ck.arch_error(format!(
            "{p}.mlp: shapes [{}, {}] and [{}, {}] do not chain from width {width}",
            up.out_features(),
            up.in_features(),
            down.out_features(),
            down.in_features()
        )));
    }
    let out = down.out_features();
    let dim_change = if out != width {
        let l = ck.linear(&format!("{p}.dim_change"))?;
        if l.in_features() != width || l.out_features() != out {
            return Err(ck.arch_error(format!("{p}.dim_change does not map {width} to {out}")));
        }
        Some(l)
    } else {
        None
    };
    let e = up.out_features() / width;
    if e * width != up.out_features() || expansion.is_some_and(|x| x != e) {
        return Err(ck.arch_error(format!("{p}.mlp.0: inconsistent expansion factor")));
    }
    *expansion = Some(e);
    Ok(Block {
        norm,
        up,
        down,
        dim_change,
    })
}

/// Block i maps hidden_dims[i] to hidden_dims[i + 1], the last one to
/// itself: the widths before each block are the recorded hidden_dims.
fn check_hidden_dims(ck: &RouterCheckpoint, dims: &[usize]) -> Result<(), RouterError> {
    if let Some(recorded) = ck
        .meta
        .init_args
        .get("hidden_dims")
        .and_then(|v| v.as_array())
    {
        let recorded: Vec<usize> = recorded
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as usize)
            .collect();
        let from_weights = &dims[..dims.len() - 1];
        if recorded != from_weights {
            return Err(ck.arch_error(format!(
                "init_args.hidden_dims is {recorded:?} but the weights have {from_weights:?}"
            )));
        }
    }
    Ok(())
}

/// `backbone.output_layer`: a LayerNorm over `width`, then `width -> 1`.
fn load_output(ck: &mut RouterCheckpoint, width: i64) -> Result<(LayerNorm, Linear), RouterError> {
    let output_norm = ck.layer_norm("backbone.output_layer.0", width)?;
    let output = ck.linear("backbone.output_layer.1")?;
    if output.in_features() != width || output.out_features() != 1 {
        return Err(ck.arch_error(format!(
            "backbone.output_layer.1 is [{}, {}], expected [1, {width}]",
            output.out_features(),
            output.in_features()
        )));
    }
    Ok((output_norm, output))
}
