//! Prompts to send: a JSON or JSONL file (with optional reference answers),
//! or synthetic prompts of a given length.

use std::path::Path;

use rand::{Rng, SeedableRng};
use serde_json::Value;

/// One prompt, with the reference answer when the dataset has one.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The user message (or raw completion prompt).
    pub text: String,
    /// The expected answer (`answer`, `solution`, ...), as written.
    pub reference: Option<String>,
    /// Tokens to ask for; `None`: the run's `--max-tokens`.
    pub max_tokens: Option<usize>,
    /// A short-answer item's kind (`kind` field); `None`: a math problem
    /// or a plain prompt.
    pub kind: Option<AnswerKind>,
    /// Other accepted answers (`aliases` field).
    pub aliases: Vec<String>,
}

/// What a short-answer item asks for (see `eval::short`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerKind {
    /// One number.
    Number,
    /// One word or name.
    Text,
}

/// Why a dataset could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A record is not valid JSON or has no prompt field.
    #[error("{path}:{line}: {message}")]
    Record {
        /// The file.
        path: String,
        /// 1-based line (JSONL) or record index + 1 (JSON array).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The file has no records.
    #[error("{0}: no prompts")]
    Empty(String),
}

/// Fields that hold the prompt, in order of preference.
const PROMPT_KEYS: [&str; 5] = ["prompt", "problem", "question", "input", "text"];
/// Fields that hold the reference answer, in order of preference.
const ANSWER_KEYS: [&str; 5] = ["answer", "reference", "expected", "solution", "output"];

