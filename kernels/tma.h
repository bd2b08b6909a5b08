// The Tensor Memory Accelerator (TMA, sm_90): one thread asks for a whole tile — a box of a 2D or 3D
// tensor described by a CUtensorMap — to be copied from global to shared memory; the copy runs
// asynchronously and counts its bytes down on an mbarrier (kernels/mbarrier.h), on which the
// consumers wait. Per load: box[0]·box[1]·box[2]·element bytes from global (L2) to shared memory.
//
// What the PTX ISA and the driver API (cuTensorMapEncodeTiled) define, and the twin implements:
//   - the tensor: rank 2..3 here, dims[0] innermost (contiguous), strides in bytes for dims 1.. (each a
//     multiple of 16), base address 16-byte aligned;
//   - the box: box[d] elements per dimension (1..256); coordinates are element indices of the box's
//     first element and may lie outside the tensor: out-of-bounds elements are filled with zeros;
//   - in shared memory the box is dense, innermost dimension fastest (box[0]·elem bytes per row),
//     at a 128-byte aligned address, then permuted by the swizzle mode, a function of the shared-memory
//     address bits: with S = 32, 64 or 128 bytes the 16-byte granule index (bits 4..6) is XORed with
//     bits 7..9 of the address, masked to log2(S/16) bits:
//         128B: a ^ (((a >> 7) & 7) << 4)   64B: a ^ (((a >> 7) & 3) << 4)   32B: a ^ (((a >> 7) & 1) << 4)
//     so with a 1024-byte aligned tile of 128-byte rows, chunk c of row r lands at chunk c ^ (r % 8).
//     box[0]·elem must equal S here (the hardware takes less; make_tensor_map refuses it). This is
//     the layout wgmma's swizzled descriptors read (kernels/wgmma.h).
//   - completion: the copy performs complete_tx(bytes of the box) on the named mbarrier.
//
// Host side: make_tensor_map() builds the CUtensorMap. Under nvcc it calls the driver's
// cuTensorMapEncodeTiled, found through the runtime (cudaGetDriverEntryPointByVersion), so programs
// need no -lcuda. Under the emulator the same 128 bytes hold a plain description that the twin reads.
// Kernels take the map as a `const __grid_constant__ CUtensorMap` parameter and pass its address.
//
// Emulated twin: the copy reads global memory when issued, poisons the destination (all bits set),
// and writes the box (zeros out of bounds, swizzled) when a thread polls the mbarrier and the phase
// can complete (kernels/mbarrier.h): reading a tile before waiting for its barrier, or refilling a
// stage that consumers still read, gives NaN, not the right answer by luck. A barrier whose init
// no fence.mbarrier_init followed, a misaligned destination, or a block exiting with copies in
// flight end the launch with a report.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <vector>

#include "kernels/common.h"
#include "kernels/mbarrier.h"
#include "kernels/shared_address.h"

#if !defined(__CUDACC__) && defined(__GNUC__)
// Kernels take a CUtensorMap (128-byte aligned) by value; g++ notes an ABI change from GCC 4.6 for
// such parameters, which concerns no code here.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

enum class TmaSwizzle : int { None = 0, B32 = 32, B64 = 64, B128 = 128 };

#ifndef __CUDACC__
namespace emu {
// What the emulator keeps in a CUtensorMap's 128 opaque bytes.
struct EmuTensorMap {
    uint64_t magic;
    const unsigned char* base;
    uint32_t rank, elem_bytes, swizzle_bytes, pad;
    uint64_t dims[3];
    uint64_t strides[3];  // bytes; strides[0] = elem_bytes
    uint32_t box[3];
};
static_assert(sizeof(EmuTensorMap) <= sizeof(CUtensorMap), "fits in a CUtensorMap");
constexpr uint64_t kTensorMapMagic = 0x544d41656d750001ull;

inline uint32_t swizzle_address(uint32_t a, uint32_t swizzle_bytes) {
    const uint32_t mask = swizzle_bytes == 128 ? 7 : swizzle_bytes == 64 ? 3 : swizzle_bytes == 32 ? 1 : 0;
    return a ^ (((a >> 7) & mask) << 4);
}

inline void tma_load(void* dst, const CUtensorMap* map, const int* coords, int rank, uint64_t* bar) {
    EmuTensorMap m;
    memcpy(&m, map, sizeof m);
    if (m.magic != kTensorMapMagic || (int)m.rank != rank)
        kernel_error(
            "cp.async.bulk.tensor.%dd with a tensor map not made by make_tensor_map (or of another "
            "rank)",
            rank);
    const uint32_t dst_address = smem_address(dst);
    if (dst_address % 128 != 0)
        kernel_error("cp.async.bulk.tensor destination %u not 128-byte aligned", dst_address);
    MbarrierState& s = mbarrier_state(bar, "cp.async.bulk.tensor's mbarrier");
    if (!s.init_fenced)
        kernel_error(
            "cp.async.bulk.tensor completes on the mbarrier at +%u, whose mbarrier.init no "
            "fence.mbarrier_init followed: the TMA unit may not see it initialised",
            smem_address(bar));
    uint32_t box[3] = {1, 1, 1};
    uint64_t dims[3] = {1, 1, 1};
    for (int d = 0; d < rank; d++) box[d] = m.box[d], dims[d] = m.dims[d];
    const size_t bytes = (size_t)box[0] * box[1] * box[2] * m.elem_bytes;
    smem_address(static_cast<char*>(dst) + bytes - 1);  // the whole box is in shared memory
    std::vector<unsigned char> staged(bytes, 0);
    size_t linear = 0;
    for (uint32_t i2 = 0; i2 < box[2]; i2++)
        for (uint32_t i1 = 0; i1 < box[1]; i1++)
            for (uint32_t i0 = 0; i0 < box[0]; i0++, linear++) {
                const long long g[3] = {(long long)coords[0] + i0, rank > 1 ? (long long)coords[1] + i1 : 0,
                                        rank > 2 ? (long long)coords[2] + i2 : 0};
                bool inside = true;
                for (int d = 0; d < 3; d++) inside = inside && g[d] >= 0 && g[d] < (long long)dims[d];
                const uint32_t offset = (uint32_t)(linear * m.elem_bytes);
                const uint32_t placed = swizzle_address(dst_address + offset, m.swizzle_bytes) - dst_address;
                if (inside) {
                    const unsigned char* src = m.base + g[0] * m.strides[0] + g[1] * (rank > 1 ? m.strides[1] : 0) +
                                               g[2] * (rank > 2 ? m.strides[2] : 0);
                    memcpy(&staged[placed], src, m.elem_bytes);
                }
            }
    memset(dst, 0xff, bytes);  // undefined until the barrier's phase completes: poison
    memset(async_view() + dst_address, 0xff, bytes);
    s.copies.push_back({dst, std::move(staged)});
}
}  // namespace emu
#endif

