// Warpgroup matrix multiply-accumulate from shared memory (PTX wgmma.mma_async, sm_90a): the four
// warps of a warpgroup (128 consecutive threads whose first thread index is a multiple of 128) compute
// D (64×N fp32) = A (64×16 bf16) · B (16×N bf16) + D in one asynchronous operation. B is always read
// from shared memory through a matrix descriptor; A from shared memory too, or from registers.
// Per operation: reads 32·N bytes of B (and 2 KiB of A) from shared memory, 2·64·N·16 FLOPs.
//
// The PTX ISA's rules, which the wrappers follow and the emulated twin checks or models:
//   - Register fragments (section "Register Fragments and Shared Memory Matrix Layouts" for
//     m64nNk16): thread i of the warpgroup, warp w = i/32 % 4, lane l, groupID g = l/4, t = l%4:
//       D (f32, N/2 registers d[0..N/2)): d[r] holds row 16w + g + 8·((r>>1)&1), column 8·(r>>2) + 2t + (r&1)
//       A (bf16 pairs, 4 registers a[0..3]): element j (low half first) of a[j/2] holds row 16w + g +
//         8·((j>>1)&1), column 2t + (j&1) + 8·(j>>2) — warp w's rows laid out as mma.m16n8k16's A.
//     So warp w computes rows 16w..16w+15 of D: the twin computes each warp's share on its own.
//   - Matrix descriptors (64 bits): bits 0-13 start address >> 4, 16-29 leading dimension byte
//     offset (LBO) >> 4, 32-45 stride dimension byte offset (SBO) >> 4, 49-51 base offset (0 here),
//     62-63 swizzle mode (0 none, 1 128B, 2 64B, 3 32B). The canonical layouts, in 16-byte units T
//     (8 bf16), for an operand of MN rows (64 for A, N for B) and 16 columns of K:
//       K-major (trans 0), no swizzle: element (mn, k) at (mn%8)·16 + (mn/8)·SBO + (k/8)·LBO + (k%8)·2
//         (8×16-byte core matrices, each 128 contiguous bytes);
//       K-major, swizzle S (32/64/128 bytes): (mn%8)·S + (mn/8)·SBO + (k/8)·16 + (k%8)·2 (LBO unused);
//       MN-major (trans 1), no swizzle: mn = 8m + e, k = 8q + r: e·2 + m·SBO + r·16 + q·LBO;
//       MN-major, swizzle S: mn = (S/2)·m + 8c + e, k = 8q + r: e·2 + c·16 + m·LBO + r·S + q·SBO.
//     The swizzle then permutes the address: its 16-byte granule bits 4..6 are XORed with bits 7..9
//     (masked to 1, 2, 3 bits for 32B, 64B, 128B) — the same function TMA uses when it writes a tile
//     (kernels/tma.h), so a 1024-byte aligned tile loaded by TMA with 128B swizzle is read back in
//     logical order. Moving along K within a swizzled row is a start-address advance (32 bytes per
//     k16 step for K-major).
//   - trans 1 (MN-major) is allowed for bf16 only, which is all we use.
//   - Ordering: wgmma.fence before the first wgmma.mma_async and whenever the warpgroup's threads
//     touched the accumulator or A registers since; wgmma.commit_group closes the mma_asyncs issued
//     since the last commit into a group; wgmma.wait_group N waits until at most N groups are
//     pending. Until then the accumulators may not be read or written, nor the shared-memory
//     operands overwritten. Shared memory written by ordinary stores must be made visible to the
//     async proxy first (fence_proxy_async_shared()); memory written by TMA already is.
//
// Emulated twin (emu/async_state.h): each warp keeps its groups. mma_async records its operands,
// captures the accumulators' input and the A registers, and poisons the accumulators (NaN); the
// products are computed, reading shared memory then (as the async proxy sees it: ordinary stores
// only after fence_proxy_async_shared()), and written back at the wait_group that completes the
// group. So a read of the accumulators before the wait gives NaN, an operand overwritten before
// the wait gives a wrong product, an uncommitted operation never lands (NaN), and a missing proxy
// fence reads stale bytes. An mma_async with no wgmma.fence since the warp's last wait_group ends
// the launch with a report (stricter than the PTX rule, which needs the fence only if the
// registers were touched; every use here touches them), as does a warp whose k-th mma_async
// differs from another warp's of its warpgroup. Not modelled: a change to the A registers between
// issue and wait (taken at issue).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/common.h"
#include "kernels/mma.h"
#include "kernels/shared_address.h"
#ifndef __CUDACC__
#include <cmath>
#include <vector>

