//! Test-only GGUF writer: builds small synthetic files byte by byte, so the
//! parser and importer can be tested without the real model.

use super::ggml_type::GgmlType;
use super::value::MetadataValue;

struct Tensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    offset: Option<u64>,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then serializes them as GGUF.
pub struct GgufBuilder {
    /// The GGUF version written in the header.
    pub version: u32,
    kvs: Vec<(String, MetadataValue)>,
    tensors: Vec<Tensor>,
}

fn type_code(v: &MetadataValue) -> u32 {
    match v {
        MetadataValue::U8(_) => 0,
        MetadataValue::I8(_) => 1,
        MetadataValue::U16(_) => 2,
        MetadataValue::I16(_) => 3,
        MetadataValue::U32(_) => 4,
        MetadataValue::I32(_) => 5,
        MetadataValue::F32(_) => 6,
        MetadataValue::Bool(_) => 7,
        MetadataValue::String(_) => 8,
        MetadataValue::Array(_) => 9,
        MetadataValue::U64(_) => 10,
        MetadataValue::I64(_) => 11,
        MetadataValue::F64(_) => 12,
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetadataValue) {
    match v {
        MetadataValue::U8(x) => out.push(*x),
        MetadataValue::I8(x) => out.push(*x as u8),
        MetadataValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::Bool(x) => out.push(u8::from(*x)),
        MetadataValue::String(s) => put_str(out, s),
        MetadataValue::Array(items) => {
            let elem = items.first().map(type_code).unwrap_or(4);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        MetadataValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetadataValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

impl GgufBuilder {
    /// An empty file of the given version.
    pub fn new(version: u32) -> Self {
        Self {
            version,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Appends a metadata entry.
    pub fn kv(&mut self, key: &str, value: MetadataValue) {
        self.kvs.push((key.to_string(), value));
    }

    /// Replaces (or appends) a metadata entry.
    pub fn set_kv(&mut self, key: &str, value: MetadataValue) {
        match self.kvs.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.kv(key, value),
        }
    }

    /// Removes a metadata entry.
    pub fn remove_kv(&mut self, key: &str) {
        self.kvs.retain(|(k, _)| k != key);
    }

    /// The metadata entries so far.
    pub fn metadata(&self) -> &[(String, MetadataValue)] {
        &self.kvs
    }

    /// Appends an F32 tensor; `dims` innermost first.
    pub fn tensor_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, GgmlType::F32, data);
    }

    /// Appends a tensor of any type from raw bytes, placed at the next aligned offset.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) {
        self.tensors.push(Tensor {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
            offset: None,
            data,
        });
    }

    /// Appends a tensor at an explicit offset (to build malformed files).
    pub fn tensor_raw(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        offset: u64,
        data: Vec<u8>,
    ) {
        self.tensors.push(Tensor {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
            offset: Some(offset),
            data,
        });
    }

    /// Drops a tensor by name.
    pub fn remove_tensor(&mut self, name: &str) {
        self.tensors.retain(|t| t.name != name);
    }

    /// Replaces a tensor's type and data, keeping its name and dims.
    pub fn replace_tensor(&mut self, name: &str, ty: GgmlType, data: Vec<u8>) {
        if let Some(t) = self.tensors.iter_mut().find(|t| t.name == name) {
            t.ty = ty;
            t.data = data;
        }
    }

    /// Serializes the file.
    pub fn build(&self) -> Vec<u8> {
        let alignment = self
            .kvs
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .filter(|a| a.is_power_of_two())
            .unwrap_or(32);
        let mut offsets = Vec::new();
        let mut next = 0u64;
        for t in &self.tensors {
            let off = t.offset.unwrap_or_else(|| next.next_multiple_of(alignment));
            offsets.push(off);
            next = off + t.data.len() as u64;
        }
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&type_code(v).to_le_bytes());
            put_value(&mut out, v);
        }
        for (t, off) in self.tensors.iter().zip(&offsets) {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&off.to_le_bytes());
        }
        let data_start = (out.len() as u64).next_multiple_of(alignment) as usize;
        out.resize(data_start, 0);
        for (t, off) in self.tensors.iter().zip(&offsets) {
            let at = data_start + *off as usize;
            if out.len() < at + t.data.len() {
                out.resize(at + t.data.len(), 0);
            }
            out[at..at + t.data.len()].copy_from_slice(&t.data);
        }
        out
    }
}

