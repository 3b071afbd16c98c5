//! Checks of request validation.

use super::*;
use crate::openai::request::{parse_object, typed};

fn catalog() -> Catalog {
    Catalog {
        served: "tr".into(),
        members: vec!["quick".into(), "reference".into()],
        entry: 0,
        defaults: GenerationDefaults::default(),
        member_defaults: Vec::new(),
        member_precision: Vec::new(),
        learned: LearnedDefaults::default(),
    }
}

fn completion_of(body: &str) -> Result<Prepared, ApiError> {
    let map = parse_object(body.as_bytes(), Endpoint::Completions)?;
    completion(typed(map)?, &catalog(), &TextSide::none())
}

#[test]
fn models_resolve_to_targets() {
    let c = catalog();
    assert_eq!(c.resolve("tr"), Ok(Target::Routed));
    assert_eq!(c.resolve("default"), Ok(Target::Routed));
    assert_eq!(c.resolve("reference"), Ok(Target::Pinned(1)));
    assert_eq!(
        c.resolve("gpt-4"),
        Err(ApiError::ModelNotFound("gpt-4".into()))
    );
}

#[test]
fn token_prompts_and_sampling_fields_are_checked() {
    let p = completion_of(
        r#"{"model":"quick","prompt":[[1,2,3],[4]],"max_tokens":5,"n":2,"seed":7,"top_k":-1,"stop":["a","b"],"temperature":0}"#,
    )
    .unwrap();
    assert_eq!(p.target, Target::Pinned(0));
    assert_eq!(p.prompts.len(), 2);
    assert_eq!(p.num_sequences(), 4);
    assert_eq!(p.params.max_tokens, 5);
    assert_eq!(p.params.seed, Some(7));
    assert_eq!(p.params.top_k, 0);
    assert_eq!(p.params.stop, vec!["a".to_string(), "b".into()]);
    for (body, param) in [
        (
            r#"{"model":"tr","prompt":[1],"temperature":-1}"#,
            "temperature",
        ),
        (r#"{"model":"tr","prompt":[1],"top_p":1.5}"#, "top_p"),
        (r#"{"model":"tr","prompt":[1],"top_p":0}"#, "top_p"),
        (
            r#"{"model":"tr","prompt":[1],"temperature":150}"#,
            "temperature",
        ),
        (r#"{"model":"tr","prompt":[1],"min_p":2}"#, "min_p"),
        (r#"{"model":"tr","prompt":[1],"n":0}"#, "n"),
        (r#"{"model":"tr","prompt":[1],"n":100000}"#, "n"),
        (
            r#"{"model":"tr","prompt":[1],"max_tokens":0}"#,
            "max_tokens",
        ),
        (r#"{"model":"tr","prompt":[1],"top_k":-5}"#, "top_k"),
        (r#"{"model":"tr","prompt":[-1]}"#, "prompt[0][0]"),
        (r#"{"model":"tr","prompt":[1],"stop":[""]}"#, "stop[0]"),
        (r#"{"model":"tr","prompt":[1],"logprobs":21}"#, "logprobs"),
        (
            r#"{"model":"tr","prompt":[1],"stream_options":{"include_usage":true}}"#,
            "stream_options",
        ),
        (
            r#"{"model":"tr","prompt":"text needs a tokenizer"}"#,
            "prompt",
        ),
    ] {
        match completion_of(body) {
            Err(ApiError::InvalidParam { param: p, .. }) => assert_eq!(p, param, "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    assert!(matches!(
        completion_of(r#"{"model":"tr","prompt":[1],"max_tokens":1e30}"#),
        Err(ApiError::InvalidParam { .. })
    ));
    assert!(matches!(
        completion_of(r#"{"model":"tr","prompt":[1],"max_tokens":100000000000}"#),
        Err(ApiError::ContextLength(_))
    ));
    assert!(matches!(
        completion_of(r#"{"model":"nope","prompt":[1]}"#),
        Err(ApiError::ModelNotFound(_))
    ));
}

/// A catalog whose group defaults are SmolLM2's card (temperature 0.2,
/// top_p 0.9) plus a top_k, and whose `reference` member has its own.
fn with_defaults() -> Catalog {
    Catalog {
        defaults: GenerationDefaults {
            temperature: Some(0.2),
            top_p: Some(0.9),
            top_k: Some(20),
            min_p: None,
        },
        member_precision: Vec::new(),
        member_defaults: vec![
            GenerationDefaults::default(),
            GenerationDefaults {
                min_p: Some(0.1),
                ..Default::default()
            },
        ],
        ..catalog()
    }
}

fn params_of(body: &str) -> SamplingParams {
    let map = parse_object(body.as_bytes(), Endpoint::Completions).unwrap();
    completion(typed(map).unwrap(), &with_defaults(), &TextSide::none())
        .unwrap()
        .params
}

#[test]
fn omitted_sampling_fields_take_the_served_models_defaults() {
    let p = params_of(r#"{"model":"tr","prompt":[1]}"#);
    assert_eq!(
        (p.temperature, p.top_p, p.top_k, p.min_p),
        (0.2, 0.9, 20, 0.0)
    );
    // An explicit null is left out, as vLLM reads it.
    let p = params_of(r#"{"model":"tr","prompt":[1],"temperature":null,"top_k":null}"#);
    assert_eq!((p.temperature, p.top_k), (0.2, 20));
    // `default` is the routed group too.
    let p = params_of(r#"{"model":"default","prompt":[1]}"#);
    assert_eq!((p.temperature, p.top_p), (0.2, 0.9));
    // A member served alone has its own defaults.
    let p = params_of(r#"{"model":"reference","prompt":[1]}"#);
    assert_eq!(
        (p.temperature, p.top_p, p.top_k, p.min_p),
        (1.0, 1.0, 0, 0.1)
    );
    // Without defaults: the engine's (temperature 1, no truncation).
    let map = parse_object(br#"{"model":"tr","prompt":[1]}"#, Endpoint::Completions).unwrap();
    let p = completion(typed(map).unwrap(), &catalog(), &TextSide::none())
        .unwrap()
        .params;
    assert_eq!(
        (p.temperature, p.top_p, p.top_k, p.min_p),
        (1.0, 1.0, 0, 0.0)
    );
}

#[test]
fn the_requests_own_values_win_over_the_defaults() {
    let p = params_of(
        r#"{"model":"tr","prompt":[1],"temperature":0.7,"top_p":0.5,"top_k":-1,"min_p":0.05}"#,
    );
    assert_eq!(
        (p.temperature, p.top_p, p.top_k, p.min_p),
        (0.7, 0.5, 0, 0.05)
    );
    let p = params_of(r#"{"model":"tr","prompt":[1],"top_k":3}"#);
    assert_eq!((p.temperature, p.top_p, p.top_k), (0.2, 0.9, 3));
}

#[test]
fn temperature_zero_with_a_default_top_k_is_greedy() {
    // vLLM: temperature 0 is greedy whatever top_k / top_p say; the engine
    // takes the argmax at temperature 0 (`subserver::sampling::Sampler`).
    let p = params_of(r#"{"model":"tr","prompt":[1],"temperature":0}"#);
    assert_eq!((p.temperature, p.top_k), (0.0, 20));
    assert_eq!(
        SamplingParams {
            top_k: p.top_k,
            top_p: p.top_p,
            ..SamplingParams::greedy(p.max_tokens)
        },
        p
    );
}
