//! [`request`] on stable: random bytes, bodies built from field names and
//! hostile values, and random edits of the committed seeds
//! (`fuzz/corpus/gateway_request/`), a few hundred cases.

use std::path::Path;

use proptest::prelude::*;

use super::request;

fn seeds() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/gateway_request");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// JSON values in the places a client controls.
fn hostile_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_string()),
        Just("-1".to_string()),
        Just("1e308".to_string()),
        Just("-1e308".to_string()),
        Just("18446744073709551615".to_string()),
        Just("9223372036854775807".to_string()),
        Just("\"\"".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("[[]]".to_string()),
        Just("true".to_string()),
        Just("\"\\ud800\"".to_string()),
        Just("[{\"role\":\"tool\",\"content\":\"x\"}]".to_string()),
        Just("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        "[a-z\\u{80}-\\u{10ffff}]{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
    ]
}

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "n",
    "seed",
    "stop",
    "stream",
    "stream_options",
    "logprobs",
    "top_logprobs",
    "echo",
    "presence_penalty",
    "user",
];

/// A body built from field names and hostile values (later keys win).
fn structured() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((prop::sample::select(FIELDS), hostile_value()), 0..6).prop_map(
        |fields| {
            let mut body = String::from(
                r#"{"model":"tr","messages":[{"role":"user","content":"hi"}],"prompt":[1,2]"#,
            );
            for (k, v) in fields {
                body.push_str(&format!(",\"{k}\":{v}"));
            }
            body.push('}');
            body.into_bytes()
        },
    )
}

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds();
    (
        0..seeds.len(),
        prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..6),
    )
        .prop_map(move |(i, edits)| {
            let mut d = seeds[i].clone();
            for (at, byte, kind) in edits {
                let n = d.len();
                match kind {
                    0 if n > 0 => d[at % n] = byte,
                    1 => d.truncate(at % (n + 1)),
                    _ => d.insert(at % (n + 1), byte),
                }
            }
            d
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_body_is_a_request_or_a_client_error(
        body in prop_oneof![
            1 => prop::collection::vec(any::<u8>(), 0..128),
            3 => structured(),
            3 => mutated(),
        ]
    ) {
        request(&body);
    }
}

#[test]
fn seeds_are_valid_requests() {
    use crate::openai::request::parse_object;
    use crate::openai::Endpoint;
    for s in seeds() {
        let ok = parse_object(&s, Endpoint::Chat).is_ok()
            || parse_object(&s, Endpoint::Completions).is_ok();
        assert!(ok, "{}", String::from_utf8_lossy(&s));
        request(&s);
    }
}
