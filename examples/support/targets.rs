//! The results pages' targets (`tools/bench/targets.yaml`, their one home,
//! also read by the shell and Python generators) and the verdict section
//! that ends each bench page: every target stated, met or not met computed.

use anyhow::{Context, Result};
use loadgen::page::Page;
use loadgen::verdict::{Goal, Verdict};

/// The targets file, in the repository.
const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/bench/targets.yaml");

/// The target `key` (dotted: `gateway.overhead_pct_max`) from `text`.
fn lookup(text: &str, key: &str) -> Result<f64> {
    let root: serde_yaml::Value =
        serde_yaml::from_str(text).context("tools/bench/targets.yaml is not YAML")?;
    let mut node = &root;
    for part in key.split('.') {
        node = node
            .get(part)
            .with_context(|| format!("no target `{key}` in tools/bench/targets.yaml"))?;
    }
    node.as_f64()
        .with_context(|| format!("target `{key}` is not a number"))
}

/// The target `key` (dotted: `gateway.overhead_pct_max`).
pub fn target(key: &str) -> Result<f64> {
    let text = std::fs::read_to_string(FILE).with_context(|| format!("reading {FILE}"))?;
    lookup(&text, key)
}

/// A verdict on `values` (one per run or cell) against the target `key`.
pub fn verdict(name: &str, key: &str, goal: Goal, values: Vec<f64>) -> Result<Verdict> {
    Ok(Verdict::new(name, target(key)?, goal, values))
}

/// Met only when every target was measured and met.
pub fn overall(verdicts: &[Verdict]) -> Option<bool> {
    verdicts
        .iter()
        .map(Verdict::met)
        .try_fold(true, |all, met| Some(all && met?))
}

/// Writes the page's verdict section: one sentence per target, then the
/// page's verdict.
pub fn section(page: &mut Page, verdicts: &[Verdict]) {
    page.section("Verdict");
    let lines: Vec<String> = verdicts
        .iter()
        .map(|v| format!("- {}.", v.sentence()))
        .collect();
    page.para(&lines.join("\n"));
    page.para(match overall(verdicts) {
        Some(true) => {
            "**Verdict: met** (every target above; targets from `tools/bench/targets.yaml`)."
        }
        Some(false) => {
            "**Verdict: not met** (see the targets above; targets from `tools/bench/targets.yaml`)."
        }
        None => "**Verdict: not measured** (a target above had no runs).",
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_reads_dotted_keys_and_names_a_missing_one() {
        let text = "a:\n  b: 0.5\n  n: 0\n";
        assert_eq!(lookup(text, "a.b").unwrap(), 0.5);
        assert_eq!(lookup(text, "a.n").unwrap(), 0.0);
        let err = lookup(text, "a.c").unwrap_err().to_string();
        assert!(err.contains("a.c"), "{err}");
    }

    #[test]
    fn every_target_the_pages_use_is_in_the_file() {
        for key in KEYS {
            target(key).unwrap();
        }
    }

    #[test]
    fn overall_is_met_only_when_all_are() {
        let v = |values: Vec<f64>| Verdict::new("x", 1.0, Goal::AtLeast, values);
        assert_eq!(overall(&[v(vec![1.0]), v(vec![2.0])]), Some(true));
        assert_eq!(overall(&[v(vec![1.0]), v(vec![0.99])]), Some(false));
        assert_eq!(overall(&[v(vec![1.0]), v(vec![])]), None);
        let mut page = Page::begin("t", "make t");
        section(&mut page, &[v(vec![0.5])]);
        assert!(page.render().contains("**Verdict: not met**"));
    }
}

/// Every key the bench examples read (checked by the tests above).
#[cfg(test)]
const KEYS: &[&str] = &[
    "gateway.overhead_pct_max",
    "gateway.token_p99_ms_max",
    "gateway.other_errors_max",
    "me_direct.home_steps_saved_min",
    "retune.live_settled_vs_tuned_min",
    "tuner.local_vs_exhaustive_mismatches_max",
];
