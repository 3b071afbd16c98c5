//! Test-only strict reader of the text exposition format: every line must
//! be a `# HELP`, a `# TYPE` with a known type, or a well-formed sample.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parsed exposition: samples in order, and the declared type per family.
#[derive(Debug, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
}

impl Exposition {
    /// The value of the one sample with this name and exactly these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
            .collect();
        assert!(
            found.len() <= 1,
            "{name}{labels:?} appears {} times",
            found.len()
        );
        found.first().copied()
    }
}

/// Parses `text`, failing with the line number on the first bad line.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut out = Exposition::default();
    for (i, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", i + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').unwrap_or((rest, ""));
            check_metric_name(name).map_err(at)?;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest
                .split_once(' ')
                .ok_or_else(|| at("TYPE without a type".into()))?;
            check_metric_name(name).map_err(at)?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty) {
                return Err(at(format!("unknown type {ty}")));
            }
            if out.types.insert(name.to_string(), ty.to_string()).is_some() {
                return Err(at(format!("second TYPE for {name}")));
            }
        } else if line.starts_with('#') {
            continue;
        } else {
            out.samples.push(parse_sample(line).map_err(at)?);
        }
    }
    Ok(out)
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(format!("bad label name {name:?}"))
    }
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    check_metric_name(name)?;
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        loop {
            // label name up to '='
            let start = chars.peek().map(|&(i, _)| i).ok_or("unterminated labels")?;
            if body[start..].starts_with('}') {
                chars.next();
                break;
            }
            let eq = body[start..].find('=').ok_or("label without '='")? + start;
            let lname = &body[start..eq];
            check_label_name(lname)?;
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(format!("label {lname} value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")?.1 {
                    '"' => break,
                    '\\' => match chars.next().ok_or("dangling escape")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => return Err(format!("bad escape \\{c}")),
                    },
                    '\n' => return Err("raw newline in label value".into()),
                    c => value.push(c),
                }
            }
            if labels.insert(lname.to_string(), value).is_some() {
                return Err(format!("label {lname} twice"));
            }
            match chars.next().ok_or("unterminated labels")?.1 {
                ',' => continue,
                '}' => break,
                c => return Err(format!("unexpected {c:?} after label value")),
            }
        }
        let consumed = chars.peek().map(|&(i, _)| i).unwrap_or(body.len());
        rest = &body[consumed..];
    }
    let rest = rest.strip_prefix(' ').ok_or("no space before value")?;
    let mut fields = rest.split(' ');
    let value_text = fields.next().ok_or("no value")?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v
            .parse::<f64>()
            .map_err(|e| format!("bad value {v:?}: {e}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|e| format!("bad timestamp {ts:?}: {e}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_valid_lines_and_rejects_bad_ones() {
        let good = "# HELP a:b help text\n# TYPE a:b counter\na:b{x=\"1\",y=\"q\\\"\\\\\\n\"} 3\nc 1.5e-3 1700000000\n";
        let e = parse(good).unwrap();
        assert_eq!(e.samples.len(), 2);
        assert_eq!(e.samples[0].labels["y"], "q\"\\\n");
        assert_eq!(e.value("c", &[]), Some(0.0015));
        for bad in [
            "a{x=1} 2",
            "a{x=\"1\"}2",
            "a{x=\"1\" 2",
            "1a 2",
            "a two",
            "a{x=\"1\",x=\"2\"} 1",
            "# TYPE a counterish",
            "a{x=\"\\q\"} 1",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
