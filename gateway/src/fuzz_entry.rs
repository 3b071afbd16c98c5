//! Entry point for hostile request bodies, shared by the cargo-fuzz target
//! in `fuzz/` and the property test that runs it on stable in `make test`:
//! any bytes must come back as a prepared request or an [`ApiError`] whose
//! status is a client error, never as a panic.

use crate::openai::request::{parse_object, typed};
use crate::openai::Endpoint;
use crate::text::TextSide;
use crate::validate::{self, Catalog};

/// A served name and two members, without a tokenizer (token-id prompts;
/// text prompts get their 400), with sampling defaults so that omitted
/// fields take the default path.
fn catalog() -> Catalog {
    let defaults = engine_config::GenerationDefaults {
        temperature: Some(0.2),
        top_p: Some(0.9),
        top_k: Some(20),
        min_p: None,
    };
    Catalog {
        served: "tr".into(),
        members: vec!["quick".into(), "reference".into()],
        entry: 0,
        defaults,
        member_defaults: vec![defaults; 2],
        member_precision: Vec::new(),
        learned: Default::default(),
    }
}

/// Parses and validates `body` as a chat and as a completions request.
pub fn request(body: &[u8]) {
    let (catalog, text) = (catalog(), TextSide::none());
    for endpoint in [Endpoint::Chat, Endpoint::Completions] {
        let outcome = parse_object(body, endpoint).and_then(|map| match endpoint {
            Endpoint::Chat => validate::chat(typed(map)?, &catalog, &text).map(drop),
            Endpoint::Completions => validate::completion(typed(map)?, &catalog, &text).map(drop),
        });
        if let Err(e) = outcome {
            assert!(e.status().is_client_error(), "{e:?} is not a 4xx");
            // The error body always renders.
            let _ = e.body();
        }
    }
}

#[cfg(test)]
mod tests;
