// tokenrouter CUDA shim: a C ABI over the parts of libtorch's C++ CUDA API
// that tch does not expose: streams from the pool, the thread's current
// stream, CUDA graphs (capture/replay with a shared memory pool) and the
// caching allocator's per-process memory fraction.
//
// Built by subserver/build.rs (feature `cuda`) against the torch wheel's
// headers into a shared library that the binary embeds and dlopens only
// when a model runs on CUDA, after libtorch_cuda is loaded. Every function
// catches C++ exceptions and returns 0 on success, or -1 with the message
// kept for tr_last_error() (per thread).

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include "../shim/guarded.h"

#include <string>

using tr_shim::guarded;
using tr_shim::last_error;

extern "C" {

// Bumped when a signature changes; Rust refuses a shim of another version.
int tr_shim_version() { return 1; }

const char* tr_last_error() { return last_error.c_str(); }

int tr_device_count(int* out) {
  return guarded([&] { *out = (int)c10::cuda::device_count(); });
}

// A stream from libtorch's pool on `device` (owned by the caller).
int tr_stream_new(int device, int high_priority, void** out) {
  return guarded([&] {
    auto s = c10::cuda::getStreamFromPool(high_priority != 0, (c10::DeviceIndex)device);
    *out = new c10::cuda::CUDAStream(s);
  });
}

void tr_stream_free(void* stream) { delete static_cast<c10::cuda::CUDAStream*>(stream); }

// Makes `stream` the current stream of its device for the calling thread:
// every libtorch op this thread issues on that device runs on it.
int tr_stream_make_current(void* stream) {
  return guarded([&] {
    c10::cuda::setCurrentCUDAStream(*static_cast<c10::cuda::CUDAStream*>(stream));
  });
}

// The raw cudaStream_t (for our own kernels).
int tr_stream_raw(void* stream, void** out) {
  return guarded([&] { *out = static_cast<c10::cuda::CUDAStream*>(stream)->stream(); });
}

int tr_stream_synchronize(void* stream) {
  return guarded([&] { static_cast<c10::cuda::CUDAStream*>(stream)->synchronize(); });
}

// A CUDA graph (owned by the caller).
int tr_graph_new(void** out) {
  return guarded([&] { *out = new at::cuda::CUDAGraph(); });
}

void tr_graph_free(void* graph) { delete static_cast<at::cuda::CUDAGraph*>(graph); }

// Starts capturing the calling thread's work on the current stream (which
// must not be the default stream). `pool_from` (nullable) is an already
// captured graph whose memory pool this one shares: graphs of one model are
// replayed one at a time, so they can share. Thread-local capture mode lets
// other models' threads keep allocating while this one captures.
int tr_graph_capture_begin(void* graph, void* pool_from) {
  return guarded([&] {
    at::cuda::MempoolId_t pool = {0, 0};
    if (pool_from != nullptr) pool = static_cast<at::cuda::CUDAGraph*>(pool_from)->pool();
    static_cast<at::cuda::CUDAGraph*>(graph)->capture_begin(pool,
                                                            cudaStreamCaptureModeThreadLocal);
  });
}

int tr_graph_capture_end(void* graph) {
  return guarded([&] { static_cast<at::cuda::CUDAGraph*>(graph)->capture_end(); });
}

// Replays on the current stream.
int tr_graph_replay(void* graph) {
  return guarded([&] { static_cast<at::cuda::CUDAGraph*>(graph)->replay(); });
}

// Caps what the caching allocator may hold on `device` (a process-wide
// setting: the sum of the models' static fractions in this process).
int tr_set_memory_fraction(double fraction, int device) {
  return guarded([&] {
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, (c10::DeviceIndex)device);
  });
}

}  // extern "C"
