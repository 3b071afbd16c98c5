//! The JSON of `/admin/thresholds`, read strictly: a bad table is refused
//! with the path of the offending value, never half-applied.

use serde_json::{json, Value};

use super::admin::ThresholdTable;

/// The one top-level key of the body.
pub const THRESHOLDS_KEY: &str = "delayed_batching_threshold";

/// `{"delayed_batching_threshold": table}`.
pub fn thresholds_json(table: &ThresholdTable) -> Value {
    json!({ THRESHOLDS_KEY: table })
}

/// Reads a PUT body. Every model must be one of `known`'s; every list
/// non-empty; every value a positive integer. The error says which.
pub fn parse_thresholds(body: &[u8], known: &ThresholdTable) -> Result<ThresholdTable, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let Value::Object(top) = value else {
        return Err(format!(
            "body must be a JSON object {{\"{THRESHOLDS_KEY}\": {{model: [B at n=1, ...]}}}}"
        ));
    };
    if let Some(other) = top.keys().find(|k| k.as_str() != THRESHOLDS_KEY) {
        return Err(format!(
            "unknown field `{other}` (expected only `{THRESHOLDS_KEY}`)"
        ));
    }
    let Some(models) = top.get(THRESHOLDS_KEY) else {
        return Err(format!("missing field `{THRESHOLDS_KEY}`"));
    };
    let Value::Object(models) = models else {
        return Err(format!(
            "`{THRESHOLDS_KEY}` must be an object mapping model names to lists"
        ));
    };
    if models.is_empty() {
        return Err(format!(
            "`{THRESHOLDS_KEY}` is empty: name at least one model"
        ));
    }
    let mut table = ThresholdTable::new();
    for (model, list) in models {
        if !known.contains_key(model) {
            let names: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown model `{model}` (known: {})",
                names.join(", ")
            ));
        }
        let path = format!("{THRESHOLDS_KEY}.{model}");
        let Value::Array(items) = list else {
            return Err(format!(
                "`{path}` must be a list of positive integers, got {list}"
            ));
        };
        if items.is_empty() {
            return Err(format!("`{path}` is empty: give B for n = 1, 2, ..."));
        }
        let mut bs = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match item.as_u64().and_then(|b| usize::try_from(b).ok()) {
                Some(b) if b > 0 => bs.push(b),
                _ => {
                    return Err(format!(
                        "`{path}[{i}]` must be a positive integer, got {item}"
                    ))
                }
            }
        }
        table.insert(model.clone(), bs);
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> ThresholdTable {
        [
            ("quick".to_string(), vec![1, 1]),
            ("reference".to_string(), vec![1, 2]),
        ]
        .into()
    }

    #[test]
    fn reads_a_valid_partial_table() {
        let t = parse_thresholds(
            br#"{"delayed_batching_threshold": {"quick": [1, 2, 3]}}"#,
            &known(),
        )
        .unwrap();
        assert_eq!(t, [("quick".to_string(), vec![1, 2, 3])].into());
    }

    #[test]
    fn round_trips_its_own_output() {
        let body = serde_json::to_vec(&thresholds_json(&known())).unwrap();
        assert_eq!(parse_thresholds(&body, &known()).unwrap(), known());
    }

    #[test]
    fn refuses_bad_tables_naming_the_offending_part() {
        let cases: [(&str, &str); 12] = [
            ("{", "not valid JSON"),
            ("[1]", "must be a JSON object"),
            ("{}", "missing field `delayed_batching_threshold`"),
            (
                r#"{"delayed_batching_threshold": {}, "x": 1}"#,
                "unknown field `x`",
            ),
            (
                r#"{"delayed_batching_threshold": [1]}"#,
                "must be an object",
            ),
            (r#"{"delayed_batching_threshold": {}}"#, "is empty"),
            (
                r#"{"delayed_batching_threshold": {"big": [1]}}"#,
                "unknown model `big` (known: quick, reference)",
            ),
            (
                r#"{"delayed_batching_threshold": {"quick": 3}}"#,
                "`delayed_batching_threshold.quick` must be a list",
            ),
            (
                r#"{"delayed_batching_threshold": {"quick": []}}"#,
                "`delayed_batching_threshold.quick` is empty",
            ),
            (
                r#"{"delayed_batching_threshold": {"quick": [1, 0]}}"#,
                "`delayed_batching_threshold.quick[1]` must be a positive integer, got 0",
            ),
            (
                r#"{"delayed_batching_threshold": {"quick": [-2]}}"#,
                "`delayed_batching_threshold.quick[0]` must be a positive integer, got -2",
            ),
            (
                r#"{"delayed_batching_threshold": {"quick": [1.5]}}"#,
                "got 1.5",
            ),
        ];
        for (body, want) in cases {
            let err = parse_thresholds(body.as_bytes(), &known()).unwrap_err();
            assert!(err.contains(want), "{body}: {err}");
        }
    }
}
