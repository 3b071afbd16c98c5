//! A normalizing answer checker: `1,000` = `1000` = `1000.0`, `\frac{3}{4}`
//! = `3/4` = `0.75`, `$5` = `5`, `\text{12 cm}` = `12 cm`; otherwise the
//! normalized strings must match.

/// Removes LaTeX and formatting that do not change the value.
pub fn normalize(answer: &str) -> String {
    let mut s = answer.trim().to_string();
    // `\text{..}`, `\mathrm{..}`, `\mbox{..}`: keep the content.
    for cmd in ["\\text", "\\mathrm", "\\mbox", "\\textbf"] {
        while let Some(i) = s.find(&format!("{cmd}{{")) {
            let open = i + cmd.len();
            match matching_brace(&s, open) {
                Some(close) => {
                    let inner = s[open + 1..close].to_string();
                    s.replace_range(i..=close, &inner);
                }
                None => break,
            }
        }
    }
    for (from, to) in [
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\$", ""),
        ("\\%", ""),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("\\cdot", "*"),
        ("\\times", "*"),
        ("$", ""),
        ("%", ""),
    ] {
        s = s.replace(from, to);
    }
    s = frac_to_slash(&s);
    let mut s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    // Units and trailing words after a number ("12 cm", "5 apples").
    if let Some((num, _)) = s.split_once(' ') {
        if parse_number(num).is_some() {
            s = num.to_string();
        }
    }
    let s = s.trim_end_matches('.').trim();
    let s = s
        .strip_prefix("x=")
        .or_else(|| s.strip_prefix("x ="))
        .unwrap_or(s)
        .trim();
    s.replace(' ', "").to_lowercase()
}

fn matching_brace(s: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// `\frac{a}{b}` → `(a)/(b)` (bare when simple), `\frac12` → `1/2`.
fn frac_to_slash(s: &str) -> String {
    let mut s = s.to_string();
    while let Some(i) = s.find("\\frac") {
        let after = i + 5;
        let rest = &s[after..];
        let (num, den, end) = if rest.starts_with('{') {
            let Some(c1) = matching_brace(&s, after) else {
                break;
            };
            if !s[c1 + 1..].starts_with('{') {
                break;
            }
            let Some(c2) = matching_brace(&s, c1 + 1) else {
                break;
            };
            (
                s[after + 1..c1].to_string(),
                s[c1 + 2..c2].to_string(),
                c2 + 1,
            )
        } else {
            let mut it = rest.chars();
            match (it.next(), it.next()) {
                (Some(a), Some(b)) if a.is_ascii_digit() && b.is_ascii_digit() => {
                    (a.to_string(), b.to_string(), after + 2)
                }
                _ => break,
            }
        };
        let wrap = |x: &str| {
            if x.chars().all(|c| c.is_ascii_alphanumeric() || c == '.') {
                x.to_string()
            } else {
                format!("({x})")
            }
        };
        s.replace_range(i..end, &format!("{}/{}", wrap(&num), wrap(&den)));
    }
    s
}

/// A plain number: integer (thousands commas allowed), decimal, or `a/b`.
pub fn parse_number(s: &str) -> Option<f64> {
    let s = s.trim().trim_start_matches('+');
    if let Some((a, b)) = s.split_once('/') {
        let strip = |x: &str| {
            x.trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .to_string()
        };
        let (a, b) = (parse_number(&strip(a))?, parse_number(&strip(b))?);
        return (b != 0.0).then(|| a / b);
    }
    let grouped = s.contains(',');
    if grouped {
        // Commas must group thousands: 1,250 or 12,345,678.
        let digits = s.trim_start_matches('-').split('.').next()?;
        let groups: Vec<&str> = digits.split(',').collect();
        let ok = !groups[0].is_empty()
            && groups[0].len() <= 3
            && groups[1..].iter().all(|g| g.len() == 3);
        if !ok {
            return None;
        }
    }
    let plain = s.replace(',', "");
    if plain.is_empty()
        || !plain
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '-')
    {
        return None;
    }
    plain.parse().ok()
}

/// True when the two answers are the same value (or the same normalized text).
pub fn equivalent(given: &str, expected: &str) -> bool {
    let (g, e) = (normalize(given), normalize(expected));
    match (parse_number(&g), parse_number(&e)) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-6 * b.abs().max(1.0),
        _ => !g.is_empty() && g == e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_many_spellings_are_equal() {
        assert!(equivalent("1,000", "1000"));
        assert!(equivalent("1000.0", "1000"));
        assert!(equivalent(r"\$18", "18"));
        assert!(equivalent("18.", "18"));
        assert!(equivalent(r"\frac{3}{4}", "0.75"));
        assert!(equivalent(r"\dfrac{3}{4}", "3/4"));
        assert!(equivalent(r"\frac34", "3/4"));
        assert!(equivalent(r"\text{12 cm}", "12"));
        assert!(equivalent("12 apples", "12"));
        assert!(equivalent("25\\%", "25"));
        assert!(equivalent("90^\\circ", "90"));
        assert!(equivalent("x = 5", "5"));
        assert!(equivalent("-3", r"-3"));
    }

    #[test]
    fn different_values_and_malformed_numbers_differ() {
        assert!(!equivalent("1,00", "100"));
        assert!(!equivalent("12", "13"));
        assert!(!equivalent("3/4", "4/3"));
        assert!(!equivalent("", ""));
        assert!(!equivalent("1/0", "1"));
    }

    #[test]
    fn non_numeric_answers_compare_as_normalized_text() {
        assert!(equivalent(r"\frac{\sqrt{3}}{2}", r"\dfrac{\sqrt{3}}{2}"));
        assert!(equivalent("(1, 2)", r"\left(1,2\right)"));
        assert!(!equivalent(r"\sqrt{2}", r"\sqrt{3}"));
    }
}
