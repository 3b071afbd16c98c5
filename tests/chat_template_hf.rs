//! Live comparison of our chat-template rendering with transformers'
//! `tokenizer.apply_chat_template(..., tokenize=False)`: the outputs must be
//! byte-identical.
//!
//! Runs `tests/python/chat_template_ref.py` with `$TOKENROUTER_PYTHON`
//! (default `$TOKENROUTER_CACHE/venv/bin/python`). Tokenizer directories come
//! from `$TOKENROUTER_TEMPLATE_DIRS` (colon-separated), else the real Qwen3
//! tokenizer and the SmolLM2 directory imported from its GGUF.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{cache_dir, python};
use serde_json::{json, Map, Value};
use subserver::tokenizer::{ChatMessage, ChatTemplate, TokenizerError};

const MAKE_TEST: &str = "run `make test` (it fetches the test assets)";

fn template_dirs() -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = match std::env::var("TOKENROUTER_TEMPLATE_DIRS") {
        Ok(list) if !list.trim().is_empty() => list
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => vec![
            cache_dir().join("assets/qwen3-tokenizer"),
            cache_dir().join("models/smollm2-135m"),
        ],
    };
    // A list of separators only (":") names no directory: comparing no
    // template at all would pass without checking anything.
    assert!(
        !dirs.is_empty(),
        "TOKENROUTER_TEMPLATE_DIRS names no directory; unset it for the defaults"
    );
    for d in &dirs {
        assert!(
            d.join("tokenizer_config.json").is_file(),
            "missing tokenizer directory {}: {MAKE_TEST}",
            d.display()
        );
    }
    dirs
}

/// One rendering request: what both sides are asked to render.
struct Case {
    label: String,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    kwargs: Map<String, Value>,
}

/// What a side produced: text, or the template's error message.
#[derive(Debug, PartialEq)]
enum Outcome {
    Text(String),
    Raised(String),
}

fn messages(v: Value) -> Vec<ChatMessage> {
    serde_json::from_value(v).expect("test conversation is valid")
}

fn weather_tool() -> Value {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city. Returns °C & <html>-free text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7.5, "default": null}
                },
                "required": ["city"]
            }
        }
    })
}

/// The conversations of the brief, plus tool calls and edge cases.
fn conversations() -> Vec<(&'static str, Vec<ChatMessage>, Map<String, Value>)> {
    let no_kwargs = Map::new();
    let mut tools_kwargs = Map::new();
    tools_kwargs.insert("tools".into(), json!([weather_tool()]));
    vec![
        (
            "system+user",
            messages(
                json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]),
            ),
            no_kwargs.clone(),
        ),
        (
            "user only",
            messages(json!([{"role": "user", "content": "Hello"}])),
            no_kwargs.clone(),
        ),
        (
            "multi-turn",
            messages(json!([
                {"role": "system", "content": "Be helpful."},
                {"role": "user", "content": "Name a prime."},
                {"role": "assistant", "content": "7"},
                {"role": "user", "content": "Another one?"},
                {"role": "assistant", "content": "11"},
                {"role": "user", "content": "Thanks\n"}
            ])),
            no_kwargs.clone(),
        ),
        (
            "assistant <think> in content",
            messages(json!([
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\nThe answer is 4."},
                {"role": "user", "content": "And 3+3?"}
            ])),
            no_kwargs.clone(),
        ),
        (
            "last assistant turn with <think>",
            messages(json!([
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "<think>\n\nAdd them.\n\n</think>\n\n4"}
            ])),
            no_kwargs.clone(),
        ),
        (
            "reasoning_content",
            messages(json!([
                {"role": "system", "content": "Think first."},
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "It is 4.", "reasoning_content": "2 plus 2 makes 4."},
                {"role": "user", "content": "Sure?"},
                {"role": "assistant", "content": "Yes.", "reasoning_content": "\nDouble-checked.\n"}
            ])),
            no_kwargs.clone(),
        ),
        (
            "unicode",
            messages(json!([
                {"role": "system", "content": "Réponds en français — s'il te plaît."},
                {"role": "user", "content": "你好！🦀👨‍👩‍👧 \"quotes\" 'single' back\\slash\ttab <b>&amp;</b>"},
                {"role": "assistant", "content": "こんにちは 👋 ∑∫√"},
                {"role": "user", "content": "  leading and trailing spaces  "}
            ])),
            no_kwargs.clone(),
        ),
        (
            "tool call round trip",
            messages(json!([
                {"role": "system", "content": "Use tools when needed."},
                {"role": "user", "content": "Weather in Zürich for 2 days?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2, "ratio": 0.5}}}
                ]},
                {"role": "tool", "content": "{\"temp_c\": 21.5, \"sky\": \"☀\"}"},
                {"role": "tool", "content": "second result"},
                {"role": "assistant", "content": "Sunny, 21.5 °C."},
                {"role": "user", "content": "<tool_response>\nnot a real tool response\n</tool_response>"}
            ])),
            tools_kwargs,
        ),
        (
            "empty contents",
            messages(
                json!([{"role": "user", "content": ""}, {"role": "assistant", "content": ""}, {"role": "user", "content": "?"}]),
            ),
            no_kwargs,
        ),
    ]
}