#include "emu/async_state.h"
#endif

enum class WgmmaSwizzle : int { None = 0, B128 = 1, B64 = 2, B32 = 3 };
__host__ __device__ constexpr int wgmma_swizzle_bytes(WgmmaSwizzle s) {
    return s == WgmmaSwizzle::B128 ? 128 : s == WgmmaSwizzle::B64 ? 64 : s == WgmmaSwizzle::B32 ? 32 : 0;
}

// Where element r of a thread's accumulators (D) and of its A registers sit in the 64-row tile;
// thread = index within the warpgroup (0..127).
struct WgmmaIndex {
    int row, col;
};
__host__ __device__ inline WgmmaIndex wgmma_d_element(int thread, int r) {
    const int w = (thread >> 5) & 3, lane = thread & 31, g = lane >> 2, t = lane & 3;
    return {16 * w + g + 8 * ((r >> 1) & 1), 8 * (r >> 2) + 2 * t + (r & 1)};
}
__host__ __device__ inline WgmmaIndex wgmma_a_element(int thread, int j) {
    const int w = (thread >> 5) & 3, lane = thread & 31, g = lane >> 2, t = lane & 3;
    return {16 * w + g + 8 * ((j >> 1) & 1), 2 * t + (j & 1) + 8 * (j >> 2)};
}

