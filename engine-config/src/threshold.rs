//! Delayed-batching thresholds: `B(model, n)`, how many runnable requests
//! model `model` waits for before stepping when `n` requests are active.
//!
//! The YAML key `delayed_batching_threshold` takes three forms, all
//! normalized to one list per model indexed by concurrency - 1:
//! (a) a list of ints, the same table for every model;
//! (b) a list of lists, one inner list per concurrency level with one entry
//!     per model (in model order);
//! (c) a map from model name to its list (what `tokenrouter tune --yaml`
//!     prints); models left out never wait (`[1]`).

use serde_yaml::Value;

use super::error::ConfigError;
use super::raw::describe;

/// Why a threshold table was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThresholdError {
    /// A model's list is empty.
    #[error("model {model}: the threshold list is empty")]
    Empty {
        /// Model index.
        model: usize,
    },
    /// A threshold below 1.
    #[error("model {model}: threshold at concurrency {} is 0 (thresholds are >= 1)", .index + 1)]
    Zero {
        /// Model index.
        model: usize,
        /// Index in the list (concurrency - 1).
        index: usize,
    },
    /// The table has lists for a different number of models.
    #[error("the table has {got} model(s), the group has {expected}")]
    ModelCount {
        /// Models in the group.
        expected: usize,
        /// Models in the table.
        got: usize,
    },
    /// A model index outside the group.
    #[error("model {model} is not in the group ({count} models)")]
    NoSuchModel {
        /// The index asked for.
        model: usize,
        /// Models in the group.
        count: usize,
    },
}

/// `B(model, n)` for every model of a group. Never empty: each model has a
/// non-empty list of thresholds >= 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThresholdTable {
    per_model: Vec<Vec<usize>>,
}

impl ThresholdTable {
    /// A table where no model ever waits (`B = 1` everywhere).
    pub fn no_delay(models: usize) -> Self {
        Self {
            per_model: vec![vec![1]; models],
        }
    }

    /// A table from one list per model (index = concurrency - 1).
    pub fn from_per_model(per_model: Vec<Vec<usize>>) -> Result<Self, ThresholdError> {
        for (model, list) in per_model.iter().enumerate() {
            check_list(model, list)?;
        }
        Ok(Self { per_model })
    }

    /// Number of models.
    pub fn num_models(&self) -> usize {
        self.per_model.len()
    }

    /// Model `model`'s thresholds, by concurrency - 1.
    pub fn for_model(&self, model: usize) -> Option<&[usize]> {
        self.per_model.get(model).map(Vec::as_slice)
    }

    /// `B(model, n)` with `n` active requests. The concurrency index is
    /// clamped at both ends (n < 1 reads the first entry, n beyond the list
    /// reads the last) and the result is clamped to `[1, max(n, 1)]`, since
    /// waiting for more runnable requests than exist would never end. A
    /// model index outside the table reads 1 (never wait).
    pub fn get(&self, model: usize, n: usize) -> usize {
        let Some(list) = self.per_model.get(model) else {
            return 1;
        };
        let index = n.clamp(1, list.len()) - 1;
        list[index].clamp(1, n.max(1))
    }

    /// Replaces the whole table (e.g. after retuning), keeping the model count.
    pub fn replace(&mut self, per_model: Vec<Vec<usize>>) -> Result<(), ThresholdError> {
        if per_model.len() != self.per_model.len() {
            return Err(ThresholdError::ModelCount {
                expected: self.per_model.len(),
                got: per_model.len(),
            });
        }
        *self = Self::from_per_model(per_model)?;
        Ok(())
    }

    /// Replaces one model's list.
    pub fn replace_model(&mut self, model: usize, list: Vec<usize>) -> Result<(), ThresholdError> {
        let count = self.per_model.len();
        check_list(model, &list)?;
        let slot = self
            .per_model
            .get_mut(model)
            .ok_or(ThresholdError::NoSuchModel { model, count })?;
        *slot = list;
        Ok(())
    }
}

fn check_list(model: usize, list: &[usize]) -> Result<(), ThresholdError> {
    if list.is_empty() {
        return Err(ThresholdError::Empty { model });
    }
    match list.iter().position(|&b| b == 0) {
        Some(index) => Err(ThresholdError::Zero { model, index }),
        None => Ok(()),
    }
}

/// Reads `delayed_batching_threshold` (any of the three forms, or null for
/// no delay). `key` is the YAML path for error messages.
pub(crate) fn parse_thresholds(
    value: Option<&Value>,
    models: &[String],
    key: &str,
) -> Result<ThresholdTable, ConfigError> {
    let per_model = match value {
        None | Some(Value::Null) => return Ok(ThresholdTable::no_delay(models.len())),
        Some(Value::Sequence(items)) => parse_sequence(items, models.len(), key)?,
        Some(Value::Mapping(map)) => parse_mapping(map, models, key)?,
        Some(other) => {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "expected a list of ints, a list of per-model lists, or a map of model name to list; got {}",
                    describe(other)
                ),
            ))
        }
    };
    // parse_* already checked every entry; this re-check keeps one source of
    // truth for the table's invariant.
    ThresholdTable::from_per_model(per_model).map_err(|e| ConfigError::invalid(key, e.to_string()))
}

