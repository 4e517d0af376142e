//===- CUDAPrelude.cpp - Device helpers every emitted CUDA module holds ---===//
//
// The text put in front of every emitted CUDA C module: element loads and
// stores (f16/bf16 through cuda_fp16.h/cuda_bf16.h, computing in f32),
// integer arithmetic that wraps and never traps (as ScalarSemantics.cpp),
// NaN-propagating max/min, Python-style floor division and remainder, the
// argmax/argmin "first extreme, NaN wins" rule and a block reduction (warp
// shuffles, then one partial per warp in shared memory).
//
//===----------------------------------------------------------------------===//
#include "CUDACodegen.h"

namespace dynafuse {

const char *cudaPrelude() {
  return R"CUDA(#include <cuda_fp16.h>
#include <cuda_bf16.h>

// error: the kernel's last argument. [0] set to 1 by the first
// out-of-bounds indirect index, [1] the index, [2] the size.
__device__ __forceinline__ void df_report(long long *error, long long index,
                                          long long size) {
  if (atomicCAS((unsigned long long *)&error[0], 0ULL, 1ULL) == 0ULL) {
    error[1] = index;
    error[2] = size;
  }
}

// counterRandom (ScalarSemantics.h): the same numbers as the CPU backends.
__device__ __forceinline__ double df_random(long long key, long long counter) {
  unsigned long long z = (unsigned long long)key ^
      ((unsigned long long)counter * 0x9E3779B97F4A7C15ull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 40) * 5.9604644775390625e-08;
}
__device__ __forceinline__ float df_ld(const float *p) { return *p; }
__device__ __forceinline__ double df_ld(const double *p) { return *p; }
__device__ __forceinline__ int df_ld(const int *p) { return *p; }
__device__ __forceinline__ long long df_ld(const long long *p) { return *p; }
__device__ __forceinline__ bool df_ld(const unsigned char *p) { return *p != 0; }
__device__ __forceinline__ float df_ld(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float df_ld(const __nv_bfloat16 *p) {
  return __bfloat162float(*p);
}
__device__ __forceinline__ void df_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void df_st(double *p, double v) { *p = v; }
__device__ __forceinline__ void df_st(int *p, int v) { *p = v; }
__device__ __forceinline__ void df_st(long long *p, long long v) { *p = v; }
__device__ __forceinline__ void df_st(unsigned char *p, bool v) { *p = v ? 1 : 0; }
__device__ __forceinline__ void df_st(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void df_st(__nv_bfloat16 *p, float v) {
  *p = __float2bfloat16_rn(v);
}

typedef unsigned long long df_u64;
__device__ __forceinline__ long long df_iadd(long long a, long long b) {
  return (long long)((df_u64)a + (df_u64)b);
}
__device__ __forceinline__ long long df_isub(long long a, long long b) {
  return (long long)((df_u64)a - (df_u64)b);
}
__device__ __forceinline__ long long df_imul(long long a, long long b) {
  return (long long)((df_u64)a * (df_u64)b);
}
__device__ __forceinline__ bool df_baddiv(long long a, long long b) {
  return b == 0 || (b == -1 && a == (long long)0x8000000000000000ULL);
}
__device__ __forceinline__ long long df_idiv(long long a, long long b) {
  return df_baddiv(a, b) ? 0 : a / b;
}
__device__ __forceinline__ long long df_ifmod(long long a, long long b) {
  return df_baddiv(a, b) ? 0 : a % b;
}
__device__ __forceinline__ long long df_floordiv(long long a, long long b) {
  if (df_baddiv(a, b))
    return b == 0 ? 0 : a;
  long long q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --q;
  return q;
}
__device__ __forceinline__ long long df_mod(long long a, long long b) {
  if (df_baddiv(a, b))
    return 0;
  return a - df_floordiv(a, b) * b;
}
__device__ __forceinline__ long long df_ipow(long long a, long long b) {
  return (long long)pow((double)a, (double)b);
}
__device__ __forceinline__ long long df_ineg(long long a) {
  return (long long)(0ULL - (df_u64)a);
}
__device__ __forceinline__ long long df_iabs(long long a) {
  return a < 0 ? df_ineg(a) : a;
}

__device__ __forceinline__ float df_max(float a, float b) {
  return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a > b ? a : b);
}
__device__ __forceinline__ float df_min(float a, float b) {
  return (isnan(a) || isnan(b)) ? __int_as_float(0x7fc00000) : (a < b ? a : b);
}
__device__ __forceinline__ double df_max(double a, double b) {
  return (isnan(a) || isnan(b)) ? __longlong_as_double(0x7ff8000000000000LL)
                                : (a > b ? a : b);
}
__device__ __forceinline__ double df_min(double a, double b) {
  return (isnan(a) || isnan(b)) ? __longlong_as_double(0x7ff8000000000000LL)
                                : (a < b ? a : b);
}
template <typename T> __device__ __forceinline__ T df_frem(T a, T b) {
  T r = fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0)))
    r += b;
  return r;
}

// argmax (G) / argmin: whether candidate c replaces best b: strictly
// better, or the first NaN.
template <bool G> __device__ __forceinline__ bool df_better(float c, float b) {
  if (isnan(b))
    return false;
  if (isnan(c))
    return true;
  return G ? c > b : c < b;
}
template <bool G> __device__ __forceinline__ bool df_better(double c, double b) {
  if (isnan(b))
    return false;
  if (isnan(c))
    return true;
  return G ? c > b : c < b;
}
template <bool G> __device__ __forceinline__ bool df_better(long long c, long long b) {
  return G ? c > b : c < b;
}
template <bool G> __device__ __forceinline__ bool df_better(int c, int b) {
  return G ? c > b : c < b;
}

// A partial argmax/argmin: value, position and the iteration order of the
// element it came from (ties between partials go to the earlier one).
template <typename T> struct DfArg {
  T v;
  long long p;
  long long o;
};
template <bool G, typename T>
__device__ __forceinline__ DfArg<T> df_arg_combine(DfArg<T> a, DfArg<T> b) {
  if (df_better<G>(b.v, a.v))
    return b;
  if (df_better<G>(a.v, b.v))
    return a;
  return b.o < a.o ? b : a;
}

template <typename T> __device__ __forceinline__ T df_shfl_down(T v, int o) {
  return __shfl_down_sync(0xffffffffu, v, o);
}
template <typename T>
__device__ __forceinline__ DfArg<T> df_shfl_down(DfArg<T> v, int o) {
  DfArg<T> r;
  r.v = __shfl_down_sync(0xffffffffu, v.v, o);
  r.p = __shfl_down_sync(0xffffffffu, v.p, o);
  r.o = __shfl_down_sync(0xffffffffu, v.o, o);
  return r;
}

// Combines v over the block (blockDim.x a multiple of 32, at most 1024);
// every thread gets the result. All threads of the block must call it.
template <typename T, typename Op>
__device__ T df_block_reduce(T v, T identity, Op op) {
  __shared__ T partial[32];
  __shared__ T result;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, df_shfl_down(v, o));
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int warps = (blockDim.x + 31) >> 5;
    T w = lane < warps ? partial[lane] : identity;
    for (int o = 16; o > 0; o >>= 1)
      w = op(w, df_shfl_down(w, o));
    if (lane == 0)
      result = w;
  }
  __syncthreads();
  T r = result;
  __syncthreads();
  return r;
}
)CUDA";
}

} // namespace dynafuse