fn string_at(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match v.get(*k)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// The first user turn of a chat-shaped record (`messages` in OpenAI form,
/// `conversations` in ShareGPT form), and the first assistant turn.
fn chat_turns(v: &Value) -> Option<(String, Option<String>)> {
    let turns = v
        .get("messages")
        .or_else(|| v.get("conversations"))?
        .as_array()?;
    let text_of = |t: &Value| {
        t.get("content")
            .or_else(|| t.get("value"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let role = |t: &Value| {
        t.get("role")
            .or_else(|| t.get("from"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let user = turns
        .iter()
        .find(|t| matches!(role(t).as_str(), "user" | "human"))
        .and_then(text_of)?;
    let reply = turns
        .iter()
        .find(|t| matches!(role(t).as_str(), "assistant" | "gpt"))
        .and_then(text_of);
    Some((user, reply))
}

/// One record as a prompt.
pub fn record(v: &Value) -> Result<Prompt, String> {
    if let Value::String(s) = v {
        return Ok(Prompt {
            text: s.clone(),
            reference: None,
            max_tokens: None,
            kind: None,
            aliases: Vec::new(),
        });
    }
    let (text, reply) = match string_at(v, &PROMPT_KEYS) {
        Some(t) => (t, None),
        None => chat_turns(v).ok_or_else(|| {
            format!("no prompt: expected one of {PROMPT_KEYS:?}, `messages` or `conversations`")
        })?,
    };
    let kind = match v.get("kind") {
        None | Some(Value::Null) => None,
        Some(k) => Some(
            serde_json::from_value(k.clone())
                .map_err(|_| format!("`kind` must be \"number\" or \"text\", not {k}"))?,
        ),
    };
    let aliases = match v.get("aliases") {
        None | Some(Value::Null) => Vec::new(),
        Some(a) => serde_json::from_value(a.clone())
            .map_err(|_| format!("`aliases` must be a list of strings, not {a}"))?,
    };
    Ok(Prompt {
        text,
        reference: string_at(v, &ANSWER_KEYS).or(reply),
        max_tokens: v
            .get("max_tokens")
            .and_then(Value::as_u64)
            .map(|n| n as usize),
        kind,
        aliases,
    })
}

/// Reads a JSON array or a JSONL file of records.
pub fn load(path: &Path) -> Result<Vec<Prompt>, DatasetError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io {
        path: name.clone(),
        source,
    })?;
    let bad = |line: usize, message: String| DatasetError::Record {
        path: name.clone(),
        line,
        message,
    };
    let mut out = Vec::new();
    if text.trim_start().starts_with('[') {
        let all: Vec<Value> =
            serde_json::from_str(&text).map_err(|e| bad(e.line(), e.to_string()))?;
        for (i, v) in all.iter().enumerate() {
            out.push(record(v).map_err(|m| bad(i + 1, m))?);
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line).map_err(|e| bad(i + 1, e.to_string()))?;
            out.push(record(&v).map_err(|m| bad(i + 1, m))?);
        }
    }
    if out.is_empty() {
        return Err(DatasetError::Empty(name));
    }
    Ok(out)
}

/// Words synthetic prompts are drawn from: common English words, so every
/// tokenizer splits them into about one token each.
const WORDS: [&str; 32] = [
    "the", "river", "stone", "light", "garden", "quiet", "number", "city", "paper", "window",
    "green", "music", "bridge", "winter", "table", "story", "market", "cloud", "letter", "forest",
    "summer", "train", "simple", "orange", "morning", "school", "mountain", "silver", "road",
    "friend", "ocean", "house",
];

/// `count` synthetic prompts of about `input_words` words each, asking for
/// `output_tokens` tokens; different per index, the same for the same seed.
pub fn synthetic(count: usize, input_words: usize, output_tokens: usize, seed: u64) -> Vec<Prompt> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let mut words = vec![format!("Request {i}:")];
            words.extend(
                (1..input_words.max(1)).map(|_| WORDS[rng.random_range(0..WORDS.len())].into()),
            );
            Prompt {
                text: words.join(" "),
                reference: None,
                max_tokens: Some(output_tokens),
                kind: None,
                aliases: Vec::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_jsonl_gsm8k_math500_and_sharegpt_shapes() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, r#"{{"question": "2+2?", "answer": "It is 4.\n#### 4"}}"#).unwrap();
        writeln!(f).unwrap();
        writeln!(
            f,
            r#"{{"problem": "x?", "solution": "\\boxed{{3}}", "answer": "3"}}"#
        )
        .unwrap();
        writeln!(
            f,
            r#"{{"conversations": [{{"from": "human", "value": "hi"}}, {{"from": "gpt", "value": "hello"}}]}}"#
        )
        .unwrap();
        writeln!(f, r#"{{"prompt": "p", "max_tokens": 9}}"#).unwrap();
        let p = load(f.path()).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(p[0].reference.as_deref(), Some("It is 4.\n#### 4"));
        assert_eq!(p[1].text, "x?");
        assert_eq!(p[1].reference.as_deref(), Some("3"));
        assert_eq!(p[2].text, "hi");
        assert_eq!(p[2].reference.as_deref(), Some("hello"));
        assert_eq!(p[3].max_tokens, Some(9));
        assert_eq!(p[0].kind, None);
    }

    #[test]
    fn reads_short_answer_kinds_and_aliases_and_refuses_bad_ones() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(
            f,
            r#"{{"question": "q", "answer": "autumn", "kind": "text", "aliases": ["fall"]}}"#
        )
        .unwrap();
        writeln!(f, r#"{{"question": "n", "answer": 4, "kind": "number"}}"#).unwrap();
        let p = load(f.path()).unwrap();
        assert_eq!(p[0].kind, Some(AnswerKind::Text));
        assert_eq!(p[0].aliases, vec!["fall".to_string()]);
        assert_eq!(p[1].kind, Some(AnswerKind::Number));

        let mut g = tempfile::NamedTempFile::new().unwrap();
        writeln!(g, r#"{{"question": "q", "answer": "a", "kind": "word"}}"#).unwrap();
        let e = load(g.path()).unwrap_err().to_string();
        assert!(e.contains(":1: `kind` must be"), "{e}");
        let mut h = tempfile::NamedTempFile::new().unwrap();
        writeln!(h, r#"{{"question": "q", "answer": "a", "aliases": "b"}}"#).unwrap();
        let e = load(h.path()).unwrap_err().to_string();
        assert!(e.contains("`aliases` must be a list"), "{e}");
    }

    #[test]
    fn the_committed_short_answer_set_loads_with_kinds() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/eval/short300.jsonl");
        let p = load(&path).unwrap();
        assert_eq!(p.len(), 300);
        assert!(p.iter().all(|q| q.kind.is_some() && q.reference.is_some()));
    }

    #[test]
    fn reads_a_json_array_and_reports_bad_records_by_line() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(f, r#"["plain", {{"prompt": "q", "answer": 12}}]"#).unwrap();
        let p = load(f.path()).unwrap();
        assert_eq!(p[0].text, "plain");
        assert_eq!(p[1].reference.as_deref(), Some("12"));

        let mut g = tempfile::NamedTempFile::new().unwrap();
        writeln!(g, r#"{{"prompt": "ok"}}"#).unwrap();
        writeln!(g, r#"{{"nothing": 1}}"#).unwrap();
        let e = load(g.path()).unwrap_err().to_string();
        assert!(e.contains(":2: no prompt"), "{e}");
        let empty = tempfile::NamedTempFile::new().unwrap();
        assert!(load(empty.path())
            .unwrap_err()
            .to_string()
            .contains("no prompts"));
    }

    #[test]
    fn synthetic_prompts_have_the_asked_length_and_differ() {
        let a = synthetic(3, 50, 16, 1);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0].text.split_whitespace().count(), 51);
        assert_eq!(a[0].max_tokens, Some(16));
        assert_ne!(a[1].text, a[2].text);
        assert_eq!(a, synthetic(3, 50, 16, 1));
    }
}
