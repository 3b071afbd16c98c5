//! Build script: links libtorch (RUNPATH set to the configured libtorch).

include!("libtorch_link.rs");

use std::path::PathBuf;
use std::process::Command;

fn main() {
    libtorch_link::emit();
    println!("cargo:rerun-if-changed=cpu/onednn.cpp");
    println!("cargo:rerun-if-changed=shim/guarded.h");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    if let Err(e) = build_onednn_shim() {
        panic!("subserver: the CPU shim (cpu/onednn.cpp) could not be built: {e}");
    }
    println!("cargo:rerun-if-changed=cuda/shim.cpp");
    println!("cargo:rerun-if-env-changed=CXX");
    println!("cargo:rerun-if-env-changed=CUDA_INCLUDE_DIR");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        if let Err(e) = build_shim() {
            panic!("subserver: the `cuda` feature could not build the CUDA shim: {e}");
        }
    }
}

/// Compiles `cpu/onednn.cpp` (oneDNN's packed-weight linear through
/// libtorch's dispatcher) against the torch wheel's headers into a static
/// library linked into this crate; it needs only libtorch_cpu, which tch
/// links anyway. The C++ ABI flag is torch-sys's (`LIBTORCH_CXX11_ABI`,
/// default 1, as the 2.11 wheels are built).
fn build_onednn_shim() -> Result<(), String> {
    let torch = libtorch_link::libtorch_dir()
        .ok_or("LIBTORCH must point at the torch wheel (run `make venv`)")?;
    let abi = std::env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".into());
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .define("_GLIBCXX_USE_CXX11_ABI", abi.as_str())
        .include(torch.join("include"))
        .file("cpu/onednn.cpp")
        .try_compile("tronednn")
        .map_err(|e| e.to_string())
}

/// Compiles `cuda/shim.cpp` against the torch wheel's headers into
/// `$OUT_DIR/libtrshim.so`, which `cuda::shim` embeds and loads at run time
/// (after libtorch_cuda), so a CPU host never needs CUDA libraries.
/// CUDA headers: `CUDA_INCLUDE_DIR`, else the `include` beside `NVCC`'s
/// `bin` (the PyPI nvcc wheels, which carry `crt/`), then the torch wheel's
/// `nvidia/cu13/include`.
fn build_shim() -> Result<(), String> {
    println!("cargo:rerun-if-env-changed=NVCC");
    let torch = std::env::var_os("LIBTORCH")
        .map(PathBuf::from)
        .and_then(|p| p.canonicalize().ok())
        .ok_or("LIBTORCH must point at the torch wheel (run `make venv`)")?;
    let mut includes: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("CUDA_INCLUDE_DIR") {
        includes.push(PathBuf::from(d));
    } else {
        if let Some(nvcc) =
            std::env::var_os("NVCC").and_then(|p| PathBuf::from(p).canonicalize().ok())
        {
            if let Some(root) = nvcc.parent().and_then(|bin| bin.parent()) {
                includes.push(root.join("include"));
            }
        }
        if let Some(site) = torch.parent() {
            includes.push(site.join("nvidia/cu13/include"));
        }
    }
    if !includes
        .iter()
        .any(|d| d.join("crt/host_config.h").exists())
    {
        return Err(format!(
            "no CUDA headers with crt/host_config.h in {includes:?}: run `make nvcc` and set NVCC, \
             or set CUDA_INCLUDE_DIR"
        ));
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-Wall"])
        .arg(format!("-I{}", torch.join("include").display()))
        .args(includes.iter().map(|d| format!("-I{}", d.display())))
        .arg("cuda/shim.cpp")
        .arg(format!("-L{}", torch.join("lib").display()))
        .args([
            "-Wl,--no-as-needed",
            "-lc10_cuda",
            "-ltorch_cuda",
            "-lc10",
            "-Wl,--as-needed",
        ])
        .arg("-o")
        .arg(out.join("libtrshim.so"))
        .status()
        .map_err(|e| format!("{cxx}: {e}"))?;
    if !status.success() {
        return Err(format!("{cxx} failed on cuda/shim.cpp"));
    }
    Ok(())
}
