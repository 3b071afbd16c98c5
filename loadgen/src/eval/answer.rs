//! Pulling the final answer out of a model's solution or a dataset's
//! reference (`\boxed{...}`, GSM8K's `#### 42`, or the last number).

/// The content of the last `\boxed{...}` (or `\fbox{...}`), braces balanced.
pub fn last_boxed(text: &str) -> Option<String> {
    let start = ["\\boxed", "\\fbox"]
        .iter()
        .filter_map(|m| text.rfind(m).map(|i| i + m.len()))
        .max()?;
    let rest = text[start..].trim_start();
    if let Some(body) = rest.strip_prefix('{') {
        let mut depth = 1usize;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(body[..i].trim().to_string());
                    }
                }
                _ => {}
            }
        }
        None
    } else {
        // `\boxed 5` (no braces): up to the next space or `$`.
        let word: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '$')
            .collect();
        (!word.is_empty()).then_some(word)
    }
}

/// Every number in `text`, in order: an optional sign, digits with
/// optional thousands commas, an optional decimal part, or a fraction `a/b`.
pub fn numbers(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_num = chars[i].is_ascii_digit()
            || (chars[i] == '-'
                && chars.get(i + 1).is_some_and(char::is_ascii_digit)
                && (i == 0 || !chars[i - 1].is_alphanumeric()));
        if !starts_num {
            i += 1;
            continue;
        }
        let s = i;
        i += 1;
        while i < chars.len() {
            let c = chars[i];
            let next_digit = chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if c.is_ascii_digit() || ((c == ',' || c == '.' || c == '/') && next_digit) {
                i += 1;
            } else {
                break;
            }
        }
        found.push(chars[s..i].iter().collect::<String>());
    }
    found
}

/// The last number in `text` (see [`numbers`]).
pub fn last_number(text: &str) -> Option<String> {
    numbers(text).pop()
}

/// The answer a model gave: its last `\boxed{}`, else the text after a
/// final "answer is"/"Answer:", else GSM8K's `####`, else the last number.
pub fn extract_answer(text: &str) -> Option<String> {
    if let Some(b) = last_boxed(text) {
        return Some(b);
    }
    let lower = text.to_lowercase();
    for marker in ["final answer is", "answer is", "answer:", "####"] {
        if let Some(i) = lower.rfind(marker) {
            let tail = &text[i + marker.len()..];
            if let Some(n) = last_number(tail.lines().next().unwrap_or(tail)) {
                return Some(n);
            }
        }
    }
    last_number(text)
}

/// The expected answer from a dataset's reference field: a bare answer as
/// is; a worked solution by its `\boxed{}` or `####` line.
pub fn extract_reference(reference: &str) -> String {
    if let Some(b) = last_boxed(reference) {
        return b;
    }
    if let Some(i) = reference.rfind("####") {
        return reference[i + 4..].trim().to_string();
    }
    reference.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxed_with_nested_braces_wins() {
        assert_eq!(
            last_boxed(r"so \boxed{\frac{1}{2}}."),
            Some(r"\frac{1}{2}".into())
        );
        assert_eq!(
            last_boxed(r"\boxed{1} then \boxed{ 42 }"),
            Some("42".into())
        );
        assert_eq!(last_boxed(r"$\boxed 7$"), Some("7".into()));
        assert_eq!(last_boxed(r"\boxed{unclosed"), None);
        assert_eq!(
            extract_answer(r"2+2=4, so \boxed{4}. Then 5"),
            Some("4".into())
        );
    }

    #[test]
    fn falls_back_to_answer_markers_then_the_last_number() {
        assert_eq!(
            extract_answer("The answer is 1,250 apples.\nCheck: 3"),
            Some("1,250".into())
        );
        assert_eq!(extract_answer("x = 3 and y = -12."), Some("-12".into()));
        assert_eq!(extract_answer("Half is 3/4 of 1.5"), Some("1.5".into()));
        assert_eq!(extract_answer("about 3/4."), Some("3/4".into()));
        assert_eq!(extract_answer("step-2 is done"), Some("2".into()));
        assert_eq!(extract_answer("no digits here"), None);
        assert_eq!(extract_answer("#### 72"), Some("72".into()));
    }

    #[test]
    fn references_from_gsm8k_and_math() {
        assert_eq!(
            extract_reference("Natalia sold 48/2 = 24 clips.\n#### 72"),
            "72"
        );
        assert_eq!(
            extract_reference(r"Thus $\boxed{\dfrac{3}{5}}$."),
            r"\dfrac{3}{5}"
        );
        assert_eq!(extract_reference(" 18 "), "18");
    }
}
