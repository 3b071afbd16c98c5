// Shared by every build script whose targets link libtorch (`include!`d, so it
// stays one copy). It does what torch-sys leaves to us:
//
// * RUNPATH (not RPATH) to the libtorch that was built against, so the binary
//   runs with no environment set while `LD_LIBRARY_PATH` can still point it at
//   another libtorch 2.11 (a GPU machine's).
// * `libtorch_cuda` linked with `--no-as-needed` when its own dependencies
//   resolve (or when `TOKENROUTER_LINK_CUDA=1` forces it for GPU builds).
//   rustc links with `--as-needed`, and nothing references a symbol of
//   libtorch_cuda directly, so without this CUDA silently disappears.

mod libtorch_link {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Finds libtorch: `LIBTORCH` (set by the Makefile or `.cargo/config.toml`).
    #[allow(dead_code)] // Only some build scripts also compile against its headers.
    pub fn libtorch_dir() -> Option<PathBuf> {
        println!("cargo:rerun-if-env-changed=LIBTORCH");
        println!("cargo:rerun-if-env-changed=TOKENROUTER_LINK_CUDA");
        let dir = PathBuf::from(std::env::var_os("LIBTORCH")?);
        let dir = if dir.is_relative() {
            // cargo's [env] relative paths are already absolute; this covers a
            // hand-set relative LIBTORCH, resolved from the workspace root.
            let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").ok()?);
            manifest.ancestors().map(|a| a.join(&dir)).find(|p| p.exists())?
        } else {
            dir
        };
        dir.canonicalize().ok()
    }

    /// True when every shared library libtorch_cuda needs is found by the loader.
    fn cuda_deps_resolve(lib: &Path) -> bool {
        let so = lib.join("libtorch_cuda.so");
        if !so.exists() {
            return false;
        }
        match Command::new("ldd").arg(&so).env("LD_LIBRARY_PATH", lib).output() {
            Ok(out) => {
                out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("not found")
            }
            Err(_) => false,
        }
    }

    /// Emits the link arguments for this package's binaries and tests.
    pub fn emit() {
        let Some(root) = libtorch_dir() else {
            println!(
                "cargo:warning=LIBTORCH is not set: run `make build` (it installs libtorch 2.11.0)"
            );
            return;
        };
        let lib = root.join("lib");
        println!("cargo:rustc-link-arg=-Wl,--enable-new-dtags");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
        let forced = std::env::var("TOKENROUTER_LINK_CUDA").is_ok_and(|v| v == "1");
        if forced || cuda_deps_resolve(&lib) {
            println!("cargo:rustc-link-search=native={}", lib.display());
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
            println!("cargo:rustc-link-arg=-ltorch_cuda");
            println!("cargo:rustc-link-arg=-Wl,--as-needed");
        }
    }
}
