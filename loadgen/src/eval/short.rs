//! Grading short answers (one word or one number), as in
//! `data/eval/short300.jsonl`: only the first sentence of the output
//! counts, so a model that lists many candidates is not credited for one
//! of them.
//!
//! - number items: the first number of that sentence that is not one of
//!   the question's own numbers must equal the answer ("3 meters is 300
//!   centimeters" gives 300; digits, thousands commas and number words up
//!   to ninety-nine are read);
//! - text items: the answer or an alias must appear there as whole words,
//!   after lower-casing and dropping punctuation and the articles
//!   a / an / the (SQuAD's normalization).

use super::answer::numbers;
use super::check::{equivalent, parse_number};
use crate::dataset::AnswerKind;

/// Words that end in a period without ending a sentence.
const ABBREVIATIONS: [&str; 6] = ["mt", "st", "dr", "mr", "mrs", "ms"];
/// Words of an opener skipped before the answer ("Sure!", "Of course.").
const FILLER_WORDS: [&str; 12] = [
    "sure",
    "of",
    "course",
    "okay",
    "ok",
    "certainly",
    "absolutely",
    "alright",
    "great",
    "question",
    "well",
    "hello",
];

/// Sentences of the first non-empty line of `text`.
fn sentences(text: &str) -> Vec<&str> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty());
    let Some(line) = line else {
        return Vec::new();
    };
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let at_end = i + 1 == bytes.len() || bytes[i + 1].is_ascii_whitespace();
        if !matches!(b, b'.' | b'!' | b'?') || !at_end {
            continue;
        }
        let before = &line[start..i];
        let last_word = before
            .rsplit(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("");
        if b == b'.' && ABBREVIATIONS.contains(&last_word.to_lowercase().as_str()) {
            continue;
        }
        out.push(line[start..=i].trim());
        start = i + 1;
    }
    if start < line.len() && !line[start..].trim().is_empty() {
        out.push(line[start..].trim());
    }
    out
}

/// The part of the output that is graded: its first sentence, past an
/// opener made only of filler words ("Sure!", "Of course.").
pub fn answer_span(text: &str) -> &str {
    let all = sentences(text);
    let is_filler = |s: &str| {
        let words = normalized_words(s);
        !words.is_empty() && words.iter().all(|w| FILLER_WORDS.contains(&w.as_str()))
    };
    match all.as_slice() {
        [first, second, ..] if is_filler(first) => second,
        [first, ..] => first,
        [] => "",
    }
}