/// Form (a) or (b), told apart by the first item.
fn parse_sequence(
    items: &[Value],
    models: usize,
    key: &str,
) -> Result<Vec<Vec<usize>>, ConfigError> {
    let Some(first) = items.first() else {
        return Err(ConfigError::invalid(key, "must not be empty"));
    };
    if !matches!(first, Value::Sequence(_)) {
        let list = parse_int_list(items, key)?;
        return Ok(vec![list; models]);
    }
    let mut per_model = vec![Vec::with_capacity(items.len()); models];
    for (level, row) in items.iter().enumerate() {
        let row_key = format!("{key}[{level}]");
        let Value::Sequence(row) = row else {
            return Err(ConfigError::invalid(
                row_key,
                format!(
                    "expected a list with one threshold per model (the first item is a list), got {}",
                    describe(row)
                ),
            ));
        };
        if row.len() != models {
            return Err(ConfigError::invalid(
                row_key,
                format!(
                    "has {} entries, expected one per model ({models}) for concurrency {}",
                    row.len(),
                    level + 1
                ),
            ));
        }
        for (model, item) in row.iter().enumerate() {
            per_model[model].push(parse_int(item, &format!("{key}[{level}][{model}]"))?);
        }
    }
    Ok(per_model)
}

/// Form (c).
fn parse_mapping(
    map: &serde_yaml::Mapping,
    models: &[String],
    key: &str,
) -> Result<Vec<Vec<usize>>, ConfigError> {
    let mut per_model = vec![vec![1]; models.len()];
    for (name, list) in map {
        let Value::String(name) = name else {
            return Err(ConfigError::invalid(
                key,
                format!("keys must be model names, got {}", describe(name)),
            ));
        };
        let entry_key = format!("{key}.{name}");
        let index = models.iter().position(|m| m == name).ok_or_else(|| {
            ConfigError::invalid(
                &entry_key,
                format!("\"{name}\" is not a model (models: {})", models.join(", ")),
            )
        })?;
        let Value::Sequence(items) = list else {
            return Err(ConfigError::invalid(
                entry_key,
                format!(
                    "expected a list of ints (one per concurrency), got {}",
                    describe(list)
                ),
            ));
        };
        if items.is_empty() {
            return Err(ConfigError::invalid(entry_key, "must not be empty"));
        }
        per_model[index] = parse_int_list(items, &entry_key)?;
    }
    Ok(per_model)
}

/// One model's list (the official per-model `delayed_batching_threshold`).
pub(crate) fn parse_model_list(value: &Value, key: &str) -> Result<Vec<usize>, ConfigError> {
    match value {
        Value::Sequence(items) if !items.is_empty() => parse_int_list(items, key),
        Value::Sequence(_) => Err(ConfigError::invalid(key, "must not be empty")),
        other => Err(ConfigError::invalid(
            key,
            format!(
                "expected a list of ints (one per concurrency), got {}",
                describe(other)
            ),
        )),
    }
}

fn parse_int_list(items: &[Value], key: &str) -> Result<Vec<usize>, ConfigError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_int(item, &format!("{key}[{i}]")))
        .collect()
}

