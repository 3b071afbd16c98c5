//! Making a device usable at run time: CUDA loading and memory queries.
//! (Parsing device and dtype names lives in `config::placement`.)

use std::sync::OnceLock;

use tch::Device;

use crate::error::EngineError;

/// Makes sure a requested device can be used. For CUDA this loads
/// `libtorch_cuda.so` with `RTLD_GLOBAL` when the binary was linked without it
/// (CPU build machines), so one binary serves both CPU and GPU hosts.
pub fn ensure_device(device: Device) -> Result<(), EngineError> {
    let Device::Cuda(index) = device else {
        return Ok(());
    };
    if !tch::Cuda::is_available() {
        load_torch_cuda()?;
    }
    let count = tch::Cuda::device_count();
    if count <= 0 {
        return Err(EngineError::InvalidDevice(
            "CUDA requested but no CUDA device is visible (is this libtorch built with CUDA, \
             and is a GPU present?)"
                .into(),
        ));
    }
    if index as i64 >= count {
        return Err(EngineError::InvalidDevice(format!(
            "cuda:{index} requested but only {count} CUDA device(s) are visible"
        )));
    }
    Ok(())
}

fn load_torch_cuda() -> Result<(), EngineError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // SAFETY: loading libtorch_cuda only runs its static initialisers,
            // which register the CUDA backend with the already-loaded libtorch.
            #[allow(unsafe_code)] // FFI: dlopen of libtorch_cuda.
            let lib = unsafe {
                libloading::os::unix::Library::open(
                    Some("libtorch_cuda.so"),
                    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                )
            };
            match lib {
                Ok(lib) => {
                    // Keep it loaded for the life of the process.
                    std::mem::forget(lib);
                    Ok(())
                }
                Err(e) => Err(format!("cannot load libtorch_cuda.so: {e}")),
            }
        })
        .clone()
        .map_err(EngineError::InvalidDevice)
}

/// Free and total bytes of CUDA device `index`, from the CUDA runtime that
/// libtorch ships (`cudaMemGetInfo`).
pub fn cuda_mem_info(index: usize) -> Result<(u64, u64), EngineError> {
    type SetDevice = unsafe extern "C" fn(i32) -> i32;
    type MemGetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    ensure_device(Device::Cuda(index))?;
    let names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"];
    // SAFETY: loading the CUDA runtime has no side effects beyond its initialisers.
    #[allow(unsafe_code)] // FFI: dlopen of the CUDA runtime.
    let lib = names
        .iter()
        .find_map(|n| unsafe { libloading::Library::new(n) }.ok())
        .ok_or_else(|| {
            EngineError::InvalidDevice(
                "cannot load libcudart to size the KV cache; give a token budget instead".into(),
            )
        })?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both symbols have these C signatures in every CUDA runtime.
    #[allow(unsafe_code)] // FFI: cudaSetDevice / cudaMemGetInfo.
    let rc = unsafe {
        let set: libloading::Symbol<SetDevice> = lib
            .get(b"cudaSetDevice\0")
            .map_err(|e| EngineError::InvalidDevice(format!("cudaSetDevice: {e}")))?;
        let info: libloading::Symbol<MemGetInfo> = lib
            .get(b"cudaMemGetInfo\0")
            .map_err(|e| EngineError::InvalidDevice(format!("cudaMemGetInfo: {e}")))?;
        let rc = set(index as i32);
        if rc != 0 {
            rc
        } else {
            info(&mut free, &mut total)
        }
    };
    if rc != 0 {
        return Err(EngineError::InvalidDevice(format!(
            "cudaMemGetInfo failed with error {rc}"
        )));
    }
    Ok((free as u64, total as u64))
}

/// Sets libtorch's intra-op CPU threads (for the calling thread's steps).
pub fn set_cpu_threads(n: i32) {
    tch::set_num_threads(n.max(1));
}

/// Ends the OpenMP worker threads the calling thread started (libgomp's
/// `omp_pause_resource_all`; nothing where the symbol is missing).
///
/// Every thread that runs a multi-threaded libtorch op keeps its own pool
/// of workers. Once libgomp manages more threads than there are cores, it
/// stops spinning at each op's barrier and puts the workers to sleep
/// instead: a futex wake per op, about a thousand per token, which made a
/// one-model server as slow with two threads as with one (9.7 against
/// 17.4 tok/s for `generate` on the same 2-core machine). So the thread
/// that loads the models gives its workers back before the scheduler
/// threads step, and a model of a group gives them back before it sleeps or
/// steps on one thread (see `scheduler::cpu_share`).
pub fn release_cpu_workers() {
    type Pause = unsafe extern "C" fn(i32) -> i32;
    const OMP_PAUSE_SOFT: i32 = 1;
    static PAUSE: OnceLock<Option<Pause>> = OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        let this = libloading::os::unix::Library::this();
        // SAFETY: OpenMP 5.0 declares `int omp_pause_resource_all(omp_pause_resource_t)`.
        #[allow(unsafe_code)] // FFI: looking up an OpenMP runtime symbol.
        let sym = unsafe { this.get::<Pause>(b"omp_pause_resource_all\0") };
        sym.ok().map(|s| *s)
    });
    if let Some(pause) = pause {
        // SAFETY: called outside any parallel region; it only ends this
        // thread's idle pool, which the next parallel op starts again.
        #[allow(unsafe_code)] // FFI: omp_pause_resource_all.
        unsafe {
            pause(OMP_PAUSE_SOFT);
        }
    }
}
