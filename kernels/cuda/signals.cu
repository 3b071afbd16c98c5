// Routing signals of each row of logits in one pass over the vocabulary:
// max logit, max probability, log-sum-exp, entropy, normalized entropy and
// the top-k (index, logit). CPU twin: kernels/src/signals.rs
// (`routing_signals_one_pass`; reference `routing_signals`).
//
// One block per row. Each thread folds a strided slice into an online state
// (running max m, s = sum e^(x-m), w = sum e^(x-m)(x-m)) and a sorted list
// of its k best rank keys; the block then merges the states and runs k
// rounds of a max-reduction over the threads' list heads.

#include "common.cuh"

namespace tr {

constexpr int kMaxTopK = 32;

struct Online {
  float m, s, w;
  int poisoned;
};

__device__ __forceinline__ void push(Online& st, float x) {
  if (isnan(x)) {
    st.poisoned |= 1;  // signals::NAN_SEEN
  } else if (x == INFINITY) {
    st.poisoned |= 2;  // signals::POS_INF_SEEN
  } else if (x == -INFINITY) {
    // masked: probability 0
  } else if (st.m == -INFINITY) {
    st.m = x; st.s = 1.f; st.w = 0.f;
  } else if (x > st.m) {
    const float d = st.m - x, r = expf(d);
    st.w = r * (st.w + d * st.s);
    st.s = r * st.s + 1.f;
    st.m = x;
  } else {
    const float d = x - st.m, e = expf(d);
    st.s += e;
    st.w += e * d;
  }
}

__device__ __forceinline__ Online merge(Online a, Online b) {
  const int p = a.poisoned | b.poisoned;
  if (b.m == -INFINITY) { a.poisoned = p; return a; }
  if (a.m == -INFINITY) { b.poisoned = p; return b; }
  const float m = fmaxf(a.m, b.m);
  const float da = a.m - m, db = b.m - m, ra = expf(da), rb = expf(db);
  Online o;
  o.m = m;
  o.s = ra * a.s + rb * b.s;
  o.w = ra * (a.w + da * a.s) + rb * (b.w + db * b.s);
  o.poisoned = p;
  return o;
}

// Merges the states of a warp into lane 0.
__device__ Online warp_merge(Online st) {
  for (int o = 16; o > 0; o >>= 1) {
    Online other;
    other.m = __shfl_down_sync(0xffffffffu, st.m, o);
    other.s = __shfl_down_sync(0xffffffffu, st.s, o);
    other.w = __shfl_down_sync(0xffffffffu, st.w, o);
    other.poisoned = __shfl_down_sync(0xffffffffu, st.poisoned, o);
    st = merge(st, other);
  }
  return st;
}

__device__ Online block_merge(Online st, Online* scratch) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  st = warp_merge(st);
  if (lane == 0) scratch[warp] = st;
  __syncthreads();
  if (warp == 0) {
    Online v = {-INFINITY, 0.f, 0.f, 0};
    if (lane < (blockDim.x >> 5)) v = scratch[lane];
    v = warp_merge(v);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// stats: [rows, 5] = max_logit, max_prob, logsumexp, entropy, normalized.
// top_idx / top_val: [rows, k]; slots past the non-NaN count get -1 / NaN.
template <typename T>
__global__ void routing_signals_kernel(const T* __restrict__ logits, int cols, long ld, int k,
                                       float* __restrict__ stats, int* __restrict__ top_idx,
                                       float* __restrict__ top_val) {
  __shared__ Online online_scratch[32];
  __shared__ uint64_t key_scratch[32];
  const long row = blockIdx.x;
  const T* x = logits + row * ld;

  Online st = {-INFINITY, 0.f, 0.f, 0};
  uint64_t best[kMaxTopK];
  int n = 0;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) {
    const float v = load(x, i);
    push(st, v);
    if (isnan(v)) continue;
    const uint64_t key = rank_key(v, (uint32_t)i);
    if (n < k || key > best[n - 1]) {
      int j = n < k ? n++ : n - 1;
      while (j > 0 && best[j - 1] < key) { best[j] = best[j - 1]; --j; }
      best[j] = key;
    }
  }
  st = block_merge(st, online_scratch);

  // k rounds: the best head among all threads wins and its owner advances.
  int head = 0;
  for (int r = 0; r < k; ++r) {
    const uint64_t mine = head < n ? best[head] : 0ull;
    const uint64_t win = block_reduce<uint64_t>(mine, MaxK(), 0, key_scratch);
    if (win != 0ull && mine == win) ++head;
    if (threadIdx.x == 0) {
      top_idx[row * k + r] = win ? (int)key_id(win) : -1;
      top_val[row * k + r] = win ? key_value(win) : NAN;
    }
  }

  if (threadIdx.x == 0) {
    const bool none = st.m == -INFINITY;
    const bool undefined = st.poisoned || none;
    float lse, h;
    if (cols == 0) {
      lse = -INFINITY; h = 0.f;
    } else if (st.poisoned) {
      lse = (st.poisoned & 1) ? NAN : INFINITY; h = NAN;
    } else if (none) {
      lse = -INFINITY; h = NAN;
    } else {
      lse = st.m + logf(st.s);
      h = fmaxf(logf(st.s) - st.w / st.s, 0.f);
    }
    // max_logit ignores NaN, like the top-k; -inf when nothing is left.
    float max_logit = -INFINITY;
    if (k > 0 && top_idx[row * k] >= 0) max_logit = top_val[row * k];
    float* out = stats + row * 5;
    out[0] = max_logit;
    out[1] = undefined ? NAN : 1.f / st.s;
    out[2] = lse;
    out[3] = h;
    out[4] = cols <= 1 ? 0.f : h / logf((float)cols);
  }
}

}  // namespace tr

template <typename T>
static int launch_signals(const void* logits, int rows, int cols, long ld, int k, float* stats,
                          int* top_idx, float* top_val, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || k < 1 || k > tr::kMaxTopK || ld < cols) return (int)cudaErrorInvalidValue;
  if (rows == 0) return 0;
  tr::routing_signals_kernel<T><<<rows, 256, 0, stream>>>(static_cast<const T*>(logits), cols, ld,
                                                          k, stats, top_idx, top_val);
  return (int)cudaGetLastError();
}

// C ABI for Rust (kernels/src/cuda.rs). Device pointers; `bf16` selects
// __nv_bfloat16 logits (else float); returns a cudaError_t.
extern "C" int tr_routing_signals(const void* logits, int bf16, int rows, int cols, long ld,
                                  int k, float* stats, int* top_idx, float* top_val,
                                  cudaStream_t stream) {
  return bf16 ? launch_signals<__nv_bfloat16>(logits, rows, cols, ld, k, stats, top_idx,
                                              top_val, stream)
              : launch_signals<float>(logits, rows, cols, ld, k, stats, top_idx, top_val, stream);
}
