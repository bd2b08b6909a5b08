// NCCL_CHECK: a failed NCCL call prints where and why and exits with status 2 (a device or network
// failure, which scripts/supervise.sh retries), as CUDA_CHECK does for CUDA calls. NCCL_FLOATX: the
// NCCL type of the trainer's storage precision (floatX, kernels/common.h); nccl_type<T>(): of T.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include <nccl.h>

#include "kernels/common.h"

#ifdef ENABLE_FP32
constexpr ncclDataType_t NCCL_FLOATX = ncclFloat32;
#else
constexpr ncclDataType_t NCCL_FLOATX = ncclBfloat16;
#endif

// The NCCL type of the elements a collective sends: fp32 (float), else the storage precision.
template <typename T>
constexpr ncclDataType_t nccl_type() {
    return std::is_same<T, float>::value ? ncclFloat32 : NCCL_FLOATX;
}

#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)
inline void nccl_check(ncclResult_t result, const char* what, const char* file, int line) {
    if (result == ncclSuccess) return;
    fprintf(stderr, "NCCL error %s at %s:%d: %s\n", ncclGetErrorString(result), file, line, what);
    exit(2);
}
