// The 32-bit shared-memory address that Hopper's asynchronous units take (mbarrier, TMA, wgmma
// descriptors). Under nvcc it is the shared state space address of a generic pointer; under the
// emulator it is the offset into the block's dynamic shared memory, whose base is 1024-byte
// aligned as on a GPU kernel that aligns its buffer, so swizzle patterns computed from address bits
// agree. Only dynamic shared memory (DYNAMIC_SHARED) may be used with these units in emulated code.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernels/common.h"

// HOPPER_DEVICE_CODE: nvcc is compiling device code for sm_90a, where wgmma, TMA and mbarrier
// transaction counts exist. The wrappers compile to a trap in device code for other targets (an
// sm_80 build still builds; the dispatch never calls them there) and to their twins under g++.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define HOPPER_DEVICE_CODE 1
#endif
#ifdef __CUDACC__
__device__ __forceinline__ void hopper_unsupported() { __trap(); }
#endif
// Whether this process can run the Hopper kernels: always under the emulator; on a GPU, an sm_90
// device (and this binary holds sm_90a code, which the launch checks).
inline bool hopper_units_available() {
#ifdef __CUDACC__
    int device = 0, major = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    return major == 9;
#else
    return true;
#endif
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
#ifdef __CUDACC__
    return (uint32_t)__cvta_generic_to_shared(p);
#else
    const char* base = static_cast<const char*>(::emu::t_dynamic_shared);
    const char* q = static_cast<const char*>(p);
    if (q < base || q >= base + ::emu::t_dynamic_shared_bytes) {
        ::emu::kernel_error(
            "%p is not in this block's dynamic shared memory (TMA, mbarrier and wgmma operands "
            "must be)",
            p);
        return 0;
    }
    return (uint32_t)(q - base);
#endif
}

// Round a pointer into dynamic shared memory up to a multiple of `alignment` bytes (a power of 2).
template <typename T>
__device__ __forceinline__ T* align_shared(void* p, uint32_t alignment) {
    const uint32_t a = smem_address(p);
    const uint32_t pad = (alignment - (a & (alignment - 1))) & (alignment - 1);
    return reinterpret_cast<T*>(static_cast<char*>(p) + pad);
}
