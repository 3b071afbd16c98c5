//! What a routed group serves under which name, and the sampling defaults
//! each name gets.

use std::sync::{Arc, OnceLock};

use engine_config::GenerationDefaults;

use crate::error::ApiError;

/// Who writes the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Token-level routing over the whole group.
    Routed,
    /// Query-level: this member model writes every token.
    Pinned(u16),
}

/// The entry model's sampling defaults learned after the gateway started:
/// a gateway with `gateway.text_side: backend` reads its
/// `generation_config.json` from a group (see `text_source`), since it has
/// no copy of the model's directory. Clones share one cell.
#[derive(Debug, Clone, Default)]
pub struct LearnedDefaults(Arc<OnceLock<GenerationDefaults>>);

impl LearnedDefaults {
    /// Sets them (once: false when already set).
    pub fn set(&self, defaults: GenerationDefaults) -> bool {
        self.0.set(defaults).is_ok()
    }

    /// The defaults, once learned.
    pub fn get(&self) -> Option<GenerationDefaults> {
        self.0.get().copied()
    }
}

impl PartialEq for LearnedDefaults {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// The models one routed group serves: the group name (token-level
/// routing) and each member (query-level on that model), with the sampling
/// defaults of each (vLLM's generation config).
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// The routed group's name (`gateway.served_model_name`).
    pub served: String,
    /// Member model names by index.
    pub members: Vec<String>,
    /// Index of the entry model (the small one); the others count as large.
    pub entry: u16,
    /// Sampling defaults of the routed group.
    pub defaults: GenerationDefaults,
    /// Sampling defaults of each member served alone (index = member);
    /// a missing entry means none.
    pub member_defaults: Vec<GenerationDefaults>,
    /// What each member's weights are computed in (index = member, see
    /// `ModelSpec::precision`); a missing entry means not known.
    pub member_precision: Vec<String>,
    /// The entry model's defaults once learned from a group; they replace
    /// `defaults` and the entry member's (the routed group's defaults are
    /// its entry model's).
    pub learned: LearnedDefaults,
}

impl Catalog {
    /// The target of `model`: the served name or `default` route token by
    /// token; a member's name runs that member alone.
    pub fn resolve(&self, model: &str) -> Result<Target, ApiError> {
        if model == self.served || model == "default" {
            return Ok(Target::Routed);
        }
        match self.members.iter().position(|m| m == model) {
            Some(i) => Ok(Target::Pinned(i as u16)),
            None => Err(ApiError::ModelNotFound(model.to_string())),
        }
    }

    /// The sampling defaults of `target`.
    pub fn defaults_for(&self, target: Target) -> GenerationDefaults {
        let learned = self.learned.get();
        match target {
            Target::Routed => learned.unwrap_or(self.defaults),
            Target::Pinned(i) if i == self.entry && learned.is_some() => {
                learned.unwrap_or_default()
            }
            Target::Pinned(i) => self
                .member_defaults
                .get(i as usize)
                .copied()
                .unwrap_or_default(),
        }
    }

    /// Name of member `i` (or `model_i` for an unknown index).
    pub fn member(&self, i: u16) -> String {
        self.members
            .get(i as usize)
            .cloned()
            .unwrap_or_else(|| format!("model_{i}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_defaults_replace_the_groups_and_the_entrys_only() {
        let own = GenerationDefaults {
            min_p: Some(0.1),
            ..Default::default()
        };
        let c = Catalog {
            served: "tr".into(),
            members: vec!["quick".into(), "reference".into()],
            entry: 0,
            defaults: GenerationDefaults::default(),
            member_defaults: vec![GenerationDefaults::default(), own],
            member_precision: Vec::new(),
            learned: LearnedDefaults::default(),
        };
        let copy = c.clone();
        assert_eq!(
            c.defaults_for(Target::Routed),
            GenerationDefaults::default()
        );
        let file = GenerationDefaults {
            temperature: Some(0.6),
            ..Default::default()
        };
        assert!(c.learned.set(file));
        assert!(!c.learned.set(GenerationDefaults::default()), "set once");
        for seen in [&c, &copy] {
            assert_eq!(seen.defaults_for(Target::Routed), file);
            assert_eq!(seen.defaults_for(Target::Pinned(0)), file);
            assert_eq!(seen.defaults_for(Target::Pinned(1)), own);
        }
    }
}
