//! What the HTTP surface asks of the subserver.

use std::collections::BTreeMap;

use policies::ThresholdKnob;

/// Delayed-batching thresholds per model: `table[model][n - 1]` is the
/// number of runnable requests the model waits for when `n` requests are
/// active in the group.
pub type ThresholdTable = BTreeMap<String, Vec<usize>>;

/// The subserver's side of the admin endpoints. Called from the HTTP
/// thread, so implementations lock what they share with the scheduler and
/// must return quickly (never wait for a step to end).
pub trait AdminApi: Send + Sync {
    /// `Ok` while this process works, whatever its peers do (`/livez`,
    /// the liveness probe: a restart can only fix what is wrong here);
    /// otherwise why not (503). Default: the HTTP thread answers.
    fn alive(&self) -> Result<(), String> {
        Ok(())
    }
    /// `Ok` when the subserver can serve; otherwise why not (503).
    fn healthy(&self) -> Result<(), String>;
    /// The thresholds in force, for every model of the subserver.
    fn thresholds(&self) -> ThresholdTable;
    /// Replaces the thresholds of the models in `t` (already checked to be
    /// known models with non-empty lists of positive values) and returns
    /// the whole table now in force; `Err` (answered as 400) when the
    /// subserver refuses the table.
    fn set_thresholds(&self, t: ThresholdTable) -> Result<ThresholdTable, String>;
    /// Queue lengths (running, waiting, pending) per model and KV usage, as
    /// JSON for `/admin/state`.
    fn snapshot(&self) -> serde_json::Value;
    /// The policy's live routing threshold (Random's probability, the
    /// entropy or probability bar of R-Stitch, R2R, CITER, ...), when the
    /// policy has one.
    fn routing_threshold(&self) -> Option<f64> {
        None
    }
    /// Sets the live routing threshold and returns the value in force;
    /// `Err` (400) when the policy has none or `value` is out of its range.
    fn set_routing_threshold(&self, value: f64) -> Result<f64, String> {
        let _ = value;
        Err("this subserver's policy has no live routing threshold".into())
    }
    /// The entry model's directory, whose tokenizer files
    /// `GET /internal/text-side` serves; `None` (404) when there is none.
    fn text_dir(&self) -> Option<&super::text_side::TextDir> {
        None
    }
}

/// The `/admin/routing_threshold` side of a policy's [`ThresholdKnob`].
pub fn knob_value(knob: Option<&ThresholdKnob>) -> Option<f64> {
    knob.map(|k| k.cell.get())
}

/// Sets `knob` to `value` when it lies in the knob's range.
pub fn set_knob(knob: Option<&ThresholdKnob>, value: f64) -> Result<f64, String> {
    let knob = knob.ok_or("this subserver's policy has no live routing threshold")?;
    if !value.is_finite() || value < knob.min || value > knob.max {
        return Err(format!(
            "routing_threshold must lie in [{}, {}], got {value}",
            knob.min, knob.max
        ));
    }
    knob.cell.set(value);
    Ok(knob.cell.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use policies::{LiveThreshold, ShareDirection};

    #[test]
    fn a_knob_moves_within_its_range_only() {
        let cell = LiveThreshold::new(0.2);
        let knob = ThresholdKnob::unit(cell.clone(), ShareDirection::RisesWithThreshold);
        assert_eq!(knob_value(Some(&knob)), Some(0.2));
        assert_eq!(set_knob(Some(&knob), 0.6), Ok(0.6));
        assert_eq!(cell.get(), 0.6, "the policy's cell moved");
        for bad in [-0.1, 1.5, f64::NAN] {
            let err = set_knob(Some(&knob), bad).unwrap_err();
            assert!(err.contains("[0, 1]"), "{err}");
        }
        assert_eq!(cell.get(), 0.6);
        assert_eq!(knob_value(None), None);
        assert!(set_knob(None, 0.5).is_err());
    }
}