/// GPT-2's byte → printable-char map (`bytes_to_unicode`).
pub fn byte_level_alphabet() -> Vec<String> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut next = 256u32;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(c).expect("valid code point").to_string()
        })
        .collect()
}

/// Special tokens of the fixture tokenizer (ids 0, 1, 2).
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// A byte-level BPE vocabulary: the specials, the 256 byte symbols, then a
/// few merges that spell `hello` and ` w`.
pub fn tokenizer_metadata(b: &mut GgufBuilder, pre: &str) {
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ w"];
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    tokens.extend(byte_level_alphabet());
    tokens.extend(merges.iter().map(|m| m.replace(' ', "")));
    let types: Vec<MetadataValue> = (0..tokens.len())
        .map(|i| MetadataValue::I32(if i < SPECIALS.len() { 3 } else { 1 }))
        .collect();
    let strings =
        |v: Vec<String>| MetadataValue::Array(v.into_iter().map(MetadataValue::String).collect());
    b.kv("tokenizer.ggml.model", MetadataValue::String("gpt2".into()));
    b.kv("tokenizer.ggml.pre", MetadataValue::String(pre.into()));
    b.kv("tokenizer.ggml.tokens", strings(tokens));
    b.kv("tokenizer.ggml.token_type", MetadataValue::Array(types));
    b.kv(
        "tokenizer.ggml.merges",
        strings(merges.iter().map(|m| m.to_string()).collect()),
    );
    b.kv("tokenizer.ggml.bos_token_id", MetadataValue::U32(1));
    b.kv("tokenizer.ggml.eos_token_id", MetadataValue::U32(2));
    b.kv("tokenizer.ggml.unknown_token_id", MetadataValue::U32(0));
    b.kv("tokenizer.ggml.padding_token_id", MetadataValue::U32(2));
    b.kv("tokenizer.ggml.add_bos_token", MetadataValue::Bool(false));
    b.kv(
        "tokenizer.chat_template",
        MetadataValue::String("{{ messages[0]['content'] }}".into()),
    );
}

/// Vocabulary size of [`tokenizer_metadata`].
pub const FIXTURE_VOCAB: usize = 3 + 256 + 5;
/// Fixture model shape: hidden 32, 2 heads of 16, 1 KV head, MLP 64, 2 layers.
pub const FIXTURE_HIDDEN: usize = 32;

/// Deterministic values that are exact in f16 and in Q8_0 with scale 1/8:
/// multiples of 1/8 in [-8, 8].
pub fn fixture_values(seed: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 37 + seed * 101) % 129) as f32 - 64.0) / 8.0)
        .collect()
}

/// Q8_0 blocks for values that are multiples of 1/8 within ±16.
pub fn q8_0_exact(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for block in values.chunks(32) {
        out.extend_from_slice(&half::f16::from_f32(0.125).to_le_bytes());
        out.extend(block.iter().map(|v| ((v * 8.0) as i8) as u8));
    }
    out
}

/// `(transformers name, shape, values)` of each tensor an import must produce.
pub type ExpectedTensors = Vec<(String, Vec<usize>, Vec<f32>)>;

/// A complete tiny llama GGUF and the transformers tensors it must import to.
/// Tensor types: embedding Q8_0, norms F32, ffn_down F16, the rest F32; q/k
/// stored with llama.cpp's row permutation.
pub fn tiny_llama(tied: bool) -> (GgufBuilder, ExpectedTensors) {
    tiny_model("llama", tied)
}

/// A complete tiny qwen2 GGUF: as [`tiny_llama`] under `qwen2.*` keys, with
/// q/k/v biases and q/k stored as transformers holds them (llama.cpp's
/// converter permutes only llama's rows).
pub fn tiny_qwen2(tied: bool) -> (GgufBuilder, ExpectedTensors) {
    tiny_model("qwen2", tied)
}