const UNITS: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 8] = [
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// The value of an English number word from zero to ninety-nine
/// ("seven", "twenty-one").
fn number_word(word: &str) -> Option<u32> {
    let w = word.to_lowercase();
    let unit = |s: &str| UNITS.iter().position(|u| *u == s).map(|i| i as u32);
    let ten = |s: &str| {
        TENS.iter()
            .position(|t| *t == s)
            .map(|i| 20 + 10 * i as u32)
    };
    if let Some((t, u)) = w.split_once('-') {
        return Some(ten(t)? + unit(u).filter(|&u| (1..10).contains(&u))?);
    }
    unit(&w).or_else(|| ten(&w))
}

/// `text` with number words written as digits.
fn digits_for_words(text: &str) -> String {
    text.split_whitespace()
        .map(|w| {
            let core = w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-');
            match number_word(core) {
                Some(n) => w.replace(core, &n.to_string()),
                None => w.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Lower-cased words without punctuation or articles.
pub fn normalized_words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !matches!(*w, "a" | "an" | "the"))
        .map(str::to_string)
        .collect()
}

/// The answer found in `output` for a number item, if any.
pub fn given_number(output: &str, question: &str) -> Option<String> {
    let asked: Vec<f64> = numbers(question)
        .iter()
        .filter_map(|n| parse_number(n))
        .collect();
    numbers(&digits_for_words(answer_span(output)))
        .into_iter()
        .find(|n| parse_number(n).is_none_or(|v| !asked.contains(&v)))
}

/// Whether `phrase` appears in `words` as a run of whole words.
fn contains_words(words: &[String], phrase: &[String]) -> bool {
    !phrase.is_empty() && words.windows(phrase.len()).any(|w| w == phrase)
}

/// The graded span of a text item and whether it holds an accepted answer.
pub fn grade_text(output: &str, accepted: &[&str]) -> (String, bool) {
    let span = answer_span(output);
    let words = normalized_words(span);
    let ok = accepted
        .iter()
        .any(|a| contains_words(&words, &normalized_words(a)));
    (span.to_string(), ok)
}

/// Grades one short-answer item: the answer given (`None`: nothing to
/// grade) and whether it is right.
pub fn grade(
    kind: AnswerKind,
    output: &str,
    question: &str,
    expected: &str,
    aliases: &[String],
) -> (Option<String>, bool) {
    match kind {
        AnswerKind::Number => {
            let given = given_number(output, question);
            let ok = given.as_deref().is_some_and(|g| {
                std::iter::once(expected)
                    .chain(aliases.iter().map(String::as_str))
                    .any(|e| equivalent(g, e))
            });
            (given, ok)
        }
        AnswerKind::Text => {
            let accepted: Vec<&str> = std::iter::once(expected)
                .chain(aliases.iter().map(String::as_str))
                .collect();
            let (span, ok) = grade_text(output, &accepted);
            ((!span.is_empty()).then_some(span), ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(output: &str, question: &str, expected: &str) -> bool {
        grade(AnswerKind::Number, output, question, expected, &[]).1
    }

    fn text(output: &str, expected: &str, aliases: &[&str]) -> bool {
        let aliases: Vec<String> = aliases.iter().map(|a| a.to_string()).collect();
        grade(AnswerKind::Text, output, "", expected, &aliases).1
    }

    #[test]
    fn the_span_is_the_first_sentence_past_a_short_opener() {
        assert_eq!(answer_span("\n  Paris. London is big.\nRome"), "Paris.");
        assert_eq!(
            answer_span("Sure! The answer is 12. Then 13"),
            "The answer is 12."
        );
        assert_eq!(answer_span("It is 3.5 m. Next"), "It is 3.5 m.");
        assert_eq!(
            answer_span("Mt. Everest is tallest."),
            "Mt. Everest is tallest."
        );
        assert_eq!(answer_span("12"), "12");
        assert_eq!(answer_span("Of course! Rome."), "Rome.");
        assert_eq!(answer_span("   \n"), "");
    }

    #[test]
    fn numbers_skip_the_questions_own_and_read_words() {
        let q = "How many centimeters are in 3 meters? Answer with a number.";
        assert!(num("There are 300 centimeters in 3 meters.", q, "300"));
        assert!(num("3 meters is 300 centimeters.", q, "300"));
        assert!(!num("3 meters.", q, "300"), "only the question's number");
        let q = "What is 7 + 5? Answer with a number.";
        assert!(num("7 + 5 = 12", q, "12"));
        assert!(num("The answer is twelve.", q, "12"));
        assert!(!num("7 + 5 = 13", q, "12"));
        assert!(
            !num("10, 11, 12, 13", q, "12"),
            "the first candidate counts"
        );
        assert!(
            !num("7 + 5 is 11. No, 12.", q, "12"),
            "only the first sentence"
        );
        assert!(num(
            "1,000 grams.",
            "How many grams are in 1 kilogram?",
            "1000"
        ));
        assert!(num("Twenty-one", "What is 14 + 7?", "21"));
        assert!(!num("", q, "12"));
    }

    #[test]
    fn text_answers_match_whole_words_after_normalization() {
        assert!(text("The capital of France is Paris.", "Paris", &[]));
        assert!(text("PARIS!", "Paris", &[]));
        assert!(text("It is the Blue Whale.", "blue whale", &["whale"]));
        assert!(text("mount Everest", "Everest", &["mount everest"]));
        assert!(text("The first letter is 'r'.", "r", &[]));
        assert!(text("Fall", "autumn", &["fall"]));
        assert!(!text("Parisian food.", "Paris", &[]), "whole words only");
        assert!(!text("London. Paris.", "Paris", &[]), "first sentence only");
        assert!(!text("The word is river.", "r", &[]));
        assert!(!text("", "Paris", &[]));
    }

    #[test]
    fn number_words_cover_zero_to_ninety_nine_only() {
        assert_eq!(number_word("Zero"), Some(0));
        assert_eq!(number_word("nineteen"), Some(19));
        assert_eq!(number_word("ninety-nine"), Some(99));
        assert_eq!(number_word("twenty-zero"), None);
        assert_eq!(number_word("hundred"), None);
        assert_eq!(digits_for_words("six letters."), "6 letters.");
    }
}
