//! The admin API of a live in-process group: health, the delayed-batching
//! table (read and replace without dropping requests) and a state snapshot.
//! Calls come from the HTTP thread and never wait for a step.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::http::{knob_value, set_knob, AdminApi, TextDir, ThresholdTable};
use crate::scheduler::group::Group;
use policies::ThresholdKnob;

/// `AdminApi` over a `Group`.
pub struct GroupAdmin {
    group: Arc<Group>,
    knob: Option<ThresholdKnob>,
    text: Option<TextDir>,
}

impl GroupAdmin {
    /// Serves `group`; `knob` is its policy's live routing threshold (one
    /// cell shared by the members).
    pub fn new(group: Arc<Group>, knob: Option<ThresholdKnob>) -> Self {
        Self {
            group,
            knob,
            text: None,
        }
    }

    /// Also serves the tokenizer files of `text` (the entry model's).
    pub fn with_text_dir(mut self, text: Option<TextDir>) -> Self {
        self.text = text;
        self
    }
}

impl AdminApi for GroupAdmin {
    fn text_dir(&self) -> Option<&TextDir> {
        self.text.as_ref()
    }

    fn routing_threshold(&self) -> Option<f64> {
        knob_value(self.knob.as_ref())
    }

    fn set_routing_threshold(&self, value: f64) -> Result<f64, String> {
        set_knob(self.knob.as_ref(), value)
    }

    fn alive(&self) -> Result<(), String> {
        // One process holds the whole group: nothing outside it to wait for.
        self.healthy()
    }

    fn healthy(&self) -> Result<(), String> {
        let dead: Vec<&str> = self
            .group
            .names()
            .iter()
            .enumerate()
            .filter(|(m, _)| !self.group.is_alive(*m as u16))
            .map(|(_, n)| n.as_str())
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(format!("scheduler stopped for: {}", dead.join(", ")))
        }
    }

    fn thresholds(&self) -> ThresholdTable {
        self.group
            .names()
            .iter()
            .enumerate()
            .map(|(m, n)| (n.clone(), self.group.stats(m as u16).threshold_table))
            .collect()
    }

    fn set_thresholds(&self, t: ThresholdTable) -> Result<ThresholdTable, String> {
        let names = self.group.names();
        let mut updates = Vec::new();
        for (name, table) in &t {
            let m = names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| format!("unknown model `{name}` (models: {})", names.join(", ")))?;
            if table.is_empty() || table.contains(&0) {
                return Err(format!(
                    "{name}: thresholds must be a non-empty list of values >= 1"
                ));
            }
            updates.push((m as u16, table.clone()));
        }
        let mut out = self.thresholds();
        for (m, table) in updates {
            self.group.set_thresholds(m, table.clone());
            out.insert(names[m as usize].clone(), table);
        }
        Ok(out)
    }

    fn snapshot(&self) -> serde_json::Value {
        let models: BTreeMap<String, serde_json::Value> = self
            .group
            .names()
            .iter()
            .enumerate()
            .map(|(m, n)| {
                let s = self.group.stats(m as u16);
                (
                    n.clone(),
                    serde_json::to_value(s).unwrap_or(serde_json::Value::Null),
                )
            })
            .collect();
        serde_json::json!({ "active": self.group.active(), "models": models })
    }
}

/// `AdminApi` over one model's process.
pub struct MemberAdmin {
    member: Arc<crate::scheduler::member::MemberProcess>,
    knob: Option<ThresholdKnob>,
    text: Option<TextDir>,
}

impl MemberAdmin {
    /// Serves `member`; `knob` is its policy's live routing threshold.
    pub fn new(
        member: Arc<crate::scheduler::member::MemberProcess>,
        knob: Option<ThresholdKnob>,
    ) -> Self {
        Self {
            member,
            knob,
            text: None,
        }
    }

    /// Also serves the tokenizer files of `text` (the entry model's).
    pub fn with_text_dir(mut self, text: Option<TextDir>) -> Self {
        self.text = text;
        self
    }

    fn name(&self) -> String {
        self.member.names()[self.member.index() as usize].clone()
    }
}

impl AdminApi for MemberAdmin {
    fn text_dir(&self) -> Option<&TextDir> {
        self.text.as_ref()
    }

    fn routing_threshold(&self) -> Option<f64> {
        knob_value(self.knob.as_ref())
    }

    fn set_routing_threshold(&self, value: f64) -> Result<f64, String> {
        set_knob(self.knob.as_ref(), value)
    }

    fn alive(&self) -> Result<(), String> {
        if self.member.is_alive() {
            Ok(())
        } else {
            Err("the scheduler has stopped".into())
        }
    }

    fn healthy(&self) -> Result<(), String> {
        self.alive()?;
        let down: Vec<&str> = (0..self.member.names().len() as u16)
            .filter(|&m| !self.member.peer_up(m))
            .map(|m| self.member.names()[m as usize].as_str())
            .collect();
        if down.is_empty() {
            Ok(())
        } else {
            Err(format!("peers unreachable: {}", down.join(", ")))
        }
    }

    fn thresholds(&self) -> ThresholdTable {
        [(self.name(), self.member.stats().threshold_table)]
            .into_iter()
            .collect()
    }

    fn set_thresholds(&self, t: ThresholdTable) -> Result<ThresholdTable, String> {
        let me = self.name();
        if let Some(other) = t.keys().find(|n| **n != me) {
            return Err(format!("this process serves `{me}`, not `{other}`"));
        }
        let Some(table) = t.get(&me) else {
            return Ok(self.thresholds());
        };
        if table.is_empty() || table.contains(&0) {
            return Err(format!(
                "{me}: thresholds must be a non-empty list of values >= 1"
            ));
        }
        self.member.set_thresholds(table.clone());
        Ok([(me, table.clone())].into_iter().collect())
    }

    fn snapshot(&self) -> serde_json::Value {
        serde_json::json!({ "model": self.name(), "stats": self.member.stats() })
    }
}