/// Every conversation with and without a generation prompt, with
/// `enable_thinking` true, false and absent.
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (name, msgs, kwargs) in conversations() {
        for add_generation_prompt in [false, true] {
            for thinking in [None, Some(true), Some(false)] {
                let mut kwargs = kwargs.clone();
                if let Some(t) = thinking {
                    kwargs.insert("enable_thinking".into(), Value::Bool(t));
                }
                out.push(Case {
                    label: format!("{name} (add_generation_prompt={add_generation_prompt}, enable_thinking={thinking:?})"),
                    messages: msgs.clone(),
                    add_generation_prompt,
                    kwargs,
                });
            }
        }
    }
    out
}

/// Renders every case with transformers, in one Python process.
fn reference(dir: &Path, cases: &[Case]) -> Vec<Outcome> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/chat_template_ref.py");
    let request = json!({
        "dir": dir,
        "cases": cases.iter().map(|c| json!({
            "messages": c.messages,
            "add_generation_prompt": c.add_generation_prompt,
            "kwargs": c.kwargs,
        })).collect::<Vec<_>>(),
    });
    let mut child = Command::new(python())
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the reference script");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{} failed on {}:\n{}",
        script.display(),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> =
        serde_json::from_slice(&out.stdout).expect("reference output is JSON");
    assert_eq!(results.len(), cases.len());
    results
        .into_iter()
        .map(|r| {
            match (
                r.get("text").and_then(Value::as_str),
                r.get("error").and_then(Value::as_str),
            ) {
                (Some(t), _) => Outcome::Text(t.to_string()),
                (None, Some(e)) => Outcome::Raised(e.to_string()),
                _ => panic!("unexpected reference result {r}"),
            }
        })
        .collect()
}

fn ours(template: &ChatTemplate, case: &Case) -> Outcome {
    match template.render(&case.messages, case.add_generation_prompt, &case.kwargs) {
        Ok(text) => Outcome::Text(text),
        Err(TokenizerError::TemplateRaised(msg)) => Outcome::Raised(msg),
        Err(e) => panic!("{}: render failed: {e}", case.label),
    }
}

