//! The policy registry: every routing policy's name, its aliases and its
//! official per-model class names, in ONE table. The config normalizes
//! `scheduler_class` with it, and the policy builder (`policy::build_in`)
//! matches on the [`PolicyKind`] it yields, so a name listed here always
//! builds (a test in `policy` builds every one).
//!
//! The official TokenRouter names one scheduler class per model, pairing a
//! small-model (`*_slm`, on the entry model) with a large-model (`*_llm`)
//! class: `r2r_slm` / `r2r_llm`. Every policy here accepts `<prefix>_slm`
//! and `<prefix>_llm` with its official prefix.

use std::fmt;

/// A built-in routing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// R2R: a trained router sends divergent tokens to the large model.
    R2r,
    /// CITER: a trained confidence router.
    Citer,
    /// Co-LLM: a deferral score from the small model's head.
    CoLlm,
    /// R-Stitch: entropy hand-over both ways.
    RStitch,
    /// ME: ensemble weights over two or more models.
    Me,
    /// GlimpRouter: step-level glimpses.
    GlimpRouter,
    /// Query-level: one model writes the whole answer.
    QueryLevel,
    /// Random (Bernoulli) hand-over, for baselines and the tuner.
    Random,
    /// One model only, no routing.
    Single,
}

/// One registry row.
struct Entry {
    kind: PolicyKind,
    /// Canonical name (as our docs and metrics spell it).
    name: &'static str,
    /// Other spellings accepted for `scheduler_class`.
    aliases: &'static [&'static str],
    /// The official per-model class prefix (`r2r` for `r2r_slm`/`r2r_llm`).
    official: Option<&'static str>,
}

const REGISTRY: &[Entry] = &[
    Entry {
        kind: PolicyKind::R2r,
        name: "R2R",
        aliases: &["r2r"],
        official: Some("r2r"),
    },
    Entry {
        kind: PolicyKind::Citer,
        name: "CITER",
        aliases: &["citer"],
        official: Some("citer"),
    },
    Entry {
        kind: PolicyKind::CoLlm,
        name: "CoLLM",
        aliases: &["co_llm", "co-llm", "collm"],
        official: Some("collm"),
    },
    Entry {
        kind: PolicyKind::RStitch,
        name: "RStitch",
        aliases: &["r_stitch", "r-stitch", "rstitch", "R-Stitch"],
        official: Some("rstitch"),
    },
    Entry {
        kind: PolicyKind::Me,
        name: "ME",
        aliases: &["me"],
        official: Some("me"),
    },
    Entry {
        kind: PolicyKind::GlimpRouter,
        name: "GlimpRouter",
        aliases: &["glimprouter", "glimp_router", "glimp-router"],
        official: Some("glimprouter"),
    },
    Entry {
        kind: PolicyKind::QueryLevel,
        name: "QueryLevel",
        aliases: &["query_level", "query-level", "querylevel"],
        official: Some("query_level"),
    },
    Entry {
        kind: PolicyKind::Random,
        name: "Random",
        aliases: &["random", "Bernoulli", "bernoulli"],
        official: Some("random"),
    },
    Entry {
        kind: PolicyKind::Single,
        name: "Single",
        aliases: &["single", "none"],
        official: None,
    },
];

/// Which model of the pair an official per-model class belongs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassRole {
    /// `*_slm`: the small, entry model.
    Small,
    /// `*_llm`: a large (non-entry) model.
    Large,
    /// A plain policy name: any model.
    Any,
}

impl PolicyKind {
    /// Every built-in policy, in registry order.
    pub fn all() -> impl Iterator<Item = PolicyKind> {
        REGISTRY.iter().map(|e| e.kind)
    }

    fn entry(self) -> &'static Entry {
        // Every kind has exactly one row (the registry test checks it).
        REGISTRY
            .iter()
            .find(|e| e.kind == self)
            .unwrap_or(&REGISTRY[0])
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// Every spelling `scheduler_class` accepts for this policy: the name,
    /// its aliases, and the official `<prefix>_slm` / `<prefix>_llm`.
    pub fn spellings(self) -> Vec<String> {
        let e = self.entry();
        let mut all: Vec<String> = std::iter::once(e.name)
            .chain(e.aliases.iter().copied())
            .map(str::to_string)
            .collect();
        if let Some(prefix) = e.official {
            all.push(format!("{prefix}_slm"));
            all.push(format!("{prefix}_llm"));
        }
        all
    }

