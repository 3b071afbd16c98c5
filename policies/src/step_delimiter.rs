//! Where reasoning steps end: a delimiter (by default "\n\n") in the text
//! of the committed tokens. Each token's text is decoded once when the
//! policy is built; a tracker per request keeps only the tail of the text
//! that could still be the start of a delimiter, so a delimiter split over
//! several tokens ("\n" then "\n") is found too.

use textio::TextTokenizer;

/// Token texts and the delimiter.
#[derive(Debug, Clone)]
pub struct StepDelimiter {
    delimiter: String,
    texts: Vec<String>,
}

impl StepDelimiter {
    /// Decodes every token of `tokenizer` once.
    pub fn new(tokenizer: &TextTokenizer, delimiter: &str) -> Self {
        let texts = (0..tokenizer.vocab_size() as u32)
            .map(|id| tokenizer.decode(&[id], false).unwrap_or_default())
            .collect();
        Self::from_texts(texts, delimiter)
    }

    /// From explicit token texts (index = token id).
    pub fn from_texts(texts: Vec<String>, delimiter: &str) -> Self {
        Self {
            delimiter: delimiter.to_string(),
            texts,
        }
    }

    /// Feeds `token` to `tail` (a request's recent text); true when the
    /// delimiter is now complete, i.e. the next token starts a new step.
    /// After a complete delimiter the tail is cleared.
    pub fn push(&self, tail: &mut String, token: u32) -> bool {
        let Some(text) = self.texts.get(token as usize) else {
            return false;
        };
        tail.push_str(text);
        if tail.ends_with(&self.delimiter) {
            tail.clear();
            return true;
        }
        // Keep at most delimiter-length - 1 bytes, cut at a char boundary.
        let keep = self.delimiter.len().saturating_sub(1);
        if tail.len() > keep {
            let mut cut = tail.len() - keep;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail.drain(..cut);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delim() -> StepDelimiter {
        let texts = ["a", "\n", "\n\n", "b\n", "\n\nc", "é"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        StepDelimiter::from_texts(texts, "\n\n")
    }

    #[test]
    fn finds_whole_and_split_delimiters() {
        let d = delim();
        let mut tail = String::new();
        assert!(!d.push(&mut tail, 0));
        assert!(d.push(&mut tail, 2), "one token \\n\\n");
        assert!(!d.push(&mut tail, 3), "b\\n is half");
        assert!(d.push(&mut tail, 1), "... completed by \\n");
        assert!(!d.push(&mut tail, 1));
        assert!(!d.push(&mut tail, 0), "\\n a \\n is no delimiter");
        assert!(!d.push(&mut tail, 1));
        // A delimiter in the middle of a token does not end the step there.
        assert!(!d.push(&mut tail, 4));
        assert!(!d.push(&mut tail, 5));
        assert!(!d.push(&mut tail, 99), "unknown ids are ignored");
    }
}
