//! Output directories that appear whole or not at all.
//!
//! A writer fills a hidden sibling (`.NAME.partial-PID`) and [`StagedDir::commit`]
//! renames it into place; dropped uncommitted (an error, a panic) the
//! sibling is removed. An interrupted run (killed) leaves only the hidden
//! sibling, never a half-written `NAME`, so the rerun is not refused.

use std::path::{Path, PathBuf};

use super::AssetError;

/// A directory being written under a temporary name.
#[derive(Debug)]
pub struct StagedDir {
    staging: PathBuf,
    out: PathBuf,
    committed: bool,
}

impl StagedDir {
    /// Refuses a non-empty `out` (stale files would mix with the new ones)
    /// and creates the staging directory beside it.
    pub fn create(out: &Path) -> Result<Self, AssetError> {
        if out.exists() {
            let mut entries = std::fs::read_dir(out).map_err(|e| AssetError::io(out, e))?;
            if entries.next().is_some() {
                return Err(AssetError::OutputNotEmpty {
                    path: out.to_path_buf(),
                });
            }
        }
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| AssetError::io(&parent, e))?;
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let staging = parent.join(format!(".{name}.partial-{}", std::process::id()));
        if staging.exists() {
            // Left by a killed run that had our process id.
            std::fs::remove_dir_all(&staging).map_err(|e| AssetError::io(&staging, e))?;
        }
        std::fs::create_dir(&staging).map_err(|e| AssetError::io(&staging, e))?;
        Ok(Self {
            staging,
            out: out.to_path_buf(),
            committed: false,
        })
    }

    /// Where to write.
    pub fn path(&self) -> &Path {
        &self.staging
    }

    /// Moves the finished directory into place; `files` written under
    /// [`Self::path`] are returned at their final paths.
    pub fn commit(mut self, files: Vec<PathBuf>) -> Result<Vec<PathBuf>, AssetError> {
        if self.out.exists() {
            // Checked empty at `create`; a file that appeared since refuses this.
            std::fs::remove_dir(&self.out).map_err(|e| AssetError::io(&self.out, e))?;
        }
        std::fs::rename(&self.staging, &self.out).map_err(|e| AssetError::io(&self.out, e))?;
        self.committed = true;
        Ok(files
            .into_iter()
            .map(|f| match f.strip_prefix(&self.staging) {
                Ok(rel) => self.out.join(rel),
                Err(_) => f,
            })
            .collect())
    }
}

impl Drop for StagedDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_moves_and_drop_cleans() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("model");
        let staged = StagedDir::create(&out).unwrap();
        std::fs::write(staged.path().join("a"), "x").unwrap();
        assert!(!out.exists(), "nothing at the final path before commit");
        let files = staged
            .commit(vec![tmp.path().join(".model.partial-0/a")])
            .unwrap();
        assert_eq!(std::fs::read_to_string(out.join("a")).unwrap(), "x");
        assert_eq!(files.len(), 1);

        // A failed write: nothing left, and the rerun may use the name.
        let out2 = tmp.path().join("other");
        {
            let staged = StagedDir::create(&out2).unwrap();
            std::fs::write(staged.path().join("half"), "y").unwrap();
        }
        assert!(!out2.exists());
        assert_eq!(
            std::fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "only `model` remains"
        );
        // An existing empty directory is replaced; a non-empty one refused.
        std::fs::create_dir(&out2).unwrap();
        let staged = StagedDir::create(&out2).unwrap();
        std::fs::write(staged.path().join("b"), "z").unwrap();
        staged.commit(vec![]).unwrap();
        let err = StagedDir::create(&out2).unwrap_err();
        assert!(matches!(err, AssetError::OutputNotEmpty { .. }), "{err}");
    }
}
