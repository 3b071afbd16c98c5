//! `StopChecker`: decides when a request is finished and which of its text
//! may be streamed yet.
//!
//! Checked in vLLM's order for each committed token: EOS (unless
//! `ignore_eos`), `stop_token_ids`, stop strings, then `max_tokens`. Stop
//! tokens and stop strings are not part of the output. A stop string may
//! span several tokens, so text that could still turn out to be the start
//! of one is held back from streaming until it is resolved.

use super::SamplingParams;

pub use protocol::sampling::FinishReason;

/// How a request finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    /// Stop or length.
    pub reason: FinishReason,
    /// The stop string that matched, if a stop string ended generation.
    pub matched: Option<String>,
    /// The `stop_token_ids` entry that ended generation, if one did
    /// (vLLM's integer `stop_reason`; `None` for EOS).
    pub stop_token: Option<u32>,
}

/// Per-request stop detection over committed tokens and their text.
#[derive(Debug, Clone)]
pub struct StopChecker {
    eos_token_ids: Vec<u32>,
    ignore_eos: bool,
    stop_token_ids: Vec<u32>,
    stop: Vec<String>,
    /// Longest stop string, in bytes.
    max_stop_len: usize,
    max_tokens: usize,
    generated: usize,
    /// Visible output text (cut before a matched stop string).
    text: String,
    /// Bytes of `text` already handed out by [`StopChecker::take_safe`].
    emitted: usize,
    finished: Option<Finish>,
}

impl StopChecker {
    /// A checker for `params`; `eos_token_ids` are the model's EOS ids
    /// (several for models like Qwen: `<|im_end|>`, `<|endoftext|>`).
    pub fn new(params: &SamplingParams, eos_token_ids: &[u32]) -> Self {
        let stop: Vec<String> = params
            .stop
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect();
        Self {
            eos_token_ids: eos_token_ids.to_vec(),
            ignore_eos: params.ignore_eos,
            stop_token_ids: params.stop_token_ids.clone(),
            max_stop_len: stop.iter().map(String::len).max().unwrap_or(0),
            stop,
            max_tokens: params.max_tokens,
            generated: 0,
            text: String::new(),
            emitted: 0,
            finished: None,
        }
    }

    /// Feeds one committed token and its text delta (from the incremental
    /// decoder). Returns the finish once the request is done; later calls
    /// change nothing and return the same finish.
    pub fn push(&mut self, token: u32, delta: &str) -> Option<Finish> {
        if self.finished.is_some() {
            return self.finished.clone();
        }
        self.generated += 1;
        if !self.ignore_eos && self.eos_token_ids.contains(&token) {
            return self.finish(FinishReason::Stop, None, None);
        }
        if self.stop_token_ids.contains(&token) {
            return self.finish(FinishReason::Stop, None, Some(token));
        }
        if !delta.is_empty() {
            // A match must overlap the new text: start looking up to
            // `max_stop_len - 1` bytes before it.
            let mut from = self
                .text
                .len()
                .saturating_sub(self.max_stop_len.saturating_sub(1));
            while !self.text.is_char_boundary(from) {
                from -= 1;
            }
            self.text.push_str(delta);
            if let Some((pos, stop)) = self.earliest_stop(from) {
                self.text.truncate(pos);
                self.emitted = self.emitted.min(pos);
                return self.finish(FinishReason::Stop, Some(stop), None);
            }
        }
        if self.generated >= self.max_tokens {
            return self.finish(FinishReason::Length, None, None);
        }
        None
    }

    fn finish(
        &mut self,
        reason: FinishReason,
        matched: Option<String>,
        stop_token: Option<u32>,
    ) -> Option<Finish> {
        self.finished = Some(Finish {
            reason,
            matched,
            stop_token,
        });
        self.finished.clone()
    }

