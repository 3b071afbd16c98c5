// Shared device helpers of the routing-signal and sampling kernels. Every
// function here has a Rust twin in kernels/src (named in its comment) that
// the CPU references use, so the two sides compute the same integers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace tr {

// Load one logit as f32 (bf16 rows are widened exactly).
__device__ __forceinline__ float load(const float* p, long i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, long i) {
  return __bfloat162float(p[i]);
}

// sampling::orderable: unsigned order of the result is the float order.
__device__ __forceinline__ uint32_t orderable(float x) {
  uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float from_orderable(uint32_t k) {
  uint32_t b = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  return __uint_as_float(b);
}

// sampling::rank_key: larger value first, then lower id. 0 means "none".
__device__ __forceinline__ uint64_t rank_key(float v, uint32_t id) {
  return ((uint64_t)orderable(v) << 32) | (uint64_t)(0xffffffffu - id);
}

__device__ __forceinline__ uint32_t key_id(uint64_t key) {
  return 0xffffffffu - (uint32_t)(key & 0xffffffffu);
}

__device__ __forceinline__ float key_value(uint64_t key) {
  return from_orderable((uint32_t)(key >> 32));
}

// sampling::mix64 (SplitMix64 finalizer) and sampling::uniform.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ __forceinline__ double uniform(uint64_t seed, uint64_t step) {
  uint64_t z = mix64(seed ^ mix64(step + 0x9e3779b97f4a7c15ull));
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

// Block-wide reductions (blockDim.x a multiple of 32, at most 1024). The
// result is returned to every thread. `scratch` holds 32 entries;
// `identity` fills the lanes of warps the block does not have.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity, T* scratch) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read after a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < (blockDim.x >> 5) ? scratch[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_down_sync(0xffffffffu, w, o));
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

struct SumD { __device__ double operator()(double a, double b) const { return a + b; } };
struct SumU { __device__ unsigned operator()(unsigned a, unsigned b) const { return a + b; } };
struct MaxK { __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; } };

}  // namespace tr
