// The emulator's view of CUDA device code: force-included (g++ -include emu/cuda_emu.h, see
// EMU_CXXFLAGS in emu/build.mk) when a .cu file is compiled as host C++, so the same source runs
// on the CPU. It takes the types from CUDA's own headers (cudaError_t, dim3, float4, __nv_bfloat16,
// ...) and defines what nvcc would provide: the qualifiers, threadIdx & co., barriers, warp
// operations, atomics, intrinsics and the launch used by LAUNCH (kernels/launch.h).
#pragma once
#ifdef __CUDACC__
#error "emu/cuda_emu.h is for g++ builds of .cu files; nvcc must not include it"
#endif
#define EMU_CUDA 1

// Qualifiers, defined before CUDA's headers so theirs are not used. A static __shared__ variable
// becomes thread_local: the threads of a block all run on one OS thread (as fibers), and blocks
// running at the same time are on different OS threads, so each running block has its own copy.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__ thread_local __attribute__((tls_model("local-exec")))
#define __launch_bounds__(...)
#define __grid_constant__

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "emu/device_builtins.h"
#include "emu/device_atomics.h"
#include "emu/device_intrinsics.h"
#include "emu/launch.h"
