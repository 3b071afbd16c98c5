//! The Prometheus text exposition of a registry.

use prometheus::{Encoder, Registry, TextEncoder};

use super::error::MetricsError;

/// Content type of [`encode_text`]'s output (text format 0.0.4).
pub const TEXT_CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// Everything in `registry`, in the Prometheus text format.
pub fn encode_text(registry: &Registry) -> Result<String, MetricsError> {
    let encoder = TextEncoder::new();
    debug_assert_eq!(encoder.format_type(), TEXT_CONTENT_TYPE);
    let mut out = String::new();
    encoder
        .encode_utf8(&registry.gather(), &mut out)
        .map_err(MetricsError::Encode)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{exposition, SubserverMetrics};

    #[test]
    fn content_type_is_text_format_0_0_4() {
        assert_eq!(TEXT_CONTENT_TYPE, "text/plain; version=0.0.4");
    }

    #[test]
    fn empty_registry_encodes_to_nothing_and_full_one_parses_back() {
        let registry = Registry::new();
        assert_eq!(encode_text(&registry).unwrap(), "");
        let metrics = SubserverMetrics::new(&registry).unwrap();
        metrics
            .for_model("quick")
            .observe_step(1, 1, 0.001)
            .unwrap();
        metrics
            .for_model("reference")
            .observe_step(64, 64, 0.1)
            .unwrap();
        let text = encode_text(&registry).unwrap();
        let e = exposition::parse(&text).unwrap_or_else(|err| panic!("{err}\n{text}"));
        // Every sample belongs to a declared family.
        for s in &e.samples {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suf| {
                    s.name
                        .strip_suffix(suf)
                        .filter(|f| e.types.contains_key(*f))
                })
                .unwrap_or(&s.name);
            assert!(e.types.contains_key(family), "{} has no TYPE line", s.name);
        }
    }
}