// The 64-bit descriptor of an operand whose first element (mn 0, k 0) is at smem.
__device__ __forceinline__ uint64_t wgmma_descriptor(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                     WgmmaSwizzle swizzle) {
    const uint32_t a = smem_address(smem);
    return (uint64_t)((a & 0x3FFFF) >> 4) | (uint64_t)((lbo_bytes >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo_bytes >> 4) & 0x3FFF) << 32 | (uint64_t)swizzle << 62;
}
// The shared-memory address the descriptor gives to element (mn, k) of a K-major (trans 0) or
// MN-major (trans 1) operand, from the canonical layouts above (host and twin).
__host__ __device__ inline uint32_t wgmma_operand_address(uint64_t desc, bool mn_major, int mn, int k) {
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4;
    const uint32_t lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4;
    const uint32_t sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    const int mode = (int)(desc >> 62);
    const uint32_t S = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
    uint32_t offset;
    if (!mn_major) {
        offset = S == 0 ? (mn % 8) * 16 + (mn / 8) * sbo + (k / 8) * lbo + (k % 8) * 2
                        : (mn % 8) * S + (mn / 8) * sbo + (k / 8) * 16 + (k % 8) * 2;
    } else if (S == 0) {
        offset = (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo;
    } else {
        const int per_row = (int)S / 2;  // elements of MN in one swizzle row
        offset = (mn % 8) * 2 + (mn % per_row / 8) * 16 + (mn / per_row) * lbo + (k % 8) * S + (k / 8) * sbo;
    }
    const uint32_t a = start + offset;
    const uint32_t mask = S == 128 ? 7 : S == 64 ? 3 : S == 32 ? 1 : 0;
    return a ^ (((a >> 7) & mask) << 4);
}

#ifndef __CUDACC__
namespace emu {
struct WgmmaLane {
    int warp;  // index of the warp in the block
    int n, scale_d, trans_a, trans_b;
    uint64_t desc_a, desc_b;
    const uint32_t* a;  // A registers, or nullptr when A comes from shared memory
    float* d;
};
// One bf16 operand element as the async proxy sees shared memory (scheduler side: errors return NaN).
inline float shared_bf16(uint32_t address) {
    if (address % 2 != 0 || address + 2 > t_dynamic_shared_bytes) {
        kernel_error("wgmma operand address %u is misaligned or past the block's %zu bytes of shared memory",
                     address, t_dynamic_shared_bytes);
        return std::nanf("");
    }
    uint16_t bits;
    memcpy(&bits, async_view() + address, 2);
    __nv_bfloat16 h;
    memcpy((void*)&h, &bits, 2);
    return __bfloat162float(h);
}
inline float register_bf16(uint32_t reg, int which) {
    const uint16_t bits = (uint16_t)(reg >> (16 * which));
    __nv_bfloat16 h;
    memcpy((void*)&h, &bits, 2);
    return __bfloat162float(h);
}
// Checks the warp's issue against the warpgroup's: the k-th mma_async of each of the four warps must
// be the same operation (each warp computes its own 16 rows of it).
inline bool same_as_warpgroup(const WgmmaLane& l, WgmmaWarpState& state) {
    if (t_block_dim.x * t_block_dim.y * t_block_dim.z % 128 != 0) {
        kernel_error("wgmma.mma_async in a block of %u threads: warpgroups need a multiple of 128",
                     t_block_dim.x * t_block_dim.y * t_block_dim.z);
        return false;
    }
    const uint64_t desc_a = l.a ? 0 : l.desc_a;  // (ignored with A in registers)
    const WgmmaSignature sig{l.n, l.scale_d, l.trans_a, l.trans_b, l.a != nullptr, desc_a, l.desc_b};
    std::vector<WgmmaSignature>& issued = t_wgmma_issued[l.warp / 4];
    const size_t k = state.issued++;
    if (k == issued.size())
        issued.push_back(sig);
    else if (!(issued[k] == sig)) {
        kernel_error("warp %d's wgmma.mma_async #%zu differs from another warp's of its warpgroup", l.warp,
                     k);
        return false;
    }
    return true;
}
inline void combine_wgmma_mma(void* const lane_data[32], unsigned group) {
    const WgmmaLane& first = *static_cast<const WgmmaLane*>(lane_data[0]);
    if (group != 0xffffffffu) {
        kernel_error("wgmma.mma_async needs all 32 lanes of each warp (mask 0x%08x)", group);
        return;
    }
    for (int lane = 1; lane < 32; lane++) {
        const WgmmaLane& l = *static_cast<const WgmmaLane*>(lane_data[lane]);
        if (l.n != first.n || l.desc_a != first.desc_a || l.desc_b != first.desc_b || l.scale_d != first.scale_d ||
            (l.a == nullptr) != (first.a == nullptr) || l.trans_a != first.trans_a || l.trans_b != first.trans_b) {
            kernel_error("lanes of warp %d issue different wgmma.mma_async operations", first.warp);
            return;
        }
    }
    WgmmaWarpState& state = t_wgmma_warps[first.warp];
    if (!state.fenced) {
        kernel_error("wgmma.mma_async by warp %d without a wgmma.fence since its last wait_group",
                     first.warp);
        return;
    }
    if (!same_as_warpgroup(first, state)) return;
    const int n = first.n, quarter = first.warp % 4;  // this warp's rows: 16·quarter ..
    // The inputs the hardware takes at issue: A from registers, and the accumulators — unless an
    // earlier operation still in flight writes them: then this one chains on its result, read when
    // this one executes (operations execute in issue order).
    const bool chained = state.in_flight[first.d] > 0;
    std::vector<float> A(16 * 16, 0.0f), C(16 * n, 0.0f);
    std::vector<float*> out(32);
    for (int lane = 0; lane < 32; lane++) {
        const WgmmaLane& l = *static_cast<const WgmmaLane*>(lane_data[lane]);
        const int thread = 32 * quarter + lane;
        if (l.a)
            for (int j = 0; j < 8; j++) {
                WgmmaIndex e = wgmma_a_element(thread, j);
                A[(e.row - 16 * quarter) * 16 + e.col] = register_bf16(l.a[j / 2], j % 2);
            }
        if (!chained)
            for (int r = 0; r < n / 2; r++) {
                WgmmaIndex e = wgmma_d_element(thread, r);
                if (first.scale_d) C[(e.row - 16 * quarter) * n + e.col] = l.d[r];
                l.d[r] = std::nanf("");  // undefined until wait_group
            }
        out[lane] = l.d;
    }
    state.in_flight[first.d]++;
    const bool a_from_registers = first.a != nullptr;
    const WgmmaLane op = first;
    state.uncommitted.push_back([=]() mutable {
        if (chained && op.scale_d)
            for (int lane = 0; lane < 32; lane++)
                for (int r = 0; r < n / 2; r++) {
                    WgmmaIndex e = wgmma_d_element(32 * quarter + lane, r);
                    C[(e.row - 16 * quarter) * n + e.col] = out[lane][r];
                }
        if (!a_from_registers)
            for (int i = 0; i < 16; i++)
                for (int k = 0; k < 16; k++)
                    A[i * 16 + k] = shared_bf16(wgmma_operand_address(op.desc_a, op.trans_a, 16 * quarter + i, k));
        std::vector<float> B(16 * n);
        for (int k = 0; k < 16; k++)
            for (int j = 0; j < n; j++) B[k * n + j] = shared_bf16(wgmma_operand_address(op.desc_b, op.trans_b, j, k));
        for (int lane = 0; lane < 32; lane++)
            for (int r = 0; r < n / 2; r++) {
                WgmmaIndex e = wgmma_d_element(32 * quarter + lane, r);
                const int i = e.row - 16 * quarter;
                float sum = C[i * n + e.col];
                for (int k = 0; k < 16; k++) sum += A[i * 16 + k] * B[k * n + e.col];
                out[lane][r] = sum;
            }
        t_wgmma_warps[op.warp].in_flight[op.d]--;
    });
}
struct WgmmaSyncLane {
    int warp, pending;
};
inline void combine_wgmma_fence(void* const lane_data[32], unsigned) {
    t_wgmma_warps[static_cast<const WgmmaSyncLane*>(lane_data[0])->warp].fenced = true;
}
inline void combine_wgmma_commit(void* const lane_data[32], unsigned) {
    WgmmaWarpState& s = t_wgmma_warps[static_cast<const WgmmaSyncLane*>(lane_data[0])->warp];
    s.committed.push_back(std::move(s.uncommitted));
    s.uncommitted.clear();
}
inline void combine_wgmma_wait(void* const lane_data[32], unsigned) {
    const WgmmaSyncLane& l = *static_cast<const WgmmaSyncLane*>(lane_data[0]);
    WgmmaWarpState& s = t_wgmma_warps[l.warp];
    while (s.committed.size() > (size_t)l.pending) {
        for (auto& op : s.committed.front()) op();
        s.committed.pop_front();
    }
    s.fenced = false;
}
// setmaxnreg: every lane of the warp, the same count (the twin has no register file to resize).
inline void combine_setmaxnreg(void* const lane_data[32], unsigned group) {
    const int count = *static_cast<const int*>(lane_data[0]);
    for (int lane = 0; lane < 32; lane++)
        if (group != 0xffffffffu || *static_cast<const int*>(lane_data[lane]) != count) {
            kernel_error("setmaxnreg needs every lane of the warp with the same count (mask 0x%08x)", group);
            return;
        }
}
inline void wgmma_sync(WarpCombine combine, int pending) {
    WgmmaSyncLane lane{linear_thread_index() / 32, pending};
    warp_collective(combine, 0xffffffffu, &lane);
}
}  // namespace emu
#endif

template <int N>
struct WgmmaShape {
    static_assert(N == 32 || N == 64 || N == 128, "m64nNk16 wrappers exist for N = 32, 64, 128");
};

// wgmma_fence_operands(WgmmaShape<N>{}, d): tells the compiler the accumulators are read and written
// here, so that it keeps other accesses to them on their side of the wgmma instructions (nothing
// under the emulator). wgmma_ss_asm / wgmma_rs_asm: the instructions, one overload per N.
#if defined(HOPPER_DEVICE_CODE)
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_asm(WgmmaShape<32>, float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_asm(WgmmaShape<32>, float* d, const uint32_t* a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

__device__ __forceinline__ void wgmma_fence_operands(WgmmaShape<32>, float* d) {
    asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) :: "memory");
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_asm(WgmmaShape<64>, float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_asm(WgmmaShape<64>, float* d, const uint32_t* a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

__device__ __forceinline__ void wgmma_fence_operands(WgmmaShape<64>, float* d) {
    asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) :: "memory");
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss_asm(WgmmaShape<128>, float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}
template <int kTransB>
__device__ __forceinline__ void wgmma_rs_asm(WgmmaShape<128>, float* d, const uint32_t* a, uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

__device__ __forceinline__ void wgmma_fence_operands(WgmmaShape<128>, float* d) {
    asm volatile("" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) :: "memory");
}
#else
template <int N>
__host__ __device__ inline void wgmma_fence_operands(WgmmaShape<N>, float*) {}
#endif

// wgmma.fence: before the first mma_async of a batch, after the registers were touched.
__device__ __forceinline__ void wgmma_fence() {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    emu::wgmma_sync(&emu::combine_wgmma_fence, 0);
#endif
}
__device__ __forceinline__ void wgmma_commit_group() {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    emu::wgmma_sync(&emu::combine_wgmma_commit, 0);
#endif
}
// Waits until at most kPending of the warpgroup's committed groups are incomplete. d: the
// accumulators the caller is about to read (named so the compiler orders its accesses after).
template <int kPending, int N>
__device__ __forceinline__ void wgmma_wait_group(float* d) {
    static_assert(kPending >= 0 && kPending <= 7, "wait_group takes 0..7");
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
    wgmma_fence_operands(WgmmaShape<N>{}, d);
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    (void)d;
    emu::wgmma_sync(&emu::combine_wgmma_wait, kPending);
#endif
}
// Shared memory written by ordinary stores, about to be read by wgmma (or TMA stores): make the
// writes visible to the async proxy (then a barrier among the writers).
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif !defined(__CUDACC__)
    if (emu::t_dynamic_shared_bytes)  // the stores so far, every thread's
        memcpy(emu::async_view(), emu::t_dynamic_shared, emu::t_dynamic_shared_bytes);
#endif
}

// setmaxnreg (sm_90a): a warpgroup gives registers back to the block's pool or takes more from it,
// so that consumer warpgroups can hold more than 64K / blockDim registers per thread while the
// producer keeps few. Every thread of the warpgroup executes it, with an immediate count (a multiple
// of 8, 24..256); an increase waits until the pool has the registers, so the decreases and
// increases must balance against what the kernel was launched with (65536 / blockDim, rounded down
// to a multiple of 8, which ptxas then allocates at entry). No-op for the twin, which checks that
// whole warps call it.
// kClaim: setmaxnreg.inc (take registers, waiting until the pool has them), else .dec (give back).
template <bool kClaim, int kRegisters>
__device__ __forceinline__ void warpgroup_set_max_registers() {
    static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256, "setmaxnreg: 24..256, x8");
#if defined(HOPPER_DEVICE_CODE)
    if constexpr (kClaim) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
    else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    int count = kRegisters;
    emu::warp_collective(&emu::combine_setmaxnreg, 0xffffffffu, &count);
#endif
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
    warpgroup_set_max_registers<false, kRegisters>();
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
    warpgroup_set_max_registers<true, kRegisters>();
}

// D (64×N) = A·B + (scale_d ? D : 0), A and B in shared memory (descriptors), K-major unless
// kTransA / kTransB. All 128 threads of the warpgroup call it; d holds this thread's N/2 accumulators.
template <int N, int kTransA = 0, int kTransB = 0>
__device__ __forceinline__ void wgmma_ss(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d = 1) {
    (void)WgmmaShape<N>{};
#if defined(HOPPER_DEVICE_CODE)
    wgmma_ss_asm<kTransA, kTransB>(WgmmaShape<N>{}, d, desc_a, desc_b, scale_d);
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    emu::WgmmaLane lane{emu::linear_thread_index() / 32, N, scale_d, kTransA, kTransB, desc_a, desc_b, nullptr, d};
    emu::warp_collective(&emu::combine_wgmma_mma, 0xffffffffu, &lane);
#endif
}
// The same with A from registers: a[4] bf16 pairs laid out as wgmma_a_element() says.
template <int N, int kTransB = 0>
__device__ __forceinline__ void wgmma_rs(float* d, const uint32_t a[4], uint64_t desc_b, int scale_d = 1) {
    (void)WgmmaShape<N>{};
#if defined(HOPPER_DEVICE_CODE)
    wgmma_rs_asm<kTransB>(WgmmaShape<N>{}, d, a, desc_b, scale_d);
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    emu::WgmmaLane lane{emu::linear_thread_index() / 32, N, scale_d, 0, kTransB, 0, desc_b, a, d};
    emu::warp_collective(&emu::combine_wgmma_mma, 0xffffffffu, &lane);
#endif
}
