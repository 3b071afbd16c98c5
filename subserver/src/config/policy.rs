//! The routing policy of a group: `scheduler_class` and `scheduler_kwargs`.
//! The registry that turns these into a policy lives elsewhere; here a name
//! is only normalized, and kwargs are kept as given for the policy to check.

use std::fmt;

/// Canonical names (as in the official code) and the aliases accepted for
/// each.
const BUILTIN: &[(&str, &[&str])] = &[
    ("R2R", &["r2r"]),
    ("CITER", &["citer"]),
    ("CoLLM", &["co_llm", "co-llm", "collm"]),
    ("RStitch", &["r_stitch", "r-stitch", "rstitch"]),
    ("ME", &["me"]),
    (
        "GlimpRouter",
        &["glimprouter", "glimp_router", "glimp-router"],
    ),
    ("QueryLevel", &["query_level", "query-level", "querylevel"]),
    ("Random", &["random"]),
    ("Bernoulli", &["bernoulli"]),
];

/// A policy name. Built-in names and their aliases (`co_llm`, `r-stitch`,
/// ...) normalize to the official spelling (`CoLLM`, `RStitch`); any other
/// non-empty name is kept verbatim so a newly registered policy needs no
/// change here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyName(String);

impl PolicyName {
    /// The official names of the built-in policies.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        BUILTIN.iter().map(|(name, _)| *name)
    }

    /// Normalizes `name`; `None` for an empty or blank name.
    pub fn parse(name: &str) -> Option<Self> {
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        let canonical = BUILTIN
            .iter()
            .find(|(official, aliases)| *official == name || aliases.contains(&name))
            .map_or(name, |(official, _)| *official);
        Some(Self(canonical.to_string()))
    }

    /// The normalized name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when this is one of the built-in policies.
    pub fn is_builtin(&self) -> bool {
        BUILTIN.iter().any(|(official, _)| *official == self.0)
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The routing policy with its arguments, exactly as the file gave them.
/// Relative paths inside `kwargs` (e.g. R2R's `router_path`) should be
/// resolved with `EngineConfig::resolve_path`.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// Normalized `scheduler_class`.
    pub name: PolicyName,
    /// `scheduler_kwargs` (an empty map when absent).
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_normalize_to_official_names() {
        let cases = [
            ("R2R", "R2R"),
            ("r2r", "R2R"),
            ("citer", "CITER"),
            ("co_llm", "CoLLM"),
            ("co-llm", "CoLLM"),
            ("CoLLM", "CoLLM"),
            ("r_stitch", "RStitch"),
            ("me", "ME"),
            ("glimprouter", "GlimpRouter"),
            ("query_level", "QueryLevel"),
            ("random", "Random"),
            ("bernoulli", "Bernoulli"),
            (" RStitch ", "RStitch"),
        ];
        for (given, official) in cases {
            let name = PolicyName::parse(given).unwrap();
            assert_eq!(name.as_str(), official, "{given}");
            assert!(name.is_builtin());
        }
        assert_eq!(PolicyName::builtin_names().count(), 9);
    }

    #[test]
    fn names_are_case_sensitive_and_unknown_names_pass_through() {
        let odd = PolicyName::parse("Citer").unwrap();
        assert_eq!(odd.as_str(), "Citer");
        assert!(!odd.is_builtin());
        let custom = PolicyName::parse("MyPolicy").unwrap();
        assert_eq!(custom.to_string(), "MyPolicy");
        assert!(PolicyName::parse("  ").is_none());
    }
}
