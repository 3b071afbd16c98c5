//! libtorch's OpenMP thread pool, lent to the kernels of ours that run on
//! the host. Using the same pool as the ATen ops around them, rather than
//! threads of our own, keeps the process at one busy thread per core: a
//! second pool would compete with OpenMP workers that spin between ops.

use std::ffi::c_void;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use kernels::paged_attention::Parallel;

/// libgomp's entry for `#pragma omp parallel`: runs `f(data)` on a team of
/// `threads` (0: the default), the caller included, and joins it.
type GompParallel = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, u32, u32);

fn gomp_parallel() -> Option<GompParallel> {
    static SYM: OnceLock<Option<GompParallel>> = OnceLock::new();
    *SYM.get_or_init(|| {
        let this = libloading::os::unix::Library::this();
        // SAFETY: libgomp declares `void GOMP_parallel(void (*)(void *),
        // void *, unsigned, unsigned)`, the signature above.
        #[allow(unsafe_code)] // FFI: looking up an OpenMP runtime symbol.
        let sym = unsafe { this.get::<GompParallel>(b"GOMP_parallel\0") };
        sym.ok().map(|s| *s)
    })
}

/// The OpenMP team of libtorch's thread count; this thread alone where the
/// process has no libgomp (a libtorch built with another runtime).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenMp;

struct Call<'a> {
    work: &'a (dyn Fn() + Sync),
    panicked: AtomicBool,
}

extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the `Call` that `run` passed to GOMP_parallel, alive
    // until GOMP_parallel returns, which is after every thread has left here.
    #[allow(unsafe_code)] // FFI: the OpenMP team's argument.
    let call = unsafe { &*(data as *const Call<'_>) };
    // A panic must not unwind into C.
    if std::panic::catch_unwind(AssertUnwindSafe(call.work)).is_err() {
        call.panicked.store(true, Ordering::Relaxed);
    }
}

impl Parallel for OpenMp {
    fn threads(&self) -> usize {
        if gomp_parallel().is_some() {
            tch::get_num_threads().max(1) as usize
        } else {
            1
        }
    }

    fn run(&self, work: &(dyn Fn() + Sync)) -> bool {
        let Some(parallel) = gomp_parallel() else {
            return std::panic::catch_unwind(AssertUnwindSafe(work)).is_ok();
        };
        let call = Call {
            work,
            panicked: AtomicBool::new(false),
        };
        // SAFETY: `trampoline` only reads `call`, which outlives the team.
        #[allow(unsafe_code)] // FFI: GOMP_parallel.
        unsafe {
            parallel(
                trampoline,
                &call as *const Call<'_> as *mut c_void,
                self.threads() as u32,
                0,
            );
        }
        !call.panicked.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn runs_on_libtorchs_team_and_reports_a_panic() {
        tch::set_num_threads(2);
        // Touch libtorch so its OpenMP runtime is loaded.
        let _ = tch::Tensor::ones([4], (tch::Kind::Float, tch::Device::Cpu)).sum(None);
        assert!(
            gomp_parallel().is_some(),
            "libtorch's libgomp is not in the process"
        );
        let calls = AtomicUsize::new(0);
        let threads = Mutex::new(std::collections::HashSet::new());
        let ok = OpenMp.run(&|| {
            calls.fetch_add(1, Ordering::Relaxed);
            threads.lock().unwrap().insert(std::thread::current().id());
        });
        assert!(ok);
        assert_eq!(calls.load(Ordering::Relaxed), OpenMp.threads());
        assert_eq!(threads.lock().unwrap().len(), OpenMp.threads());
        assert!(!OpenMp.run(&|| panic!("a worker fails")));
    }
}