    /// The policy a `scheduler_class` names and the role it implies.
    pub fn from_class(class: &str) -> Option<(PolicyKind, ClassRole)> {
        let class = class.trim();
        for e in REGISTRY {
            if e.name == class || e.aliases.contains(&class) {
                return Some((e.kind, ClassRole::Any));
            }
            if let Some(prefix) = e.official {
                if let Some(rest) = class.strip_prefix(prefix) {
                    match rest {
                        "_slm" => return Some((e.kind, ClassRole::Small)),
                        "_llm" => return Some((e.kind, ClassRole::Large)),
                        _ => {}
                    }
                }
            }
        }
        None
    }

    /// The canonical names, for error messages.
    pub fn known() -> String {
        Self::all().map(Self::name).collect::<Vec<_>>().join(", ")
    }
}

/// A normalized policy name: always a built-in policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyName(PolicyKind);

impl PolicyName {
    /// The canonical names of the built-in policies.
    pub fn builtin_names() -> impl Iterator<Item = &'static str> {
        PolicyKind::all().map(PolicyKind::name)
    }

    /// Normalizes `name` (any spelling, official per-model classes too);
    /// `None` when no policy has that name.
    pub fn parse(name: &str) -> Option<Self> {
        PolicyKind::from_class(name).map(|(kind, _)| Self(kind))
    }

    /// The policy.
    pub fn kind(self) -> PolicyKind {
        self.0
    }

    /// The canonical name.
    pub fn as_str(&self) -> &'static str {
        self.0.name()
    }
}

impl From<PolicyKind> for PolicyName {
    fn from(kind: PolicyKind) -> Self {
        Self(kind)
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The routing policy with its arguments. Official argument names are
/// already translated (R2R's `model_path` is our `router_path`). Relative
/// paths inside `kwargs` resolve against the config file's directory.
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
    fn every_kind_has_one_row_and_spellings_do_not_collide() {
        let mut seen = std::collections::HashMap::new();
        for kind in PolicyKind::all() {
            assert_eq!(REGISTRY.iter().filter(|e| e.kind == kind).count(), 1);
            for s in kind.spellings() {
                assert_eq!(
                    PolicyKind::from_class(&s).map(|(k, _)| k),
                    Some(kind),
                    "{s}"
                );
                assert!(seen.insert(s.clone(), kind).is_none(), "{s} listed twice");
            }
        }
        assert_eq!(PolicyName::builtin_names().count(), 9);
    }

    #[test]
    fn aliases_and_official_classes_normalize() {
        let cases = [
            ("R2R", "R2R", ClassRole::Any),
            ("r2r", "R2R", ClassRole::Any),
            ("r2r_slm", "R2R", ClassRole::Small),
            ("r2r_llm", "R2R", ClassRole::Large),
            ("citer", "CITER", ClassRole::Any),
            ("co-llm", "CoLLM", ClassRole::Any),
            ("collm_llm", "CoLLM", ClassRole::Large),
            ("rstitch_slm", "RStitch", ClassRole::Small),
            ("me", "ME", ClassRole::Any),
            ("query_level_llm", "QueryLevel", ClassRole::Large),
            ("bernoulli", "Random", ClassRole::Any),
            ("none", "Single", ClassRole::Any),
            (" RStitch ", "RStitch", ClassRole::Any),
        ];
        for (given, name, role) in cases {
            let (kind, r) = PolicyKind::from_class(given).unwrap();
            assert_eq!((kind.name(), r), (name, role), "{given}");
            assert_eq!(PolicyName::parse(given).unwrap().as_str(), name);
        }
        for unknown in ["Citer", "MyPolicy", "r2r_xlm", "single_slm", "", "  "] {
            assert!(PolicyName::parse(unknown).is_none(), "{unknown}");
        }
    }
}
