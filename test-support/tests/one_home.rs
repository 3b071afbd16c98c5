//! The workspace's tests take their hang deadline and their ports from
//! here: one [`test_support::HANG`], one `free_port`, and no expression that
//! picks two ports one at a time (the kernel may hand the same port out
//! twice once the first listener is gone; `free_ports::<N>` holds them all).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};

/// Every `.rs` file of the workspace outside build output and caches.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(name.as_str(), "target" | ".cache" | ".git" | "node_modules") {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

/// `file:line: text` of each line of the workspace that breaks the rule.
fn offenders(root: &Path, home: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(root, &mut files);
    // Spelled in pieces, so that this file does not match itself.
    let (call, def_port, def_hang) = (
        ["free_port", "()"].concat(),
        ["fn free_port", "("].concat(),
        ["const HANG", ":"].concat(),
    );
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let is_home = file == home;
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let twice = code.matches(call.as_str()).count() >= 2;
            let own_copy =
                !is_home && (code.contains(def_port.as_str()) || code.contains(def_hang.as_str()));
            if twice || own_copy {
                found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn ports_and_the_hang_deadline_have_one_home() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here.parent().unwrap();
    assert!(
        root.join("Cargo.lock").is_file(),
        "{} is not the workspace",
        root.display()
    );
    let found = offenders(root, &here.join("src/lib.rs"));
    assert!(
        found.is_empty(),
        "use test_support::{{HANG, free_port, free_ports}} (one call of free_ports::<N> for N ports):\n{}",
        found.join("\n")
    );
}