    /// The first stop-string occurrence at or after byte `from` (earliest
    /// position; on equal positions, the first in the `stop` list).
    fn earliest_stop(&self, from: usize) -> Option<(usize, String)> {
        let hay = &self.text[from..];
        let mut best: Option<(usize, &String)> = None;
        for s in &self.stop {
            if let Some(p) = hay.find(s.as_str()) {
                if best.is_none_or(|(b, _)| p < b) {
                    best = Some((p, s));
                }
            }
        }
        best.map(|(p, s)| (from + p, s.clone()))
    }

    /// The finish, once there is one.
    pub fn finished(&self) -> Option<&Finish> {
        self.finished.as_ref()
    }

    /// Tokens fed so far.
    pub fn generated_tokens(&self) -> usize {
        self.generated
    }

    /// The visible output text so far (without stop tokens or the stop
    /// string, and cut before it).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many bytes of [`text`](Self::text) are safe to stream: all of it
    /// once finished, else all but the longest tail that is a proper prefix
    /// of a stop string.
    pub fn safe_len(&self) -> usize {
        if self.finished.is_some() {
            return self.text.len();
        }
        let bytes = self.text.as_bytes();
        let mut held = 0;
        for s in &self.stop {
            let s = s.as_bytes();
            let longest = (s.len() - 1).min(bytes.len());
            if let Some(k) = (held + 1..=longest)
                .rev()
                .find(|&k| bytes.ends_with(&s[..k]))
            {
                held = k;
            }
        }
        let mut safe = self.text.len() - held;
        // A tail matching a stop string's prefix starts on a character
        // boundary; this loop only guards that invariant.
        while !self.text.is_char_boundary(safe) {
            safe -= 1;
        }
        safe
    }

