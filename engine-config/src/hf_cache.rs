//! Hugging Face ids resolved from the standard local cache, never downloaded.
//!
//! The official TokenRouter config names models (`Qwen/Qwen3-0.6B`) and
//! routers (`nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt`)
//! by Hub id. We look them up where `huggingface_hub` stores them:
//! `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
//! else `~/.cache/huggingface/hub`; inside it `models--ORG--NAME/snapshots/REV`,
//! with `REV` read from `refs/main` (a lone snapshot is taken when there is no
//! ref). A local path that exists always wins, as in `from_pretrained`.

use std::path::{Path, PathBuf};

/// Environment lookup (the process environment, or a test's map).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Why an id did not resolve: every place looked at, in order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is neither a local path nor in the Hugging Face cache (tried: {}){}",
    tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
    hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default())]
pub struct NotFound {
    /// The value as written.
    pub given: String,
    /// The paths tried.
    pub tried: Vec<PathBuf>,
    /// What else is known (e.g. several snapshots and no `refs/main`).
    pub hint: Option<String>,
}

/// The hub cache directory for this environment.
pub fn hub_dir(env: EnvLookup) -> PathBuf {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set("HF_HUB_CACHE") {
        return dir;
    }
    if let Some(home) = set("HF_HOME") {
        return home.join("hub");
    }
    let cache = set("XDG_CACHE_HOME")
        .or_else(|| set("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("huggingface").join("hub")
}

/// True when `text` has the shape of a Hub id with `extra` more path parts
/// after `ORG/NAME` (0 for a model, >= 1 for a file): relative, no `.`/`..`
/// parts, no empty parts, Hub-legal characters.
fn is_hub_shaped(text: &str, file: bool) -> bool {
    let parts: Vec<&str> = text.split('/').collect();
    let count_ok = if file {
        parts.len() >= 3
    } else {
        parts.len() == 2
    };
    count_ok
        && !text.starts_with('/')
        && parts.iter().all(|p| {
            !p.is_empty()
                && *p != "."
                && *p != ".."
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
        })
}

/// `models--ORG--NAME` of `repo` (`ORG/NAME`).
fn repo_folder(hub: &Path, repo: &str) -> PathBuf {
    hub.join(format!("models--{}", repo.replace('/', "--")))
}

/// The snapshot directory of `repo` in `hub`, recording what it tried.
fn snapshot(hub: &Path, repo: &str, tried: &mut Vec<PathBuf>) -> Result<PathBuf, Option<String>> {
    let folder = repo_folder(hub, repo);
    let refs = folder.join("refs").join("main");
    if let Ok(rev) = std::fs::read_to_string(&refs) {
        let dir = folder.join("snapshots").join(rev.trim());
        tried.push(dir.clone());
        return if dir.is_dir() {
            Ok(dir)
        } else {
            Err(Some(format!(
                "{} names snapshot {} which is missing",
                refs.display(),
                rev.trim()
            )))
        };
    }
    let snapshots = folder.join("snapshots");
    tried.push(snapshots.clone());
    let mut found: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(None),
        n => Err(Some(format!(
            "{} holds {n} snapshots and no refs/main says which",
            snapshots.display()
        ))),
    }
}

/// A model directory: `text` resolved against `base_dir` when that exists,
/// else (when it looks like `ORG/NAME`) the cached snapshot. `Ok(None)`:
/// not Hub-shaped and not present (the caller decides; a later load names it).
pub fn resolve_model_dir(
    text: &str,
    base_dir: &Path,
    env: EnvLookup,
) -> Result<Option<PathBuf>, NotFound> {
    resolve(text, base_dir, env, false)
}

/// A file such as a router checkpoint: `text` against `base_dir` when it
/// exists, else (when it looks like `ORG/REPO/FILE...`) the file inside the
/// cached snapshot of `ORG/REPO`.
pub fn resolve_file(
    text: &str,
    base_dir: &Path,
    env: EnvLookup,
) -> Result<Option<PathBuf>, NotFound> {
    resolve(text, base_dir, env, true)
}

fn resolve(
    text: &str,
    base_dir: &Path,
    env: EnvLookup,
    file: bool,
) -> Result<Option<PathBuf>, NotFound> {
    let local = base_dir.join(text);
    if local.exists() {
        return Ok(Some(local));
    }
    if !is_hub_shaped(text, file) {
        return Ok(None);
    }
    let hub = hub_dir(env);
    let (repo, rest) = match text.match_indices('/').nth(1) {
        Some((i, _)) if file => (&text[..i], Some(&text[i + 1..])),
        _ => (text, None),
    };
    let mut tried = vec![local];
    let not_found = |tried, hint| NotFound {
        given: text.to_string(),
        tried,
        hint,
    };
    let dir = snapshot(&hub, repo, &mut tried).map_err(|hint| not_found(tried.clone(), hint))?;
    let Some(rest) = rest else {
        return Ok(Some(dir));
    };
    let path = dir.join(rest);
    if path.is_file() {
        Ok(Some(path))
    } else {
        tried.push(path);
        Err(not_found(tried, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(hub: &Path) -> impl Fn(&str) -> Option<String> {
        let hub = hub.to_string_lossy().into_owned();
        move |name| (name == "HF_HUB_CACHE").then(|| hub.clone())
    }

    fn snapshot_dir(hub: &Path, repo: &str, rev: &str, with_ref: bool) -> PathBuf {
        let folder = repo_folder(hub, repo);
        let dir = folder.join("snapshots").join(rev);
        std::fs::create_dir_all(&dir).unwrap();
        if with_ref {
            std::fs::create_dir_all(folder.join("refs")).unwrap();
            std::fs::write(folder.join("refs/main"), format!("{rev}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn hub_dir_follows_the_huggingface_hub_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let all = env(&[
            ("HF_HUB_CACHE", "/a"),
            ("HF_HOME", "/b"),
            ("XDG_CACHE_HOME", "/c"),
            ("HOME", "/d"),
        ]);
        assert_eq!(hub_dir(&all), Path::new("/a"));
        let home = env(&[("HF_HOME", "/b"), ("HOME", "/d")]);
        assert_eq!(hub_dir(&home), Path::new("/b/hub"));
        let xdg = env(&[("HF_HUB_CACHE", ""), ("XDG_CACHE_HOME", "/c")]);
        assert_eq!(hub_dir(&xdg), Path::new("/c/huggingface/hub"));
        let plain = env(&[("HOME", "/d")]);
        assert_eq!(hub_dir(&plain), Path::new("/d/.cache/huggingface/hub"));
    }

    #[test]
    fn ids_resolve_through_refs_main() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path().join("hub");
        let env = env_with(&hub);
        let old = snapshot_dir(&hub, "Qwen/Qwen3-0.6B", "aaa", false);
        let new = snapshot_dir(&hub, "Qwen/Qwen3-0.6B", "bbb", true);
        assert_ne!(old, new);
        let base = tmp.path().join("configs");
        assert_eq!(
            resolve_model_dir("Qwen/Qwen3-0.6B", &base, &env).unwrap(),
            Some(new.clone())
        );
        // Without refs/main a lone snapshot is taken; several are ambiguous.
        std::fs::remove_file(repo_folder(&hub, "Qwen/Qwen3-0.6B").join("refs/main")).unwrap();
        let err = resolve_model_dir("Qwen/Qwen3-0.6B", &base, &env).unwrap_err();
        assert!(err.to_string().contains("2 snapshots"), "{err}");
        let lone = snapshot_dir(&hub, "Org/One", "ccc", false);
        assert_eq!(
            resolve_model_dir("Org/One", &base, &env).unwrap(),
            Some(lone)
        );
        // A router file inside a snapshot.
        let routers = snapshot_dir(&hub, "nics-efc/R2R_router_collections", "ddd", true);
        std::fs::create_dir_all(routers.join("Qwen3-0.6B+Qwen3-32B")).unwrap();
        let router = routers.join("Qwen3-0.6B+Qwen3-32B/default_router.pt");
        std::fs::write(&router, b"x").unwrap();
        let id = "nics-efc/R2R_router_collections/Qwen3-0.6B+Qwen3-32B/default_router.pt";
        assert_eq!(resolve_file(id, &base, &env).unwrap(), Some(router));
    }

    #[test]
    fn misses_name_every_path_tried_and_local_paths_win() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = tmp.path().join("hub");
        let env = env_with(&hub);
        let err = resolve_model_dir("Qwen/Qwen3-32B", tmp.path(), &env).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&tmp.path().join("Qwen/Qwen3-32B").display().to_string()));
        assert!(
            msg.contains(
                &hub.join("models--Qwen--Qwen3-32B/snapshots")
                    .display()
                    .to_string()
            ),
            "{msg}"
        );
        let routers = snapshot_dir(&hub, "o/r", "e", true);
        let err = resolve_file("o/r/x/router.pt", tmp.path(), &env).unwrap_err();
        assert!(err.tried.contains(&routers.join("x/router.pt")), "{err:?}");
        // A local directory of the same name wins over the cache.
        let local = tmp.path().join("Qwen/Qwen3-32B");
        std::fs::create_dir_all(&local).unwrap();
        assert_eq!(
            resolve_model_dir("Qwen/Qwen3-32B", tmp.path(), &env).unwrap(),
            Some(local)
        );
        // Not Hub-shaped and absent: left to the caller. Relative to a
        // folder inside the temporary one, so that `../a` is absent too
        // (next to the temporary folder, in /tmp, it may exist).
        let base = tmp.path().join("config");
        std::fs::create_dir_all(&base).unwrap();
        for text in ["models/a/b", "/abs/x", "./a/b", "a", "../a"] {
            assert_eq!(resolve_model_dir(text, &base, &env).unwrap(), None);
        }
        assert_eq!(resolve_file("a/b", tmp.path(), &env).unwrap(), None);
    }
}
