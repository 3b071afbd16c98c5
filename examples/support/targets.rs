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

/// Where target `key` comes from, from `text` (its line under `sources:`).
fn source_in(text: &str, key: &str) -> Result<String> {
    let root: serde_yaml::Value =
        serde_yaml::from_str(text).context("tools/bench/targets.yaml is not YAML")?;
    root.get("sources")
        .and_then(|s| s.get(key))
        .and_then(|s| s.as_str())
        .map(str::to_string)
        .with_context(|| format!("target `{key}` has no source in tools/bench/targets.yaml"))
}

/// Where target `key` comes from: an issue and its line, or the commit that
/// set a guard and what it had measured.
pub fn source(key: &str) -> Result<String> {
    let text = std::fs::read_to_string(FILE).with_context(|| format!("reading {FILE}"))?;
    source_in(&text, key)
}

/// A verdict on `values` (one per run or cell) against the target `key`;
/// its sentence names the target's source.
pub fn verdict(name: &str, key: &str, goal: Goal, values: Vec<f64>) -> Result<Verdict> {
    let named = format!("{name} (target `{key}`: {})", source(key)?);
    Ok(Verdict::new(&named, target(key)?, goal, values))
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
    fn a_source_is_read_and_a_missing_one_named() {
        let text = "a:\n  b: 0.5\nsources:\n  a.b: issue 1\n";
        assert_eq!(source_in(text, "a.b").unwrap(), "issue 1");
        let err = source_in("a:\n  b: 0.5\n", "a.b").unwrap_err().to_string();
        assert!(err.contains("a.b"), "{err}");
    }

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
        let keys = keys_in_sources();
        assert!(
            keys.iter().any(|k| k == "engine.vs_bare_min"),
            "the scan finds bench_engine's keys: {keys:?}"
        );
        for key in keys {
            target(&key).unwrap();
            source(&key).unwrap();
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

/// Every target key the examples name: each quoted `section.key` whose
/// section is one of the targets file's (read from the sources, so a new
/// key cannot be left out of a hand-kept list).
#[cfg(test)]
fn keys_in_sources() -> Vec<String> {
    fn rs_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rs_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let text = std::fs::read_to_string(FILE).unwrap();
    let root: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let sections: Vec<String> = root
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(|k| k.as_str())
        .filter(|k| *k != "sources")
        .map(str::to_string)
        .collect();
    let mut files = Vec::new();
    rs_files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
        &mut files,
    );
    let mut keys = Vec::new();
    for file in files {
        let code = std::fs::read_to_string(&file).unwrap();
        for quoted in code.split('"').skip(1).step_by(2) {
            let Some((section, key)) = quoted.split_once('.') else {
                continue;
            };
            let word = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            };
            // Every target is named for its bound (`_min`, `_max`), which
            // keeps file names (`retune.md`) out.
            let bound = key.ends_with("_min") || key.ends_with("_max");
            if sections.iter().any(|s| s == section) && word(key) && bound {
                keys.push(quoted.to_string());
            }
        }
    }
    keys.sort();
    keys.dedup();
    keys
}