/// `tiny_llama` or `tiny_qwen2`.
fn tiny_model(arch: &str, tied: bool) -> (GgufBuilder, ExpectedTensors) {
    let (h, inter, vocab, layers) = (FIXTURE_HIDDEN, 64usize, FIXTURE_VOCAB, 2usize);
    let qwen2 = arch == "qwen2";
    let mut b = GgufBuilder::new(3);
    b.kv("general.architecture", MetadataValue::String(arch.into()));
    b.kv("general.alignment", MetadataValue::U32(32));
    let key = |k: &str| format!("{arch}.{k}");
    b.kv(&key("block_count"), MetadataValue::U32(layers as u32));
    b.kv(&key("context_length"), MetadataValue::U32(256));
    b.kv(&key("embedding_length"), MetadataValue::U32(h as u32));
    b.kv(
        &key("feed_forward_length"),
        MetadataValue::U32(inter as u32),
    );
    b.kv(&key("attention.head_count"), MetadataValue::U32(2));
    b.kv(&key("attention.head_count_kv"), MetadataValue::U32(1));
    b.kv(&key("rope.freq_base"), MetadataValue::F32(10000.0));
    b.kv(
        &key("attention.layer_norm_rms_epsilon"),
        MetadataValue::F32(1e-5),
    );
    if !qwen2 {
        b.kv(&key("rope.dimension_count"), MetadataValue::U32(16));
    }
    tokenizer_metadata(&mut b, if qwen2 { "qwen2" } else { "smollm" });

    let mut expected = Vec::new();
    let mut seed = 0;
    let mut add = |b: &mut GgufBuilder, gguf: &str, hf: &str, shape: [usize; 2], kind: &str| {
        seed += 1;
        let (rows, cols) = (shape[0], shape[1]);
        let n = rows * cols;
        let values = fixture_values(seed, n);
        let dims: Vec<u64> = if rows == 1 {
            vec![cols as u64]
        } else {
            vec![cols as u64, rows as u64]
        };
        let stored = match kind {
            "q" if !qwen2 => {
                super::permute::permute_rows(&values, rows, cols, 2).expect("fixture shape")
            }
            "k" if !qwen2 => {
                super::permute::permute_rows(&values, rows, cols, 1).expect("fixture shape")
            }
            _ => values.clone(),
        };
        match kind {
            "q8" => b.tensor(gguf, &dims, GgmlType::Q8_0, q8_0_exact(&stored)),
            "f16" => {
                let data = stored
                    .iter()
                    .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                    .collect();
                b.tensor(gguf, &dims, GgmlType::F16, data)
            }
            _ => b.tensor_f32(gguf, &dims, &stored),
        }
        let shape = if rows == 1 {
            vec![cols]
        } else {
            vec![rows, cols]
        };
        expected.push((hf.to_string(), shape, values));
    };
    add(
        &mut b,
        "token_embd.weight",
        "model.embed_tokens.weight",
        [vocab, h],
        "q8",
    );
    for i in 0..layers {
        let g = |s: &str| format!("blk.{i}.{s}.weight");
        let t = |s: &str| format!("model.layers.{i}.{s}.weight");
        add(
            &mut b,
            &g("attn_norm"),
            &t("input_layernorm"),
            [1, h],
            "f32",
        );
        add(&mut b, &g("attn_q"), &t("self_attn.q_proj"), [h, h], "q");
        add(&mut b, &g("attn_k"), &t("self_attn.k_proj"), [16, h], "k");
        add(&mut b, &g("attn_v"), &t("self_attn.v_proj"), [16, h], "f32");
        if qwen2 {
            for (part, width) in [("q", h), ("k", 16), ("v", 16)] {
                add(
                    &mut b,
                    &format!("blk.{i}.attn_{part}.bias"),
                    &format!("model.layers.{i}.self_attn.{part}_proj.bias"),
                    [1, width],
                    "f32",
                );
            }
        }
        add(
            &mut b,
            &g("attn_output"),
            &t("self_attn.o_proj"),
            [h, h],
            "f32",
        );
        add(
            &mut b,
            &g("ffn_norm"),
            &t("post_attention_layernorm"),
            [1, h],
            "f32",
        );
        add(
            &mut b,
            &g("ffn_gate"),
            &t("mlp.gate_proj"),
            [inter, h],
            "f32",
        );
        add(&mut b, &g("ffn_up"), &t("mlp.up_proj"), [inter, h], "f32");
        add(
            &mut b,
            &g("ffn_down"),
            &t("mlp.down_proj"),
            [h, inter],
            "f16",
        );
    }
    add(
        &mut b,
        "output_norm.weight",
        "model.norm.weight",
        [1, h],
        "f32",
    );
    if !tied {
        add(&mut b, "output.weight", "lm_head.weight", [vocab, h], "f32");
    }
    (b, expected)
}
