//! With the `cuda` feature: compiles `cuda/*.cu` with nvcc into a static
//! library and links the CUDA runtime the torch wheel also uses
//! (`libcudart.so.13`). Without it: nothing (the CPU path needs no toolkit).
//!
//! Inputs: `NVCC` (default: `nvcc` on PATH), `TOKENROUTER_CUDA_ARCHS`
//! (comma-separated SM numbers, default `90` for H100/H200, PTX of the last
//! one is embedded for newer GPUs), `CUDA_LIB_DIR` (default: the `lib`
//! beside nvcc's `bin`, the layout of the PyPI wheels).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        // Editing a .cu file must not rebuild the CPU crate.
        println!("cargo:rerun-if-changed=build.rs");
        return;
    }
    println!("cargo:rerun-if-changed=cuda");
    for var in ["NVCC", "TOKENROUTER_CUDA_ARCHS", "CUDA_LIB_DIR"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if let Err(e) = build_cuda() {
        panic!("kernels: the `cuda` feature could not be built: {e}");
    }
}

fn find_nvcc() -> Result<PathBuf, String> {
    if let Some(p) = env::var_os("NVCC") {
        return Ok(PathBuf::from(p));
    }
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .map(|d| d.join("nvcc"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            "nvcc not found: run `make nvcc` (PyPI nvidia-cuda-nvcc) and set NVCC, or put nvcc on PATH"
                .into()
        })
}

fn build_cuda() -> Result<(), String> {
    let nvcc = find_nvcc()?;
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let archs = env::var("TOKENROUTER_CUDA_ARCHS").unwrap_or_else(|_| "90".into());
    let archs: Vec<&str> = archs
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    let mut gencode = Vec::new();
    for a in &archs {
        gencode.push(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    if let Some(last) = archs.last() {
        gencode.push(format!("-gencode=arch=compute_{last},code=compute_{last}"));
    }
    let src = Path::new("cuda");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    let mut objects = Vec::new();
    for cu in &sources {
        let obj = out
            .join(cu.file_stem().unwrap_or_default())
            .with_extension("o");
        let status = Command::new(&nvcc)
            .args(["-c", "-O3", "-std=c++17", "-Xcompiler", "-fPIC"])
            .args(&gencode)
            .arg(cu)
            .arg("-o")
            .arg(&obj)
            .status()
            .map_err(|e| format!("{}: {e}", nvcc.display()))?;
        if !status.success() {
            return Err(format!("nvcc failed on {}", cu.display()));
        }
        objects.push(obj);
    }
    let lib = out.join("libtrkernels.a");
    let _ = std::fs::remove_file(&lib);
    let status = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .args(&objects)
        .status()
        .map_err(|e| format!("ar: {e}"))?;
    if !status.success() {
        return Err("ar failed".into());
    }
    let cudart_dir = match env::var_os("CUDA_LIB_DIR") {
        Some(d) => PathBuf::from(d),
        None => nvcc
            .canonicalize()
            .ok()
            .and_then(|p| p.parent()?.parent().map(|root| root.join("lib")))
            .ok_or("cannot derive the CUDA lib dir from nvcc; set CUDA_LIB_DIR")?,
    };
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=trkernels");
    println!("cargo:rustc-link-search=native={}", cudart_dir.display());
    println!("cargo:rustc-link-lib=dylib:+verbatim=libcudart.so.13");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    Ok(())
}
