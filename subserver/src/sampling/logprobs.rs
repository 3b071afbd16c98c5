//! Log-probabilities for the OpenAI `logprobs` / `top_logprobs` fields.
//!
//! Like vLLM's default (`raw_logprobs`), they come from the model's raw
//! distribution, `log_softmax(logits)`, before temperature or filtering.

use super::SamplingError;

pub use protocol::sampling::TokenLogprobs;

/// Log-probabilities of `token` and of the `top_n` best tokens under
/// `log_softmax(logits)`.
pub fn logprobs(logits: &[f32], token: u32, top_n: usize) -> Result<TokenLogprobs, SamplingError> {
    if logits.is_empty() {
        return Err(SamplingError::EmptyLogits);
    }
    let chosen = *logits
        .get(token as usize)
        .ok_or(SamplingError::TokenOutOfRange {
            token,
            vocab: logits.len(),
        })?;
    if let Some(i) = logits.iter().position(|&x| x == f32::INFINITY) {
        return Err(SamplingError::InfiniteLogit { token: i as u32 });
    }
    let lse = kernels::logsumexp(logits);
    if !lse.is_finite() {
        // NaN somewhere, or every logit masked.
        return Err(SamplingError::NoFiniteLogits {
            vocab: logits.len(),
        });
    }
    let rank = 1 + logits.iter().filter(|&&x| x > chosen).count();
    let top = kernels::top_k(logits, top_n)
        .into_iter()
        .map(|(i, x)| (i, x - lse))
        .collect();
    Ok(TokenLogprobs {
        token,
        logprob: chosen - lse,
        rank,
        top,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_hand_computed_log_softmax() {
        // Probabilities 0.1, 0.2, 0.3, 0.4.
        let logits: Vec<f32> = [0.1f64, 0.2, 0.3, 0.4]
            .iter()
            .map(|p| (p.ln() + 3.0) as f32)
            .collect();
        let lp = logprobs(&logits, 2, 2).unwrap();
        assert_eq!(lp.token, 2);
        assert!((lp.logprob - 0.3f32.ln()).abs() < 1e-6, "{}", lp.logprob);
        assert_eq!(lp.rank, 2);
        assert_eq!(lp.top.len(), 2);
        assert_eq!((lp.top[0].0, lp.top[1].0), (3, 2));
        assert!((lp.top[0].1 - 0.4f32.ln()).abs() < 1e-6);
        assert!((lp.top[1].1 - 0.3f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn masked_token_has_minus_infinity_and_last_rank() {
        let lp = logprobs(&[0.0, f32::NEG_INFINITY, 0.0], 1, 0).unwrap();
        assert_eq!(lp.logprob, f32::NEG_INFINITY);
        assert_eq!(lp.rank, 3);
        assert!(lp.top.is_empty());
    }

    #[test]
    fn bad_rows_and_tokens_are_errors() {
        assert_eq!(
            logprobs(&[0.0], 1, 1).unwrap_err(),
            SamplingError::TokenOutOfRange { token: 1, vocab: 1 }
        );
        assert_eq!(logprobs(&[], 0, 1).unwrap_err(), SamplingError::EmptyLogits);
        assert_eq!(
            logprobs(&[0.0, f32::NAN], 0, 1).unwrap_err(),
            SamplingError::NoFiniteLogits { vocab: 2 }
        );
        assert_eq!(
            logprobs(&[f32::INFINITY, 0.0], 0, 1).unwrap_err(),
            SamplingError::InfiniteLogit { token: 0 }
        );
    }
}
