// Device intrinsics as host functions for emulated kernels: cache-hinted loads and stores (plain
// accesses), fast-math functions (their accurate host versions), bit manipulation, reinterpreting
// casts, and the min/max overloads CUDA provides for device code.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Loads and stores with cache hints: the hint only matters to a GPU's caches.
template <typename T> inline T __ldg(const T* p) { return *p; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
template <typename T> inline T __ldca(const T* p) { return *p; }
template <typename T> inline T __ldcs(const T* p) { return *p; }
template <typename T> inline T __ldlu(const T* p) { return *p; }
template <typename T> inline T __ldcv(const T* p) { return *p; }
template <typename T> inline void __stwb(T* p, T v) { *p = v; }
template <typename T> inline void __stcg(T* p, T v) { *p = v; }
template <typename T> inline void __stcs(T* p, T v) { *p = v; }
template <typename T> inline void __stwt(T* p, T v) { *p = v; }

// Fast-math variants: on the host, the accurate function (results may differ in the last bits).
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }

// Reinterpreting casts.
template <typename To, typename From> inline To emu_bit_cast(From v) {
    static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
    To out;
    std::memcpy(&out, &v, sizeof(To));
    return out;
}
inline int __float_as_int(float x) { return emu_bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return emu_bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return emu_bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return emu_bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return emu_bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return emu_bit_cast<double>(x); }

// Bit manipulation.
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }

// CUDA's device code has min/max for every arithmetic pair, with the usual conversions.
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)a < (C)b ? (C)b : (C)a;
}
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)b < (C)a ? (C)b : (C)a;
}
