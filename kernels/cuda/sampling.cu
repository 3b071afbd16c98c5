// Temperature / top-k / top-p sampling of each row with a per-request seed.
// CPU reference: kernels/src/sampling.rs (`sample_row`), whose rules this
// follows step for step:
//   1. scaled = x / T over finite x (+inf is an error, NaN and -inf drop);
//      T < 1e-5 is greedy: the best rank key wins.
//   2. top-k: binary search (32 passes) for the orderable key of the k-th
//      best scaled logit; keep everything at or above it (ties kept).
//   3. top-p: binary search (64 passes) over rank keys for the longest run
//      of worst candidates whose mass is <= (1 - p) * total; never the best.
//   4. draw u = uniform(seed, step); walk survivors in id order (each
//      thread a contiguous chunk, chunk sums scanned) to the first whose
//      cumulative weight exceeds u * total.
// One block per row. Weights are exp(scaled - max) in double.

#include "common.cuh"

namespace tr {

constexpr int kSampleThreads = 512;

// Whether id i survives top-k (orderable >= kth) and top-p (key >= cut);
// `s` gets its scaled logit.
template <typename T>
__device__ __forceinline__ bool survives(const T* x, int i, float t, uint32_t kth, uint64_t cut,
                                         float& s) {
  const float v = load(x, i);
  if (!isfinite(v)) return false;
  s = v / t;
  return orderable(s) >= kth && rank_key(s, (uint32_t)i) >= cut;
}

// out_token[row]: the token, or -1 (+inf logit) / -2 (no finite logit).
template <typename T>
__global__ void sample_kernel(const T* __restrict__ logits, int cols, long ld,
                              const float* __restrict__ temperature,
                              const unsigned* __restrict__ top_k, const float* __restrict__ top_p,
                              const unsigned long long* __restrict__ seed,
                              const unsigned long long* __restrict__ step,
                              int* __restrict__ out_token) {
  __shared__ uint64_t key_scratch[32];
  __shared__ double sum_scratch[32];
  __shared__ unsigned cnt_scratch[32];
  __shared__ double chunk_prefix[kSampleThreads];
  __shared__ unsigned found;
  const long row = blockIdx.x;
  const T* x = logits + row * ld;
  const float t = temperature[row];
  const bool greedy = isnan(t) || t < 1e-5f;

  // 1. +inf check, finite count, best key.
  unsigned inf_hit = 0, finite = 0;
  uint64_t top = 0;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = load(x, i);
    if (v == INFINITY) inf_hit = 1;
    if (isfinite(v)) {
      ++finite;
      const uint64_t key = rank_key(greedy ? v : v / t, (uint32_t)i);
      top = key > top ? key : top;
    }
  }
  inf_hit = block_reduce<unsigned>(inf_hit, SumU(), 0u, cnt_scratch);
  finite = block_reduce<unsigned>(finite, SumU(), 0u, cnt_scratch);
  top = block_reduce<uint64_t>(top, MaxK(), 0, key_scratch);
  if (inf_hit || finite == 0) {
    if (threadIdx.x == 0) out_token[row] = inf_hit ? -1 : -2;
    return;
  }
  if (greedy) {
    if (threadIdx.x == 0) out_token[row] = (int)key_id(top);
    return;
  }

