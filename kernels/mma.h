// Tensor-core matrix multiply-accumulate for one warp: D = A·B + C with A 16×16 bf16, B 16×8 bf16,
// C and D 16×8 fp32 (PTX mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32). Every lane of the
// warp holds a fragment of each matrix, laid out as the PTX ISA's "Matrix Fragments for
// mma.m16n8k16 with floating point type" says; mma_a_element() & co. give that layout. Under nvcc
// it is one instruction; under the emulator its host twin gathers the fragments of the 32 lanes,
// multiplies in fp32 and scatters D back.
#pragma once
#include <cstdint>
#include "kernels/common.h"

// Fragment layout (groupID = lane / 4, t = lane % 4). Elements are numbered as in the PTX ISA: A's
// a0..a7 (two bf16 per 32-bit register, low half first), B's b0..b3, C's and D's c0..c3.
struct MmaIndex {
    int row, col;
};
__host__ __device__ inline MmaIndex mma_a_element(int lane, int i) {
    const int group = lane >> 2, t = lane & 3;
    return {group + ((i & 2) ? 8 : 0), t * 2 + (i & 1) + (i >= 4 ? 8 : 0)};
}
__host__ __device__ inline MmaIndex mma_b_element(int lane, int i) {
    const int group = lane >> 2, t = lane & 3;
    return {t * 2 + (i & 1) + (i >= 2 ? 8 : 0), group};
}
__host__ __device__ inline MmaIndex mma_c_element(int lane, int i) {
    const int group = lane >> 2, t = lane & 3;
    return {group + (i >= 2 ? 8 : 0), t * 2 + (i & 1)};
}

#ifndef __CUDACC__
namespace emu {
struct MmaLane {
    const uint32_t* a;
    const uint32_t* b;
    const float* c;
    float* d;
};
// The host twin, run once the whole warp has arrived.
inline void combine_mma_m16n8k16(void* const lane_data[32], unsigned) {
    float A[16][16], B[16][8], C[16][8];
    auto half = [](uint32_t reg, int which) {
        uint16_t bits = (uint16_t)(reg >> (16 * which));
        __nv_bfloat16 h;
        memcpy((void*)&h, &bits, 2);
        return __bfloat162float(h);
    };
    for (int lane = 0; lane < 32; lane++) {
        const MmaLane& l = *static_cast<const MmaLane*>(lane_data[lane]);
        for (int i = 0; i < 8; i++) {
            MmaIndex e = mma_a_element(lane, i);
            A[e.row][e.col] = half(l.a[i / 2], i % 2);
        }
        for (int i = 0; i < 4; i++) {
            MmaIndex e = mma_b_element(lane, i);
            B[e.row][e.col] = half(l.b[i / 2], i % 2);
            MmaIndex f = mma_c_element(lane, i);
            C[f.row][f.col] = l.c[i];
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        const MmaLane& l = *static_cast<const MmaLane*>(lane_data[lane]);
        for (int i = 0; i < 4; i++) {
            MmaIndex e = mma_c_element(lane, i);
            float sum = C[e.row][e.col];
            for (int k = 0; k < 16; k++) sum += A[e.row][k] * B[k][e.col];
            l.d[i] = sum;
        }
    }
}
}  // namespace emu
#endif

// d[4] = A·B + c[4]; a[4] and b[2] hold pairs of bf16. All 32 lanes of the warp must call it.
// d may be the same array as c.
__device__ __forceinline__ void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                  const float c[4]) {
#ifdef __CUDACC__
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
          "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#else
    emu::MmaLane lane{a, b, c, d};
    emu::warp_collective(&emu::combine_mma_m16n8k16, 0xffffffffu, &lane);
#endif
}
