//! The admin API of a live in-process group: health, the delayed-batching
//! table (read and replace without dropping requests) and a state snapshot.
//! Calls come from the HTTP thread and never wait for a step.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::http::{AdminApi, ThresholdTable};
use crate::scheduler::group::Group;

/// `AdminApi` over a `Group`.
pub struct GroupAdmin {
    group: Arc<Group>,
}

impl GroupAdmin {
    /// Serves `group`.
    pub fn new(group: Arc<Group>) -> Self {
        Self { group }
    }
}

impl AdminApi for GroupAdmin {
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