  // 2. top-k threshold on the orderable value.
  const unsigned k = top_k[row];
  uint32_t kth = 0;  // keep orderable(scaled) >= kth
  if (k > 0 && k < finite) {
    for (int bit = 31; bit >= 0; --bit) {
      const uint32_t cand = kth | (1u << bit);
      unsigned c = 0;
      for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = load(x, i);
        if (isfinite(v) && orderable(v / t) >= cand) ++c;
      }
      if (block_reduce<unsigned>(c, SumU(), 0u, cnt_scratch) >= k) kth = cand;
    }
  }
  const double m = (double)key_value(top);

  // 3. top-p cut on the rank key.
  const float p = top_p[row];
  uint64_t cut = 0;  // keep key >= cut
  if (p < 1.f) {
    double total = 0.0;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
      const float v = load(x, i);
      if (isfinite(v) && orderable(v / t) >= kth) total += exp((double)(v / t) - m);
    }
    total = block_reduce<double>(total, SumD(), 0.0, sum_scratch);
    const double drop = (1.0 - (double)p) * total;
    for (int bit = 63; bit >= 0; --bit) {
      const uint64_t cand = cut | (1ull << bit);
      double mass = 0.0;
      for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = load(x, i);
        if (!isfinite(v)) continue;
        const float s = v / t;
        if (orderable(s) >= kth && rank_key(s, (uint32_t)i) < cand) mass += exp((double)s - m);
      }
      if (block_reduce<double>(mass, SumD(), 0.0, sum_scratch) <= drop) cut = cand;
    }
    if (cut > top) cut = top;
  }

  // 4. draw over survivors in id order.
  const int chunk = (cols + blockDim.x - 1) / blockDim.x;
  const int lo = min(cols, (int)threadIdx.x * chunk), hi = min(cols, lo + chunk);
  double local = 0.0;
  int last_kept = -1;
  for (int i = lo; i < hi; ++i) {
    float s;
    if (survives(x, i, t, kth, cut, s)) {
      local += exp((double)s - m);
      last_kept = i;
    }
  }
  chunk_prefix[threadIdx.x] = local;
  if (threadIdx.x == 0) found = 0xffffffffu;
  __syncthreads();
  if (threadIdx.x == 0) {
    double acc = 0.0;
    for (unsigned j = 0; j < blockDim.x; ++j) {
      const double c = chunk_prefix[j];
      chunk_prefix[j] = acc;
      acc += c;
    }
    sum_scratch[0] = acc;
  }
  __syncthreads();
  const double target = uniform(seed[row], step[row]) * sum_scratch[0];
  double cum = chunk_prefix[threadIdx.x];
  if (cum <= target && cum + local > target) {
    for (int i = lo; i < hi; ++i) {
      float s;
      if (survives(x, i, t, kth, cut, s)) {
        cum += exp((double)s - m);
        if (cum > target) { atomicMin(&found, (unsigned)i); break; }
      }
    }
  }
  // Rounding left the target at the very top: the last survivor.
  unsigned last = last_kept >= 0 ? (unsigned)last_kept + 1u : 0u;
  last = (unsigned)block_reduce<uint64_t>(last, MaxK(), 0, key_scratch);
  if (threadIdx.x == 0) out_token[row] = found != 0xffffffffu ? (int)found : (int)last - 1;
}

}  // namespace tr

template <typename T>
static int launch_sample(const void* logits, int rows, int cols, long ld, const float* temperature,
                         const unsigned* top_k, const float* top_p,
                         const unsigned long long* seed, const unsigned long long* step,
                         int* out_token, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld < cols) return (int)cudaErrorInvalidValue;
  if (rows == 0) return 0;
  tr::sample_kernel<T><<<rows, tr::kSampleThreads, 0, stream>>>(
      static_cast<const T*>(logits), cols, ld, temperature, top_k, top_p, seed, step, out_token);
  return (int)cudaGetLastError();
}

// C ABI for Rust (kernels/src/cuda.rs). Device pointers, one entry per row;
// `bf16` selects __nv_bfloat16 logits (else float); returns a cudaError_t.
extern "C" int tr_sample(const void* logits, int bf16, int rows, int cols, long ld,
                         const float* temperature, const unsigned* top_k, const float* top_p,
                         const unsigned long long* seed, const unsigned long long* step,
                         int* out_token, cudaStream_t stream) {
  return bf16 ? launch_sample<__nv_bfloat16>(logits, rows, cols, ld, temperature, top_k, top_p,
                                             seed, step, out_token, stream)
              : launch_sample<float>(logits, rows, cols, ld, temperature, top_k, top_p, seed,
                                     step, out_token, stream);
}
