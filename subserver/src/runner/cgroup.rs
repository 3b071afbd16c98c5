//! What the kernel lets this process use: the memory limit of its cgroup (a
//! pod's `resources.limits.memory`) and the anonymous memory it holds.
//!
//! The limit is the smallest one on the path from the process's cgroup up
//! to its hierarchy's root, in cgroup v2 (`memory.max`) or v1
//! (`memory.limit_in_bytes`), wherever `/proc/self/mountinfo` says the
//! hierarchy is mounted (`/sys/fs/cgroup`, `/sys/fs/cgroup/memory`, or a
//! hybrid layout's `/sys/fs/cgroup/unified`).

use std::path::{Path, PathBuf};

/// Values at or above this mean "no limit" (cgroup v1 writes
/// `PAGE_COUNTER_MAX` pages, about 2^63 bytes).
const UNLIMITED: u64 = 1 << 60;

/// The memory limit of this process's cgroup, `None` when there is none
/// (or the cgroup filesystem cannot be read).
pub fn memory_limit() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    memory_limit_in(&cgroup, &mountinfo, Path::new("/"))
}

/// [`memory_limit`] from the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo`, with the mount points below `fs_root` (tests).
pub fn memory_limit_in(cgroup: &str, mountinfo: &str, fs_root: &Path) -> Option<u64> {
    mountinfo
        .lines()
        .filter_map(parse_mount)
        .filter_map(|m| {
            let own = own_path(cgroup, m.version)?;
            let rel = own.strip_prefix(m.root.as_str()).unwrap_or(own);
            let top = fs_root.join(m.point.trim_start_matches('/'));
            let file = match m.version {
                Version::V2 => "memory.max",
                Version::V1 => "memory.limit_in_bytes",
            };
            smallest_on_path(&top, rel.trim_start_matches('/'), file)
        })
        .min()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// A cgroup hierarchy mount that controls memory.
struct Mount {
    version: Version,
    /// The hierarchy's directory mounted there (`/` unless bind-mounted).
    root: String,
    point: String,
}

fn parse_mount(line: &str) -> Option<Mount> {
    let (head, tail) = line.split_once(" - ")?;
    let head: Vec<&str> = head.split(' ').collect();
    let tail: Vec<&str> = tail.split(' ').collect();
    let version = match *tail.first()? {
        "cgroup2" => Version::V2,
        "cgroup" if tail.get(2)?.split(',').any(|o| o == "memory") => Version::V1,
        _ => return None,
    };
    Some(Mount {
        version,
        root: unescape(head.get(3)?),
        point: unescape(head.get(4)?),
    })
}

/// mountinfo escapes blanks as octal (`\040`).
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\134", "\\")
}

/// This process's cgroup path in the hierarchy of `version`.
fn own_path(cgroup: &str, version: Version) -> Option<&str> {
    cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match version {
            Version::V2 => id == "0" && controllers.is_empty(),
            Version::V1 => controllers.split(',').any(|c| c == "memory"),
        };
        hit.then_some(path)
    })
}

/// The smallest limit in `file` from `top/rel` up to `top`. A missing
/// directory (the process's path seen from another cgroup namespace) is
/// skipped, so `top` itself still counts.
fn smallest_on_path(top: &Path, rel: &str, file: &str) -> Option<u64> {
    let mut dir: PathBuf = top.join(rel);
    let mut best: Option<u64> = None;
    loop {
        if let Some(v) = read_limit(&dir.join(file)) {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
        if dir == top || !dir.pop() || !dir.starts_with(top) {
            break;
        }
    }
    best
}

fn read_limit(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: u64 = text.trim().parse().ok()?;
    (v < UNLIMITED).then_some(v)
}

/// Anonymous memory this process holds (`RssAnon` of `/proc/self/status`):
/// weights and pools already loaded; file pages are reclaimable and do not count.
pub fn resident_anon_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| status_kib(&t, "RssAnon:"))
        .map_or(0, |kib| kib * 1024)
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn v2_takes_the_smallest_limit_up_the_path() {
        let fs = tempfile::tempdir().unwrap();
        let cg = fs.path().join("sys/fs/cgroup");
        write(&cg.join("kubepods/memory.max"), "max\n");
        write(&cg.join("kubepods/pod1/memory.max"), "2147483648\n");
        write(&cg.join("kubepods/pod1/c1/memory.max"), "max\n");
        let mountinfo = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let limit = memory_limit_in("0::/kubepods/pod1/c1\n", mountinfo, fs.path());
        assert_eq!(limit, Some(2 << 30));
        // Unlimited everywhere: no limit.
        assert_eq!(
            memory_limit_in("0::/kubepods\n", mountinfo, fs.path()),
            None
        );
    }

    #[test]
    fn inside_a_cgroup_namespace_the_mount_root_is_the_pods_cgroup() {
        let fs = tempfile::tempdir().unwrap();
        write(&fs.path().join("sys/fs/cgroup/memory.max"), "536870912\n");
        let mountinfo = "30 23 0:26 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        assert_eq!(
            memory_limit_in("0::/\n", mountinfo, fs.path()),
            Some(512 << 20)
        );
    }

    #[test]
    fn v1_and_hybrid_layouts_read_the_memory_controller() {
        let fs = tempfile::tempdir().unwrap();
        let mem = fs.path().join("sys/fs/cgroup/memory");
        write(&mem.join("memory.limit_in_bytes"), "9223372036854771712\n");
        write(&mem.join("job/memory.limit_in_bytes"), "1073741824\n");
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let cgroup = "4:memory:/job\n1:cpu:/\n0::/\n";
        assert_eq!(memory_limit_in(cgroup, mountinfo, fs.path()), Some(1 << 30));
        assert_eq!(
            memory_limit_in("4:memory:/\n0::/\n", mountinfo, fs.path()),
            None
        );
    }

    #[test]
    fn rss_anon_is_read_from_status() {
        let status = "Name:\tx\nRssAnon:\t    2048 kB\nRssFile:\t 10 kB\n";
        assert_eq!(status_kib(status, "RssAnon:"), Some(2048));
        assert!(resident_anon_bytes() > 0);
    }
}