    /// The text that became safe to stream since the last call.
    pub fn take_safe(&mut self) -> String {
        let safe = self.safe_len();
        if safe <= self.emitted {
            return String::new();
        }
        let out = self.text[self.emitted..safe].to_string();
        self.emitted = safe;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EOS: u32 = 2;

    fn checker(stop: &[&str], max_tokens: usize) -> StopChecker {
        let params = SamplingParams {
            stop: stop.iter().map(|s| s.to_string()).collect(),
            stop_token_ids: vec![99],
            max_tokens,
            ..SamplingParams::default()
        };
        StopChecker::new(&params, &[EOS, 3])
    }

    /// Feeds text deltas as tokens 10, 11, ...; returns the streamed pieces.
    fn feed(c: &mut StopChecker, deltas: &[&str]) -> (Vec<String>, Option<Finish>) {
        let mut streamed = Vec::new();
        let mut fin = None;
        for (i, d) in deltas.iter().enumerate() {
            fin = c.push(10 + i as u32, d);
            streamed.push(c.take_safe());
            if fin.is_some() {
                break;
            }
        }
        (streamed, fin)
    }

    #[test]
    fn eos_and_stop_tokens_finish_without_their_text() {
        let mut c = checker(&[], 100);
        assert_eq!(c.push(5, "Hello"), None);
        let f = c.push(3, "<|endoftext|>").unwrap();
        assert_eq!(
            f,
            Finish {
                reason: FinishReason::Stop,
                matched: None,
                stop_token: None
            }
        );
        assert_eq!(c.text(), "Hello");
        // Further pushes change nothing.
        assert_eq!(c.push(6, " more"), Some(f));
        assert_eq!(c.text(), "Hello");

        let mut c = checker(&[], 100);
        c.push(5, "Hi");
        let f = c.push(99, "<stop>").unwrap();
        assert_eq!((f.reason, f.stop_token), (FinishReason::Stop, Some(99)));
        assert_eq!(c.text(), "Hi");
    }

    #[test]
    fn ignore_eos_keeps_going_but_stop_tokens_still_stop() {
        let params = SamplingParams {
            ignore_eos: true,
            stop_token_ids: vec![99],
            max_tokens: 10,
            ..SamplingParams::default()
        };
        let mut c = StopChecker::new(&params, &[EOS]);
        assert_eq!(c.push(EOS, "</s>"), None);
        assert_eq!(c.text(), "</s>");
        assert_eq!(c.push(99, "").map(|f| f.stop_token), Some(Some(99)));
    }

    #[test]
    fn max_tokens_gives_length_after_the_last_token_text() {
        let mut c = checker(&[], 2);
        assert_eq!(c.push(5, "a"), None);
        let f = c.push(6, "b").unwrap();
        assert_eq!(f.reason, FinishReason::Length);
        assert_eq!(f.reason.as_str(), "length");
        assert_eq!(c.text(), "ab");
        assert_eq!(c.generated_tokens(), 2);
        // EOS on the last allowed token is a stop, not a length finish.
        let mut c = checker(&[], 1);
        assert_eq!(c.push(EOS, "").unwrap().reason, FinishReason::Stop);
    }

    #[test]
    fn stop_string_spanning_tokens_is_cut_and_never_streamed() {
        let mut c = checker(&["###END"], 100);
        let (streamed, fin) = feed(&mut c, &["The answer", " is 4.#", "##E", "ND and more"]);
        let fin = fin.unwrap();
        assert_eq!(fin.reason, FinishReason::Stop);
        assert_eq!(fin.matched.as_deref(), Some("###END"));
        assert_eq!(c.text(), "The answer is 4.");
        // "#", "##E" were held back while they could start "###END".
        assert_eq!(streamed, vec!["The answer", " is 4.", "", ""]);
        assert_eq!(streamed.concat(), "The answer is 4.");
    }

    #[test]
    fn held_back_text_is_released_when_it_stops_matching() {
        let mut c = checker(&["</answer>"], 100);
        let (streamed, fin) = feed(&mut c, &["x </", "ans", "wer", "s are", " here"]);
        assert_eq!(fin, None);
        assert_eq!(streamed, vec!["x ", "", "", "</answers are", " here"]);
        assert_eq!(c.text(), "x </answers are here");
    }

    #[test]
    fn stop_string_inside_one_delta_and_earliest_match_wins() {
        let mut c = checker(&["b", "abc"], 100);
        c.push(5, "xx");
        let f = c.push(6, "yabcz").unwrap();
        // "abc" starts before "b".
        assert_eq!(f.matched.as_deref(), Some("abc"));
        assert_eq!(c.text(), "xxy");
        assert_eq!(c.take_safe(), "xxy");
    }

    #[test]
    fn stop_string_at_the_very_start_leaves_empty_output() {
        let mut c = checker(&["\n\n"], 100);
        c.push(5, "\n");
        assert_eq!(c.take_safe(), "");
        let f = c.push(6, "\nrest").unwrap();
        assert_eq!(f.matched.as_deref(), Some("\n\n"));
        assert_eq!(c.text(), "");
    }

    #[test]
    fn multibyte_stop_strings_and_text() {
        let mut c = checker(&["。结束"], 100);
        let (streamed, fin) = feed(&mut c, &["你好", "。", "结", "束了"]);
        assert_eq!(fin.unwrap().matched.as_deref(), Some("。结束"));
        assert_eq!(c.text(), "你好");
        assert_eq!(streamed.concat(), "你好");
        // A held-back multi-byte prefix that does not complete is released whole.
        let mut c = checker(&["🦀🦀"], 100);
        let (streamed, _) = feed(&mut c, &["a🦀", "b"]);
        assert_eq!(streamed, vec!["a", "🦀b"]);
    }

    #[test]
    fn finished_flushes_everything_safe() {
        let mut c = checker(&["STOP"], 3);
        c.push(5, "ok ST");
        assert_eq!(c.take_safe(), "ok ");
        // Length finish: the held-back "ST" is final output now.
        c.push(6, "");
        let f = c.push(7, "").unwrap();
        assert_eq!(f.reason, FinishReason::Length);
        assert_eq!(c.take_safe(), "ST");
        assert_eq!(c.finished(), Some(&f));
    }
}
