// Helpers shared by the kernels, the same text under nvcc and under the emulator (emu/): error
// checks, dynamic shared memory, 128-bit vectorised loads/stores, float/bf16/half conversions, and
// warp and block reductions.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/launch.h"

// ---- errors: a failed CUDA call prints where and why, then exits with status 2 (status 1 means a
// refused input, which scripts/supervise.sh does not retry; a device failure it does).
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)
inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err == cudaSuccess) return;
    fprintf(stderr, "CUDA error %s (%s) at %s:%d: %s\n", cudaGetErrorName(err),
            cudaGetErrorString(err), file, line, what);
    exit(2);
}

// ---- dynamic shared memory: DYNAMIC_SHARED(float, buf); declares `buf` pointing at the block's
// dynamic shared memory (the launch's shared_bytes). The emulator cannot provide
// `extern __shared__ float buf[];`, so write this instead.
#ifdef __CUDACC__
#define DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) unsigned char name##_bytes_[]; \
    T* name = reinterpret_cast<T*>(name##_bytes_)
#else
#define DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::emu::t_dynamic_shared)
#endif

inline __host__ __device__ constexpr int ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// ---- conversions between float and the storage types
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// ---- 128-bit vectors: Packed128<T> holds 16 bytes of T (4 floats, 8 bf16), loaded and stored in
// one instruction on a GPU. Addresses must be 16-byte aligned.
template <typename T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];
    __device__ __forceinline__ T& operator[](int i) { return payload[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return payload[i]; }
};
template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T* address) {
    Packed128<T> v;
#ifdef __CUDACC__
    *reinterpret_cast<int4*>(&v) = *reinterpret_cast<const int4*>(address);
#else
    memcpy((void*)&v, address, sizeof v);  // one 16-byte move, within C++'s aliasing rules
#endif
    return v;
}
// Streaming variant: the data is read once, do not keep it in cache.
template <typename T>
__device__ __forceinline__ Packed128<T> load128cs(const T* address) {
#ifdef __CUDACC__
    Packed128<T> v;
    *reinterpret_cast<int4*>(&v) = __ldcs(reinterpret_cast<const int4*>(address));
    return v;
#else
    return load128(address);
#endif
}
template <typename T>
__device__ __forceinline__ void store128(T* address, const Packed128<T>& v) {
#ifdef __CUDACC__
    *reinterpret_cast<int4*>(address) = *reinterpret_cast<const int4*>(&v);
#else
    memcpy((void*)address, &v, sizeof v);
#endif
}

// ---- reductions. Warp versions need all 32 lanes; block versions a 1-D block whose size is a
// multiple of 32, and every thread gets the result.
__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
template <float (*warp_reduce)(float)>
__device__ __forceinline__ float block_reduce(float v, float identity) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_reduce(v);
    __syncthreads();  // a previous call may still be reading `partial`
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    return warp_reduce(lane < warps ? partial[lane] : identity);
}
__device__ __forceinline__ float block_reduce_sum(float v) { return block_reduce<warp_reduce_sum>(v, 0.0f); }
__device__ __forceinline__ float block_reduce_max(float v) { return block_reduce<warp_reduce_max>(v, -INFINITY); }

// ---- precision, chosen at build time: bf16 storage by default (fp32 accumulation always);
// -DENABLE_FP32 builds every kernel and the trainer with fp32 storage, for tight checks.
#ifdef ENABLE_FP32
typedef float floatX;
#define PRECISION_NAME "fp32"
#else
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "bf16"
#endif
