// Warp-wide loads of 8×8 matrices of 16-bit elements from shared memory into mma fragments
// (PTX ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16), and the XOR swizzle that lets
// them read a row-major tile without shared-memory bank conflicts.
//
// ldmatrix, as the PTX ISA describes it: the warp loads `count` (1, 2 or 4) matrices of 8 rows ×
// 8 b16 elements. Each row is 16 contiguous bytes of shared memory (16-byte aligned); rows may lie
// anywhere. Lane 8·m + r gives the address of row r of matrix m (lanes 0-7 for .x1, 0-15 for .x2,
// all 32 for .x4; the other lanes' addresses are ignored). Every lane receives one 32-bit register
// per matrix: lane l holds row l/4, elements 2·(l%4) and 2·(l%4)+1 (low half first) — exactly an
// mma A/B fragment row. With .trans the matrix is transposed on the way: lane l holds column l/4,
// rows 2·(l%4) and 2·(l%4)+1. ldmatrix_element() gives this layout.
//
// Under nvcc each wrapper is one instruction. Under the emulator its host twin gathers the 32 lanes'
// row addresses once the whole warp has arrived (a warp collective, like kernels/mma.h), checks the
// alignment, reads the rows and hands each lane its registers.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/common.h"

// Element (row, col) of matrix-local coordinates held by `lane` in half `which` (0: low 16 bits,
// 1: high) of its register, without and with .trans.
struct LdmatrixIndex {
    int row, col;
};
__host__ __device__ inline LdmatrixIndex ldmatrix_element(int lane, int which, bool trans) {
    const int group = lane >> 2, pair = lane & 3;
    if (!trans) return {group, 2 * pair + which};
    return {2 * pair + which, group};
}

// ---- XOR swizzle of a row-major shared-memory tile whose rows are kChunks 16-byte chunks
// (kChunks = 4, 8 or 16: 32, 64 or 128 bf16 per row). Chunk c of row r is stored at chunk
// swizzle_chunk(r, c) of that row. The 8 rows read by one ldmatrix matrix (8 consecutive rows at
// the same logical chunk) then fall on 8 different 16-byte bank groups of the 128-byte bank
// window, so the load needs one shared-memory wavefront instead of up to 8. It is a permutation
// of each row's chunks, so 16-byte accesses along a row (cp.async, store128) stay whole.
template <int kChunks>
__host__ __device__ constexpr int swizzle_chunk(int row, int chunk) {
    static_assert(kChunks == 4 || kChunks == 8 || kChunks == 16, "rows of 4, 8 or 16 chunks");
    // 4 chunks per row: two rows share a 128-byte window, so rows 2i and 2i+1 are told apart by
    // the window half and the XOR uses row/2; with 8 or more, each row spans whole windows.
    return kChunks == 4 ? chunk ^ ((row >> 1) & 3) : chunk ^ (row & 7);
}

#ifndef __CUDACC__
namespace emu {
struct LdmatrixLane {
    const void* row_address;
    uint32_t* out;
    int count;
    bool trans;
};
// The host twin, run once the whole warp has arrived.
inline void combine_ldmatrix(void* const lane_data[32], unsigned group) {
    const LdmatrixLane& first = *static_cast<const LdmatrixLane*>(lane_data[0]);
    if (group != 0xffffffffu) {
        fprintf(stderr, "emu: ldmatrix needs all 32 lanes of the warp (mask 0x%08x)\n", group);
        abort();
    }
    uint16_t m[4][8][8];  // [matrix][row][col]
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixLane& l = *static_cast<const LdmatrixLane*>(lane_data[lane]);
        if (l.count != first.count || l.trans != first.trans) {
            fprintf(stderr, "emu: lanes of one warp call different ldmatrix variants\n");
            abort();
        }
        if (lane >= 8 * first.count) continue;  // this lane's address is not used
        if ((uintptr_t)l.row_address % 16 != 0) {
            fprintf(stderr, "emu: ldmatrix row address %p of lane %d is not 16-byte aligned\n", l.row_address,
                    lane);
            abort();
        }
        memcpy(m[lane / 8][lane % 8], l.row_address, 16);
    }
    for (int lane = 0; lane < 32; lane++) {
        const LdmatrixLane& l = *static_cast<const LdmatrixLane*>(lane_data[lane]);
        for (int matrix = 0; matrix < first.count; matrix++) {
            const LdmatrixIndex lo = ldmatrix_element(lane, 0, first.trans);
            const LdmatrixIndex hi = ldmatrix_element(lane, 1, first.trans);
            l.out[matrix] = (uint32_t)m[matrix][lo.row][lo.col] | (uint32_t)m[matrix][hi.row][hi.col] << 16;
        }
    }
}
inline void ldmatrix(uint32_t* out, const void* row_address, int count, bool trans) {
    LdmatrixLane lane{row_address, out, count, trans};
    warp_collective(&combine_ldmatrix, 0xffffffffu, &lane);
}
}  // namespace emu
#endif

#ifdef __CUDACC__
// The 32-bit shared-state-space address PTX wants from a generic pointer into shared memory.
__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

// All 32 lanes must call each wrapper; row_address is this lane's row (see the top of the file).
__device__ __forceinline__ void ldmatrix_x1(uint32_t r[1], const void* row_address) {
#ifdef __CUDACC__
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(shared_address(row_address)));
#else
    emu::ldmatrix(r, row_address, 1, false);
#endif
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* row_address) {
#ifdef __CUDACC__
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_address(row_address)));
#else
    emu::ldmatrix(r, row_address, 2, false);
#endif
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* row_address) {
#ifdef __CUDACC__
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row_address)));
#else
    emu::ldmatrix(r, row_address, 4, false);
#endif
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t r[1], const void* row_address) {
#ifdef __CUDACC__
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(shared_address(row_address)));
#else
    emu::ldmatrix(r, row_address, 1, true);
#endif
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t r[2], const void* row_address) {
#ifdef __CUDACC__
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(shared_address(row_address)));
#else
    emu::ldmatrix(r, row_address, 2, true);
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* row_address) {
#ifdef __CUDACC__
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row_address)));
#else
    emu::ldmatrix(r, row_address, 4, true);
#endif
}
