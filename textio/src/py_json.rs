//! The `tojson` filter of transformers' chat-template environment, i.e.
//! Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`.
//!
//! MiniJinja's own `tojson` HTML-escapes `<`, `>`, `&`, `'` and uses compact
//! separators; Python uses `", "` and `": "`, keeps the characters as they
//! are, and writes floats with `repr`. Tool schemas go through this filter in
//! every tool-calling template, so it must match byte for byte.

use minijinja::value::{from_args, Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::py_format::float_repr;

/// The options of `json.dumps` that the filter exposes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonOptions {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// `None`: one line. `Some(unit)`: pretty-printed, `unit` per level.
    pub indent: Option<String>,
    /// Between items (`", "` on one line, `","` when indented).
    pub item_separator: String,
    /// Between a key and its value.
    pub key_separator: String,
    /// Sort object keys.
    pub sort_keys: bool,
}

impl Default for JsonOptions {
    fn default() -> Self {
        Self {
            ensure_ascii: false,
            indent: None,
            item_separator: ", ".into(),
            key_separator: ": ".into(),
            sort_keys: false,
        }
    }
}

impl JsonOptions {
    /// Reads the filter's arguments the way Python binds them:
    /// `tojson(x, ensure_ascii=False, indent=None, separators=None,
    /// sort_keys=False)`, positionally or by keyword.
    pub(crate) fn from_filter_args(args: &[Value]) -> Result<Self, Error> {
        let (positional, kwargs): (&[Value], Kwargs) = from_args(args)?;
        const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
        if positional.len() > NAMES.len() {
            return Err(Error::new(
                ErrorKind::TooManyArguments,
                format!(
                    "tojson takes at most {} arguments after the value",
                    NAMES.len()
                ),
            ));
        }
        let mut bound: [Option<Value>; 4] = Default::default();
        for (i, name) in NAMES.iter().enumerate() {
            let kw: Option<Value> = kwargs.get(name)?;
            if kw.is_some() && i < positional.len() {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson got multiple values for argument `{name}`"),
                ));
            }
            bound[i] = kw.or_else(|| positional.get(i).cloned());
        }
        kwargs.assert_all_used()?;
        let [ensure_ascii, indent, separators, sort_keys] = bound;

        let mut opts = Self {
            ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
            sort_keys: sort_keys.is_some_and(|v| v.is_true()),
            ..Self::default()
        };
        opts.indent = match indent {
            None => None,
            Some(v) if v.is_none() || v.is_undefined() => None,
            Some(v) if v.kind() == ValueKind::String => {
                Some(v.as_str().unwrap_or_default().to_string())
            }
            // Python: `' ' * indent` (bools are ints there too).
            Some(v) if v.kind() == ValueKind::Bool => {
                Some(if v.is_true() { " " } else { "" }.to_string())
            }
            Some(v) if v.is_integer() => {
                let n = i64::try_from(v.clone()).unwrap_or(0);
                Some(" ".repeat(n.clamp(0, 64) as usize))
            }
            Some(v) => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "tojson: indent must be an int or a string, not {}",
                        v.kind()
                    ),
                ))
            }
        };
        if opts.indent.is_some() {
            opts.item_separator = ",".into();
        }
        if let Some(seps) = separators.filter(|v| !v.is_none() && !v.is_undefined()) {
            let parts: Vec<Value> = seps.try_iter().map(|it| it.collect()).unwrap_or_default();
            match parts.as_slice() {
                [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
                    opts.item_separator = item.as_str().unwrap_or_default().to_string();
                    opts.key_separator = key.as_str().unwrap_or_default().to_string();
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings (item, key)",
                    ))
                }
            }
        }
        Ok(opts)
    }
}

/// `json.dumps(value, **opts)`.
pub(crate) fn dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, opts, 0)?;
    Ok(out)
}

fn not_serializable(v: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!(
            "tojson: object of type {} is not JSON serializable",
            v.kind()
        ),
    )
}

/// Python's JSON encoding of a finite or non-finite float.
fn write_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
    } else if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        out.push_str(&float_repr(x));
    }
}

fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            // ensure_ascii escapes everything outside ' '..='~' (DEL included).
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{:04x}", unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's conversion of a dict key to a JSON object key.
fn key_string(k: &Value) -> Result<String, Error> {
    match k.kind() {
        ValueKind::String => Ok(k.as_str().unwrap_or_default().to_string()),
        ValueKind::Bool => Ok(if k.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        ValueKind::Number if k.is_integer() => Ok(k.to_string()),
        ValueKind::Number => {
            let mut s = String::new();
            write_float(&mut s, f64::try_from(k.clone()).unwrap_or(f64::NAN));
            Ok(s)
        }
        other => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: keys must be str, int, float, bool or None, not {other}"),
        )),
    }
}

fn newline_indent(out: &mut String, unit: &str, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str(unit);
    }
}