fn parse_int(value: &Value, key: &str) -> Result<usize, ConfigError> {
    match value.as_u64().and_then(|v| usize::try_from(v).ok()) {
        Some(b) if b >= 1 => Ok(b),
        _ => Err(ConfigError::invalid(
            key,
            format!("expected an integer >= 1, got {}", describe(value)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["quick".to_string(), "reference".to_string()]
    }

    fn parse(yaml: &str) -> Result<ThresholdTable, ConfigError> {
        let value: Value = serde_yaml::from_str(yaml).unwrap();
        parse_thresholds(Some(&value), &names(), "delayed_batching_threshold")
    }

    fn error(yaml: &str) -> (String, String) {
        let err = parse(yaml).unwrap_err();
        assert_eq!(err.error_type(), "invalid");
        (err.key().unwrap().to_string(), err.to_string())
    }

    #[test]
    fn all_forms_normalize_to_the_same_table() {
        let expected = ThresholdTable::from_per_model(vec![vec![1, 1, 2], vec![1, 2, 3]]).unwrap();
        assert_eq!(parse("[[1, 1], [1, 2], [2, 3]]").unwrap(), expected);
        assert_eq!(
            parse("{quick: [1, 1, 2], reference: [1, 2, 3]}").unwrap(),
            expected
        );
        // Form (a) is one list for every model.
        let same = ThresholdTable::from_per_model(vec![vec![1, 3], vec![1, 3]]).unwrap();
        assert_eq!(parse("[1, 3]").unwrap(), same);
        assert_eq!(parse("[[1, 1], [3, 3]]").unwrap(), same);
        assert_eq!(parse("{quick: [1, 3], reference: [1, 3]}").unwrap(), same);
        // Models left out of form (c) never wait; null means no delay at all.
        assert_eq!(
            parse("{reference: [1, 2]}").unwrap(),
            ThresholdTable::from_per_model(vec![vec![1], vec![1, 2]]).unwrap()
        );
        assert_eq!(parse("null").unwrap(), ThresholdTable::no_delay(2));
        assert_eq!(
            parse_thresholds(None, &names(), "k").unwrap(),
            ThresholdTable::no_delay(2)
        );
    }

    #[test]
    fn bad_forms_name_the_offending_entry() {
        let cases = [
            ("[]", "delayed_batching_threshold", "must not be empty"),
            ("3", "delayed_batching_threshold", "got `3`"),
            (
                "[1, 0]",
                "delayed_batching_threshold[1]",
                "expected an integer >= 1, got `0`",
            ),
            ("[1, -2]", "delayed_batching_threshold[1]", "got `-2`"),
            ("[1, 2.5]", "delayed_batching_threshold[1]", "got `2.5`"),
            ("[1, x]", "delayed_batching_threshold[1]", "got \"x\""),
            ("[[1, 1], 2]", "delayed_batching_threshold[1]", "got `2`"),
            (
                "[[1, 1], [1]]",
                "delayed_batching_threshold[1]",
                "has 1 entries, expected one per model (2)",
            ),
            (
                "[[1, 1], [1, 0]]",
                "delayed_batching_threshold[1][1]",
                "got `0`",
            ),
            ("[1, [2, 2]]", "delayed_batching_threshold[1]", "got a list"),
            (
                "{big: [1]}",
                "delayed_batching_threshold.big",
                "\"big\" is not a model (models: quick, reference)",
            ),
            (
                "{quick: []}",
                "delayed_batching_threshold.quick",
                "must not be empty",
            ),
            (
                "{quick: 2}",
                "delayed_batching_threshold.quick",
                "expected a list of ints",
            ),
            (
                "{quick: [1, 0]}",
                "delayed_batching_threshold.quick[1]",
                "got `0`",
            ),
            (
                "{1: [1]}",
                "delayed_batching_threshold",
                "keys must be model names",
            ),
        ];
        for (yaml, key, message) in cases {
            let (got_key, got_message) = error(yaml);
            assert_eq!(got_key, key, "{yaml}");
            assert!(got_message.contains(message), "{yaml}: {got_message}");
        }
    }

    #[test]
    fn get_clamps_concurrency_and_threshold() {
        let t = ThresholdTable::from_per_model(vec![vec![1], vec![2, 3, 5]]).unwrap();
        // Model 0 never waits.
        for n in 0..10 {
            assert_eq!(t.get(0, n), 1);
        }
        // n < 1 reads the first entry, then clamped to [1, 1].
        assert_eq!(t.get(1, 0), 1);
        // n = 1: entry 2 clamped to n.
        assert_eq!(t.get(1, 1), 1);
        assert_eq!(t.get(1, 2), 2);
        assert_eq!(t.get(1, 3), 3);
        // Beyond the list: last entry (5), clamped to n.
        assert_eq!(t.get(1, 4), 4);
        assert_eq!(t.get(1, 5), 5);
        assert_eq!(t.get(1, 100), 5);
        // Unknown model: never wait.
        assert_eq!(t.get(7, 10), 1);
    }

    #[test]
    fn replace_validates() {
        let mut t = ThresholdTable::no_delay(2);
        assert_eq!(
            t.replace(vec![vec![1]]).unwrap_err(),
            ThresholdError::ModelCount {
                expected: 2,
                got: 1
            }
        );
        assert_eq!(
            t.replace(vec![vec![1], vec![]]).unwrap_err(),
            ThresholdError::Empty { model: 1 }
        );
        assert_eq!(
            t.replace(vec![vec![1], vec![1, 0]]).unwrap_err(),
            ThresholdError::Zero { model: 1, index: 1 }
        );
        assert_eq!(
            t,
            ThresholdTable::no_delay(2),
            "a failed replace leaves the table alone"
        );
        t.replace(vec![vec![1, 2], vec![3]]).unwrap();
        assert_eq!(t.get(0, 2), 2);
        assert_eq!(t.get(1, 9), 3);
        assert_eq!(
            t.replace_model(2, vec![1]).unwrap_err(),
            ThresholdError::NoSuchModel { model: 2, count: 2 }
        );
        assert_eq!(
            t.replace_model(0, vec![]).unwrap_err(),
            ThresholdError::Empty { model: 0 }
        );
        t.replace_model(1, vec![1, 1, 4]).unwrap();
        assert_eq!(t.for_model(1), Some(&[1, 1, 4][..]));
        assert_eq!(t.num_models(), 2);
        assert_eq!(
            ThresholdError::Zero { model: 1, index: 1 }.to_string(),
            "model 1: threshold at concurrency 2 is 0 (thresholds are >= 1)"
        );
    }
}