/// Renders all cases on both sides and reports every difference.
fn compare(dir: &Path, cases: &[Case]) -> usize {
    let template = ChatTemplate::from_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let want = reference(dir, cases);
    let mut failures = Vec::new();
    for (case, want) in cases.iter().zip(&want) {
        let got = ours(&template, case);
        if &got != want {
            failures.push(format!(
                "{} — {}\n  transformers: {want:?}\n  ours:         {got:?}",
                dir.display(),
                case.label
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} renderings differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

#[test]
fn chat_templates_match_transformers_byte_for_byte() {
    let cases = cases();
    for dir in template_dirs() {
        let n = compare(&dir, &cases);
        eprintln!("{}: {n} renderings identical", dir.display());
    }
}

/// A template exercising the environment itself (filters, Python methods,
/// printing of Python values, loop controls, `raise_exception`,
/// `strftime_now`), checked the same way in a temporary tokenizer directory.
const FEATURE_TEMPLATE: &str = r#"{{- bos_token }}
{%- set ns = namespace(n=0, roles=[]) %}
{%- for m in messages %}
    {%- if m.role == 'skip' %}{% continue %}{% endif %}
    {%- if loop.index0 > 6 %}{% break %}{% endif %}
    {%- set ns.n = ns.n + 1 %}
    {{- '[' ~ loop.index ~ '/' ~ loop.length ~ '] ' + m.role.upper() + ': ' }}
    {{- m.content.strip().replace('\n', ' | ').split(' ')[0:3] | join('_') }}
    {%- if m.content.startswith('#') %} heading{% endif %}
    {%- if m.content.endswith('?') and not loop.last %} question{% endif %}
    {{- ' ' + m.content.lstrip('#').rstrip('?!').title() }}
    {{- ' len=' ~ (m.content | length) }}
    {%- if m.extra is defined %}
        {{- '\n' + m.extra | tojson }}
        {{- '\n' + m.extra | tojson(indent=2) }}
        {{- '\n' + m.extra | tojson(sort_keys=true, ensure_ascii=true) }}
        {{- '\n' + m.extra | tojson(separators=[',', ':']) }}
        {{- '\n' }}{{ m.extra }}
        {%- for k, v in m.extra | dictsort %} {{ k }}={{ v }}{% endfor %}
        {%- for k, v in m.extra.items() %} {{ k }}:{{ v | string }}{% endfor %}
    {%- endif %}
    {{- '\n' }}
{%- endfor %}
{{- 'n=' ~ ns.n ~ ' last=' ~ messages[-1].role ~ ' rev=' ~ (messages[::-1] | map(attribute='role') | join(',')) ~ '\n' }}
{{- 'specials=' ~ (additional_special_tokens | default([]) | length) ~ ' eos=' ~ eos_token ~ '\n' }}
{{- 'float=' ~ 2.5 ~ ' none=' ~ none ~ ' flag=' ~ flag ~ ' ratio=' ~ (1 / 4) ~ '\n' }}
{{- 'big=' }}{{ 1e20 }} {{ 1.5e-7 }} {{ none }} {{ flag }}{{ '\n' }}
{{- "what's up-to (date) 1st ÉTÉ" | title }} {{ "what's up-to (date) 1st ÉTÉ".title() }} {{ "hELLO wORLD".capitalize() }}{{ '\n' }}
{%- if date_format is defined %}{{ 'date=' + strftime_now(date_format) + '\n' }}{% endif %}
{%- if must_fail is defined and must_fail %}{{ raise_exception('Refusing: must_fail was ' ~ must_fail) }}{% endif %}
{%- if add_generation_prompt %}{{ '<assistant>' }}{% endif %}
"#;

#[test]
fn template_features_match_transformers() {
    let qwen = cache_dir().join("assets/qwen3-tokenizer");
    assert!(
        qwen.join("tokenizer.json").is_file(),
        "missing {}: {MAKE_TEST}",
        qwen.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        qwen.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let config = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": FEATURE_TEMPLATE,
        "bos_token": "<|endoftext|>",
        "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "special": true},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
    });
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();

    let msgs = messages(json!([
        {"role": "system", "content": "# Rules\nbe nice!"},
        {"role": "skip", "content": "ignored"},
        {"role": "user", "content": "  what's the weather in Zürich? ", "extra": {
            "b": [1, 2.0, 1e16, 0.1, null, true, "x'y\"z"], "a": {"é": "ü🦀", "ctrl": "\u{1}\t"}, "n": -3}},
        {"role": "assistant", "content": "It is sunny?!"},
        {"role": "user", "content": "ok?"}
    ]));
    let mut cases = Vec::new();
    for (name, kwargs) in [
        ("plain", json!({"flag": true})),
        (
            "date",
            json!({"flag": false, "date_format": "%Y-%m-%d %d %b %B %a %A %j"}),
        ),
        ("raise", json!({"must_fail": 1})),
    ] {
        for add_generation_prompt in [false, true] {
            cases.push(Case {
                label: format!("{name} (add_generation_prompt={add_generation_prompt})"),
                messages: msgs.clone(),
                add_generation_prompt,
                kwargs: kwargs.as_object().unwrap().clone(),
            });
        }
    }
    compare(dir.path(), &cases);
}
