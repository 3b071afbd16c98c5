//! Python's `str()` and `repr()` of template values.
//!
//! transformers renders chat templates with Jinja2, i.e. with Python values:
//! `{{ none }}` prints `None`, `{{ true }}` prints `True`, `{{ 1e16 }}`
//! prints `1e+16` and a list prints as `['a', 1]`. MiniJinja prints these
//! differently, so the chat-template environment formats them here.

use minijinja::value::{Value, ValueKind};

/// Python's `repr(float)` (also `str(float)` and `json.dumps(float)` for
/// finite values): the shortest round-trip digits, in positional notation
/// when the decimal exponent is in `[-4, 16)`, else `d.ddde+XX`.
pub(crate) fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits, e.g. "-1.25e-7".
    let sci = format!("{:e}", x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!(
                "{sign}{digits}{}.0",
                "0".repeat(point as usize - digits.len())
            )
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{sign}{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let mant = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    }
}

/// Whether Python's `str.isprintable()` would call `c` printable. An
/// approximation without Unicode tables: control characters, the
/// non-ASCII spaces, and the common format characters (zero-width joiner,
/// direction marks, BOM) are not printable.
fn is_printable(c: char) -> bool {
    if c.is_control() {
        return false;
    }
    !matches!(
        c,
        '\u{00A0}'
            | '\u{00AD}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200F}'
            | '\u{2028}'..='\u{202F}'
            | '\u{205F}'..='\u{206F}'
            | '\u{3000}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

/// Python's `repr(str)`.
pub(crate) fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr()` of a template value (used inside printed containers).
pub(crate) fn py_repr(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => str_repr(v.as_str().unwrap_or_default()),
        ValueKind::Seq => {
            let items: Vec<String> = match v.try_iter() {
                Ok(it) => it.map(|x| py_repr(&x)).collect(),
                Err(_) => return v.to_string(),
            };
            format!("[{}]", items.join(", "))
        }
        ValueKind::Map => {
            let Ok(keys) = v.try_iter() else {
                return v.to_string();
            };
            let items: Vec<String> = keys
                .map(|k| {
                    let val = v.get_item(&k).unwrap_or(Value::UNDEFINED);
                    format!("{}: {}", py_repr(&k), py_repr(&val))
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        _ => py_str(v).unwrap_or_else(|| v.to_string()),
    }
}

/// Python's `str()` of a template value where it differs from MiniJinja's
/// rendering; `None` means MiniJinja's own rendering is already right.
pub(crate) fn py_str(v: &Value) -> Option<String> {
    match v.kind() {
        ValueKind::None => Some("None".into()),
        ValueKind::Bool => Some(if v.is_true() { "True" } else { "False" }.into()),
        ValueKind::Number if !v.is_integer() => f64::try_from(v.clone()).ok().map(float_repr),
        ValueKind::Seq | ValueKind::Map => Some(py_repr(v)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python() {
        // Expected strings are Python 3's repr() of the same values.
        let cases: [(f64, &str); 16] = [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (0.1, "0.1"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (123456789.125, "123456789.125"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-1.25e-7, "-1.25e-07"),
            (1e100, "1e+100"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0 / 3.0, "0.3333333333333333"),
            (f64::INFINITY, "inf"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want, "{x:e}");
        }
        assert_eq!(float_repr(f64::NAN), "nan");
    }

    #[test]
    fn strings_repr_like_python() {
        assert_eq!(str_repr("abc"), "'abc'");
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("'\""), "'\\'\"'");
        assert_eq!(str_repr("a\nb\tc\\"), "'a\\nb\\tc\\\\'");
        assert_eq!(str_repr("\u{1}\u{7f}"), "'\\x01\\x7f'");
        assert_eq!(str_repr("你好🦀"), "'你好🦀'");
        assert_eq!(str_repr("a\u{200d}b"), "'a\\u200db'");
    }

    #[test]
    fn containers_and_scalars_print_like_python() {
        let v = Value::from(minijinja::value::Serde(
            serde_json::json!({"a": [1, 2.5, null, true, "x'y"], "b": {}}),
        ));
        assert_eq!(
            py_str(&v).unwrap(),
            "{'a': [1, 2.5, None, True, \"x'y\"], 'b': {}}"
        );
        assert_eq!(py_str(&Value::from(false)).unwrap(), "False");
        assert_eq!(py_str(&Value::from(())).unwrap(), "None");
        assert_eq!(py_str(&Value::from(7)), None);
        assert_eq!(py_str(&Value::from("s")), None);
    }
}
