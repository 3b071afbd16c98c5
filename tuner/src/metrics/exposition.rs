//! A parser for the Prometheus text exposition format (version 0.0.4), enough for counters,
//! gauges and histograms: `name{label="value",...} value [timestamp]`, comments, escapes.

use crate::error::TunerError;

/// Metrics text and where it came from (URL or file), for error messages.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsText {
    /// URL or path the text was read from.
    pub source: String,
    /// The exposition text.
    pub text: String,
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name, e.g. `tokenrouter_route_transitions_total`.
    pub name: String,
    /// Labels in the order written.
    pub labels: Vec<(String, String)>,
    /// Sample value.
    pub value: f64,
}

impl Sample {
    /// Value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses every sample of `text`; `source` names it in errors.
pub fn parse_exposition(source: &str, text: &str) -> Result<Vec<Sample>, TunerError> {
    let mut samples = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fail = |reason: String| TunerError::MetricsParse {
            source_name: source.to_string(),
            line: number + 1,
            reason,
        };
        samples.push(parse_line(line).map_err(fail)?);
    }
    Ok(samples)
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("invalid metric name in `{line}`"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after_brace)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value_text = fields
        .next()
        .ok_or_else(|| format!("missing value in `{line}`"))?;
    let value = parse_value(value_text).ok_or_else(|| format!("invalid value `{value_text}`"))?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("invalid timestamp `{timestamp}`"))?;
    }
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected `{extra}` after the value"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Label pairs of one sample, in the order written.
type Labels = Vec<(String, String)>;

/// Parses `label="value",...}` and returns the labels and the text after `}`.
fn parse_labels(mut text: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start();
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = text.find('=').ok_or("label without `=`")?;
        let key = text[..eq].trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("invalid label name `{key}`"));
        }
        text = text[eq + 1..].trim_start();
        text = text
            .strip_prefix('"')
            .ok_or_else(|| format!("value of label `{key}` is not quoted"))?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(format!("unterminated value of label `{key}`")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    Some((_, c)) => return Err(format!("invalid escape `\\{c}` in label `{key}`")),
                    None => return Err(format!("unterminated value of label `{key}`")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        text = text[end + 1..].trim_start();
        if let Some(rest) = text.strip_prefix(',') {
            text = rest;
        } else if !text.starts_with('}') {
            return Err(format!("expected `,` or `}}` after label `{key}`"));
        }
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters_histograms_and_comments() {
        let text = "# HELP tokenrouter_route_transitions_total Routing moves.\n\
# TYPE tokenrouter_route_transitions_total counter\n\
tokenrouter_route_transitions_total{from=\"quick\",to=\"reference\"} 35 1700000000000\n\
\n\
tokenrouter_step_latency_seconds_bucket{model=\"quick\",batch_bucket=\"4\",le=\"+Inf\"} 12\n\
tokenrouter_active_concurrency 4\n\
weird{path=\"a\\\\b \\\"q\\\"\\n\",} NaN\n";
        let samples = parse_exposition("fixture", text).unwrap();
        assert_eq!(samples.len(), 4);
        assert_eq!(samples[0].name, "tokenrouter_route_transitions_total");
        assert_eq!(samples[0].label("from"), Some("quick"));
        assert_eq!(samples[0].label("to"), Some("reference"));
        assert_eq!(samples[0].value, 35.0);
        assert_eq!(samples[1].label("le"), Some("+Inf"));
        assert!(samples[2].labels.is_empty());
        assert_eq!(samples[3].label("path"), Some("a\\b \"q\"\n"));
        assert!(samples[3].value.is_nan());
    }

    #[test]
    fn errors_name_source_and_line() {
        for (text, needle) in [
            ("ok 1\nbad{x=\"1\" 2\n", "expected `,` or `}`"),
            ("ok 1\nbad{x=1} 2\n", "not quoted"),
            ("ok 1\nbad 1.2.3\n", "invalid value"),
            ("ok 1\nbad\n", "missing value"),
            ("ok 1\nbad 1 2 3\n", "unexpected"),
        ] {
            let err = parse_exposition("http://quick:9000/metrics", text).unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("http://quick:9000/metrics, line 2"),
                "{message}"
            );
            assert!(message.contains(needle), "{message}");
        }
    }
}
