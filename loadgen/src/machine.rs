//! What a results page records about where and when it was measured.

use std::process::Command;

/// The 1-minute load average from `/proc/loadavg` (`None` off Linux).
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// CPUs this process may use (1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// "N cores, MODEL" from the OS and `/proc/cpuinfo`.
pub fn describe() -> String {
    let cores = cores();
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let kb: f64 = t
            .lines()
            .find(|l| l.starts_with("MemTotal"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        Some(format!(", {:.0} GiB RAM", kb / 1024.0 / 1024.0))
    });
    format!("{cores} cores, {model}{}", mem.unwrap_or_default())
}

/// The short commit of the working tree, with `-dirty` when it has
/// uncommitted changes to tracked files; "unknown" outside a git checkout.
/// Changes under `docs/results/` do not count: `make bench` writes its
/// pages one after another, and an earlier page is not a change to what
/// the next one measures.
pub fn commit() -> String {
    let run = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match run(&["rev-parse", "--short=10", "HEAD"]) {
        Some(hash) => {
            let dirty = run(&[
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ":(top)",
                ":(top,exclude)docs/results",
            ])
            .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        None => "unknown".into(),
    }
}

/// Now, UTC, to the second.
pub fn now_utc() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| jiff::Timestamp::now().to_string())
}