fn write_value(out: &mut String, v: &Value, opts: &JsonOptions, level: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => write_float(out, f64::try_from(v.clone())?),
        ValueKind::String => write_string(out, v.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_container(out, opts, level, ('[', ']'), items.len(), |out, i| {
                write_value(out, &items[i], opts, level + 1)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for k in v.try_iter()? {
                let val = v.get_item(&k)?;
                entries.push((key_string(&k)?, val));
            }
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, opts, level, ('{', '}'), entries.len(), |out, i| {
                write_string(out, &entries[i].0, opts.ensure_ascii);
                out.push_str(&opts.key_separator);
                write_value(out, &entries[i].1, opts, level + 1)
            })?;
        }
        _ => return Err(not_serializable(v)),
    }
    Ok(())
}

/// Writes `n` items between `brackets`, laid out as Python's encoder does.
fn write_container(
    out: &mut String,
    opts: &JsonOptions,
    level: usize,
    brackets: (char, char),
    n: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(brackets.0);
    if n == 0 {
        out.push(brackets.1);
        return Ok(());
    }
    for i in 0..n {
        if i > 0 {
            out.push_str(&opts.item_separator);
        }
        if let Some(unit) = &opts.indent {
            newline_indent(out, unit, level + 1);
        }
        item(out, i)?;
    }
    if let Some(unit) = &opts.indent {
        newline_indent(out, unit, level);
    }
    out.push(brackets.1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dump(v: serde_json::Value, opts: &JsonOptions) -> String {
        dumps(&Value::from(minijinja::value::Serde(v)), opts).unwrap()
    }

    #[test]
    fn one_line_output_matches_python_json_dumps() {
        // Python: json.dumps({"name": "get_weather", "b": [1, 2.0, 1e+16, None, True],
        //   "d": "<a href='x'>&\"\\\n\t\u0001ü🦀"}, ensure_ascii=False)
        let v = json!({"name": "get_weather", "b": [1, 2.0, 1e16, null, true],
                       "d": "<a href='x'>&\"\\\n\t\u{1}ü🦀"});
        assert_eq!(
            dump(v, &JsonOptions::default()),
            r#"{"name": "get_weather", "b": [1, 2.0, 1e+16, null, true], "d": "<a href='x'>&\"\\\n\t\u0001ü🦀"}"#
        );
    }

    #[test]
    fn ensure_ascii_uses_surrogate_pairs() {
        let opts = JsonOptions {
            ensure_ascii: true,
            ..JsonOptions::default()
        };
        // Python: json.dumps("ü🦀\x7f") == '"\\u00fc\\ud83e\\udd80\\u007f"'
        assert_eq!(
            dump(json!("ü🦀\u{7f}"), &opts),
            r#""\u00fc\ud83e\udd80\u007f""#
        );
    }

    #[test]
    fn indent_and_sort_keys_match_python() {
        let opts = JsonOptions {
            indent: Some("  ".into()),
            item_separator: ",".into(),
            sort_keys: true,
            ..JsonOptions::default()
        };
        // Python: json.dumps({"z": [], "a": {"y": [1, {}], "x": "v"}}, indent=2, sort_keys=True)
        let want = "{\n  \"a\": {\n    \"x\": \"v\",\n    \"y\": [\n      1,\n      {}\n    ]\n  },\n  \"z\": []\n}";
        assert_eq!(
            dump(json!({"z": [], "a": {"y": [1, {}], "x": "v"}}), &opts),
            want
        );
    }

    #[test]
    fn filter_arguments_bind_like_python() {
        let kw = |pairs: Vec<(&str, Value)>| {
            Value::from(Kwargs::from_iter(
                pairs.into_iter().map(|(k, v)| (k.to_string(), v)),
            ))
        };
        let o = JsonOptions::from_filter_args(&[]).unwrap();
        assert_eq!(o, JsonOptions::default());
        let o = JsonOptions::from_filter_args(&[kw(vec![("indent", Value::from(4))])]).unwrap();
        assert_eq!(o.indent.as_deref(), Some("    "));
        assert_eq!(o.item_separator, ",");
        // First positional is ensure_ascii, as in transformers' override.
        let o = JsonOptions::from_filter_args(&[Value::from(true)]).unwrap();
        assert!(o.ensure_ascii && o.indent.is_none());
        let o = JsonOptions::from_filter_args(&[kw(vec![(
            "separators",
            Value::from(vec![Value::from(","), Value::from(":")]),
        )])])
        .unwrap();
        assert_eq!(
            (o.item_separator.as_str(), o.key_separator.as_str()),
            (",", ":")
        );
        assert!(JsonOptions::from_filter_args(&[kw(vec![("bogus", Value::from(1))])]).is_err());
        assert!(
            JsonOptions::from_filter_args(&[kw(vec![("indent", Value::from(vec![1]))])]).is_err()
        );
    }

    #[test]
    fn undefined_is_not_serializable() {
        let err = dumps(&Value::UNDEFINED, &JsonOptions::default()).unwrap_err();
        assert!(err.to_string().contains("not JSON serializable"), "{err}");
    }
}