// Builds `map` for a row-major tensor of bf16 (elem_bytes 2) or fp32 (4) elements.
// dims[0] innermost; strides_bytes[d] for d = 1..rank-1 (strides_bytes[0] is ignored).
inline void make_tensor_map(CUtensorMap* map, const void* base, int rank, int elem_bytes, const uint64_t* dims,
                            const uint64_t* strides_bytes, const uint32_t* box, TmaSwizzle swizzle) {
    if (rank < 2 || rank > 3 || (elem_bytes != 2 && elem_bytes != 4) || (uintptr_t)base % 16 != 0) {
        fprintf(stderr, "make_tensor_map: rank 2..3, 2- or 4-byte elements, 16-byte aligned base\n");
        exit(1);
    }
    for (int d = 0; d < rank; d++) {
        if (box[d] < 1 || box[d] > 256 || dims[d] < 1 || (d > 0 && strides_bytes[d] % 16 != 0)) {
            fprintf(stderr, "make_tensor_map: dimension %d: box 1..256, strides multiples of 16 bytes\n", d);
            exit(1);
        }
    }
    // (The hardware also takes inner extents below the span; their shared-memory placement is not
    // what the twin and the tests pin down, so they are refused here.)
    if (swizzle != TmaSwizzle::None && box[0] * elem_bytes != (uint32_t)swizzle) {
        fprintf(stderr,
                "make_tensor_map: with a swizzle, the box's inner extent (%u bytes) must equal its span\n",
                box[0] * elem_bytes);
        exit(1);
    }
#ifdef __CUDACC__
    using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static Encode encode = nullptr;
    if (!encode) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                    &found));
        if (found != cudaDriverEntryPointSuccess || !fn) {
            fprintf(stderr, "make_tensor_map: the driver has no cuTensorMapEncodeTiled\n");
            exit(2);
        }
        encode = reinterpret_cast<Encode>(fn);
    }
    cuuint64_t g_dims[3], g_strides[2];
    cuuint32_t b[3], e[3] = {1, 1, 1};
    for (int d = 0; d < rank; d++) g_dims[d] = dims[d], b[d] = box[d];
    for (int d = 1; d < rank; d++) g_strides[d - 1] = strides_bytes[d];
    const CUtensorMapSwizzle sw = swizzle == TmaSwizzle::B128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                  : swizzle == TmaSwizzle::B64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                  : swizzle == TmaSwizzle::B32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                               : CU_TENSOR_MAP_SWIZZLE_NONE;
    const CUresult r = encode(map, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                              (cuuint32_t)rank, const_cast<void*>(base), g_dims, g_strides, b, e,
                              CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "make_tensor_map: cuTensorMapEncodeTiled failed (%d)\n", (int)r);
        exit(2);
    }
#else
    emu::EmuTensorMap m{};
    m.magic = emu::kTensorMapMagic;
    m.base = static_cast<const unsigned char*>(base);
    m.rank = rank;
    m.elem_bytes = elem_bytes;
    m.swizzle_bytes = (uint32_t)swizzle;
    for (int d = 0; d < rank; d++) {
        m.dims[d] = dims[d];
        m.strides[d] = d == 0 ? (uint64_t)elem_bytes : strides_bytes[d];
        m.box[d] = box[d];
    }
    memset(map, 0, sizeof *map);
    memcpy(map, &m, sizeof m);
#endif
}

// One thread issues; the box lands at dst (128-byte aligned; 1024 for 128B swizzle tiles read by
// wgmma) and completes box-bytes of transactions on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"(smem_address(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"(smem_address(bar))
        : "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    const int c[2] = {c0, c1};
    emu::tma_load(dst, map, c, 2, bar);
#endif
}
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint64_t* bar) {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
        "%4}], [%5];\n" ::"r"(smem_address(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_address(bar))
        : "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    const int c[3] = {c0, c1, c2};
    emu::tma_load(dst, map, c, 3, bar);
#endif
}
// Hint: fetch the tensor map's cache line before the first copy (one thread).
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    (void)map;
#endif
}
