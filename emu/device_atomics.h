// CUDA atomics for emulated kernels, as real atomics on host memory (blocks run in parallel on
// several OS threads). CUDA's atomics are relaxed: so are these. Each returns the old value.
#pragma once

namespace emu {
// Read-modify-write through compare-and-swap, for types without a native fetch-op.
template <typename T, typename Op>
T atomic_update(T* address, Op op) {
    T old;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    T desired = op(old);
    while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
        desired = op(old);
    return old;
}
}  // namespace emu

#define EMU_INTEGER_ATOMICS(T)                                                                   \
    inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }       \
    inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }       \
    inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }       \
    inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }         \
    inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }       \
    inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }     \
    inline T atomicMax(T* a, T v) {                                                              \
        return emu::atomic_update(a, [v](T old) { return old < v ? v : old; });                  \
    }                                                                                            \
    inline T atomicMin(T* a, T v) {                                                              \
        return emu::atomic_update(a, [v](T old) { return v < old ? v : old; });                  \
    }                                                                                            \
    inline T atomicCAS(T* a, T compare, T v) {                                                   \
        __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);  \
        return compare;                                                                          \
    }
EMU_INTEGER_ATOMICS(int)
EMU_INTEGER_ATOMICS(unsigned int)
EMU_INTEGER_ATOMICS(unsigned long long)
EMU_INTEGER_ATOMICS(long long)
#undef EMU_INTEGER_ATOMICS

inline unsigned short atomicCAS(unsigned short* a, unsigned short compare, unsigned short v) {
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;
}
inline float atomicAdd(float* a, float v) {
    return emu::atomic_update(a, [v](float old) { return old + v; });
}
inline double atomicAdd(double* a, double v) {
    return emu::atomic_update(a, [v](double old) { return old + v; });
}
inline float atomicExch(float* a, float v) {
    float old;
    __atomic_exchange(a, &v, &old, __ATOMIC_RELAXED);
    return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* a, __nv_bfloat16 v) {
    return emu::atomic_update(a, [v](__nv_bfloat16 old) {
        return __float2bfloat16(__bfloat162float(old) + __bfloat162float(v));
    });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* a, __nv_bfloat162 v) {
    return emu::atomic_update(a, [v](__nv_bfloat162 old) {
        return __floats2bfloat162_rn(__low2float(old) + __low2float(v),
                                     __high2float(old) + __high2float(v));
    });
}
inline __half atomicAdd(__half* a, __half v) {
    return emu::atomic_update(
        a, [v](__half old) { return __float2half(__half2float(old) + __half2float(v)); });
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
