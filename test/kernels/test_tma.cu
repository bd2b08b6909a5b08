// kernels/mbarrier.h and kernels/tma.h: mbarrier phases and transaction counts; TMA tile loads
// (2D and 3D, out-of-bounds zero fill, 64B and 128B swizzle) against the placement written out
// from the PTX ISA and the driver API's description; and, under the emulator, that data is not
// visible before the barrier's phase completes and that a wrong byte count is reported, not hung.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/tma.h"
#include "test/kernels/kernel_test.h"

namespace {

void skip_unless_hopper() {
    if (!hopper_units_available()) SKIP("needs an sm_90 device");
}

// Barrier of 3 arrivals; thread 0 records try_wait(parity 0) after 0..3 arrivals, threads 1..3
// arrive in turn (barriers order them); then phase 1 completes with 3 more, observed with parity 1.
__global__ void phases_kernel(int* out) {
    DYNAMIC_SHARED(uint64_t, bar);
    if (threadIdx.x == 0) {
        mbarrier_init(bar, 3);
        mbarrier_init_fence();
    }
    __syncthreads();
    for (int step = 0; step < 3; step++) {
        if (threadIdx.x == 0) out[step] = mbarrier_try_wait_parity(bar, 0);
        __syncthreads();
        if ((int)threadIdx.x == step + 1) mbarrier_arrive(bar);
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[3] = mbarrier_try_wait_parity(bar, 0);  // phase 0 complete
        out[4] = mbarrier_try_wait_parity(bar, 1);  // phase 1 not yet
    }
    __syncthreads();
    if (threadIdx.x >= 1) mbarrier_arrive(bar);
    mbarrier_wait(bar, 1);
    if (threadIdx.x == 0) out[5] = mbarrier_try_wait_parity(bar, 0);  // phase 2 (parity 0) not complete
}

TEST(mbarrier_phases_follow_arrivals) {
    skip_unless_hopper();
    int* d_out = device_poisoned<int>(6);
    LAUNCH(phases_kernel, 1, 4, 64, 0, d_out);
    CUDA_CHECK(cudaGetLastError());
    std::vector<int> o = host_copy_of(d_out, 6);
    CHECK(o[0] == 0 && o[1] == 0 && o[2] == 0);
    CHECK(o[3] == 1 && o[4] == 0);
    CHECK(o[5] == 0);
    CUDA_CHECK(cudaFree(d_out));
}

// One thread loads a box with TMA; every thread waits on the barrier, then the block copies the
// shared-memory image (bytes as they lie) out. `early` also records word 0 before the wait.
template <int kRank>
__global__ void tma_kernel(uint16_t* out, const __grid_constant__ CUtensorMap map, int c0, int c1, int c2,
                           int box_elems, uint32_t bytes, uint16_t* early) {
    DYNAMIC_SHARED(unsigned char, raw);
    uint16_t* tile = align_shared<uint16_t>(raw, 1024);
    uint64_t* bar = reinterpret_cast<uint64_t*>(tile + box_elems);
    if (threadIdx.x == 0) {
        tma_prefetch_map(&map);
        mbarrier_init(bar, 1);
        mbarrier_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbarrier_arrive_expect_tx(bar, bytes);
        if constexpr (kRank == 2) tma_load_2d(tile, &map, c0, c1, bar);
        else tma_load_3d(tile, &map, c0, c1, c2, bar);
        if (early) early[0] = tile[0];  // BUG on purpose (emulator check): read before the wait
    }
    mbarrier_wait(bar, 0);
    for (int i = threadIdx.x; i < box_elems; i += blockDim.x) out[i] = tile[i];
}

// The reference placement: the box is dense, innermost first, in rows of box0·2 bytes; with
// swizzle S, 16-byte chunk c of the row at byte offset o (tile 1024-byte aligned) is stored at
// chunk c ^ ((o / 128) mod (S/16)) of that row: for 128-byte rows, chunk c ^ (row % 8).
size_t reference_offset(size_t linear_elem, int S) {
    const size_t byte = linear_elem * 2;
    if (S == 0) return byte;
    const size_t chunk = (byte / 16) % (S / 16), row_start = byte - byte % S;
    const size_t x = (byte / 128) % 8 % (S / 16);
    return row_start + ((chunk ^ x) * 16) + byte % 16;
}

// Tensor of dims (W, H, D) bf16 ids: element (x, y, z) holds 1 + x + W·y + W·H·z (< 2^16).
void check_load(int rank, int W, int H, int D, uint32_t box0, uint32_t box1, uint32_t box2, int c0, int c1, int c2,
                TmaSwizzle swizzle, const char* what) {
    std::vector<uint16_t> t((size_t)W * H * D);
    for (size_t i = 0; i < t.size(); i++) t[i] = (uint16_t)(1 + i);
    uint16_t* d_t = device_copy_of(t);
    const uint64_t dims[3] = {(uint64_t)W, (uint64_t)H, (uint64_t)D};
    const uint64_t strides[3] = {2, (uint64_t)W * 2, (uint64_t)W * H * 2};
    const uint32_t box[3] = {box0, box1, rank == 3 ? box2 : 1};
    CUtensorMap map;
    make_tensor_map(&map, d_t, rank, 2, dims, strides, box, swizzle);
    const int elems = (int)(box[0] * box[1] * box[2]);
    uint16_t* d_out = device_poisoned<uint16_t>(elems);
    const size_t smem = elems * 2 + 1024 + 64;
    if (rank == 2) {
        CUDA_CHECK(cudaFuncSetAttribute(tma_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
        LAUNCH(tma_kernel<2>, 1, 64, smem, 0, d_out, map, c0, c1, c2, elems, (uint32_t)elems * 2, (uint16_t*)nullptr);
    } else {
        CUDA_CHECK(cudaFuncSetAttribute(tma_kernel<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
        LAUNCH(tma_kernel<3>, 1, 64, smem, 0, d_out, map, c0, c1, c2, elems, (uint32_t)elems * 2, (uint16_t*)nullptr);
    }
    CUDA_CHECK(cudaGetLastError());
    std::vector<uint16_t> out = host_copy_of(d_out, elems);
    int bad = 0;
    size_t linear = 0;
    for (uint32_t z = 0; z < box[2]; z++)
        for (uint32_t y = 0; y < box[1]; y++)
            for (uint32_t x = 0; x < box[0]; x++, linear++) {
                const long long gx = c0 + (long long)x, gy = c1 + (long long)y, gz = rank == 3 ? c2 + (long long)z : 0;
                const bool inside = gx >= 0 && gx < W && gy >= 0 && gy < H && gz >= 0 && gz < D;
                const uint16_t want = inside ? t[gx + (size_t)W * gy + (size_t)W * H * gz] : 0;
                const uint16_t got = out[reference_offset(linear, (int)swizzle) / 2];
                if (got != want && bad++ < 3)
                    CHECK_MSG(false, "%s: box element (%u,%u,%u): got %u, want %u", what, x, y, z, got, want);
            }
    CHECK_MSG(bad == 0, "%s: %d elements wrong", what, bad);
    CUDA_CHECK(cudaFree(d_t));
    CUDA_CHECK(cudaFree(d_out));
}

TEST(tma_2d_loads_with_zero_fill) {
    skip_unless_hopper();
    check_load(2, 40, 20, 1, 16, 8, 1, 8, 4, 0, TmaSwizzle::None, "2D inside");
    check_load(2, 40, 20, 1, 16, 8, 1, 32, 15, 0, TmaSwizzle::None, "2D past both ends (zero fill)");
    check_load(2, 40, 20, 1, 16, 8, 1, -8, -3, 0, TmaSwizzle::None, "2D negative coordinates (zero fill)");
}

TEST(tma_swizzled_loads_match_ptx_pattern) {
    skip_unless_hopper();
    check_load(2, 200, 70, 1, 64, 64, 1, 64, 8, 0, TmaSwizzle::B128, "2D 128B swizzle, 64x64 bf16 box");
    check_load(2, 200, 70, 1, 64, 16, 1, 136, 60, 0, TmaSwizzle::B128, "2D 128B swizzle, past the edges");
    check_load(2, 200, 70, 1, 32, 32, 1, 8, 8, 0, TmaSwizzle::B64, "2D 64B swizzle");
    check_load(2, 200, 70, 1, 16, 16, 1, 0, 0, 0, TmaSwizzle::B32, "2D 32B swizzle");
}

TEST(tma_3d_loads) {
    skip_unless_hopper();
    // The attention kernels' view of qkv: (3C, T, B) with rows past T zero-filled.
    check_load(3, 96, 37, 3, 64, 16, 1, 32, 30, 1, TmaSwizzle::B128, "3D 128B swizzle, rows past T");
    check_load(3, 96, 37, 3, 32, 8, 2, 0, 0, 1, TmaSwizzle::None, "3D box of depth 2");
}

#ifndef __CUDACC__
// Emulator only: the twin keeps a tile poisoned until its barrier phase completes, and reports a
// barrier whose expected byte count never arrives.
TEST(tma_twin_hides_data_until_the_barrier_completes) {
    std::vector<uint16_t> t(64 * 8, 7);
    uint16_t* d_t = device_copy_of(t);
    const uint64_t dims[2] = {64, 8}, strides[2] = {2, 128};
    const uint32_t box[2] = {64, 8};
    CUtensorMap map;
    make_tensor_map(&map, d_t, 2, 2, dims, strides, box, TmaSwizzle::B128);
    uint16_t* d_out = device_poisoned<uint16_t>(512);
    uint16_t* d_early = device_poisoned<uint16_t>(1);
    LAUNCH(tma_kernel<2>, 1, 32, 2048, 0, d_out, map, 0, 0, 0, 512, 1024u, d_early);
    CUDA_CHECK(cudaGetLastError());
    CHECK(host_copy_of(d_early, 1)[0] == 0xffff);  // poison before the wait
    CHECK(host_copy_of(d_out, 512)[5] == 7);       // the data after it
    // Announcing more bytes than the box holds: the phase never completes: a reported deadlock.
    LAUNCH(tma_kernel<2>, 1, 32, 2048, 0, d_out, map, 0, 0, 0, 512, 1040u, (uint16_t*)nullptr);
    CHECK(emu::last_kernel_report().find("deadlock") != std::string::npos);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    // Fewer: the box's bytes overshoot the announced count: reported.
    LAUNCH(tma_kernel<2>, 1, 32, 2048, 0, d_out, map, 0, 0, 0, 512, 1008u, (uint16_t*)nullptr);
    CHECK(emu::last_kernel_report().find("more bytes than expect_tx announced") != std::string::npos);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CUDA_CHECK(cudaFree(d_t));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_early));
}

// A two-stage ring as the attention kernels use it: thread 0 loads tile j (8 rows of 64 bf16) into
// stage j % 2 once the consumer warp has released it (`empty`), the consumer warp (warp 1) waits
// for `full`, sums the tile and releases the stage. Each mode leaves one step out.
enum class RingMisuse { None, NoInitFence, NoEmptyWait, NoRelease, NoFullWait };
__global__ void ring_kernel(float* sums, const __grid_constant__ CUtensorMap map, int tiles,
                            RingMisuse misuse) {
    DYNAMIC_SHARED(unsigned char, raw);
    unsigned char* stages = align_shared<unsigned char>(raw, 1024);  // [2][8][64] bf16
    uint64_t* full = reinterpret_cast<uint64_t*>(stages + 2048);
    uint64_t* empty = full + 2;
    if (threadIdx.x == 0) {
        for (int s = 0; s < 2; s++) mbarrier_init(&full[s], 1), mbarrier_init(&empty[s], 1);
        if (misuse != RingMisuse::NoInitFence) mbarrier_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int j = 0; j < tiles; j++) {
            const int s = j % 2;
            if (j >= 2 && misuse != RingMisuse::NoEmptyWait) mbarrier_wait(&empty[s], (j / 2 - 1) & 1);
            mbarrier_arrive_expect_tx(&full[s], 1024);
            tma_load_2d(stages + 1024 * s, &map, 0, 8 * j, &full[s]);
        }
    } else if (threadIdx.x >= 32) {
        const int lane = threadIdx.x % 32;
        for (int j = 0; j < tiles; j++) {
            const int s = j % 2;
            if (misuse != RingMisuse::NoFullWait) mbarrier_wait(&full[s], (j / 2) & 1);
            const __nv_bfloat16* tile = reinterpret_cast<const __nv_bfloat16*>(stages + 1024 * s);
            float sum = 0.0f;  // the whole tile: the order of its elements (the swizzle) does not matter
            for (int i = lane; i < 512; i += 32) sum += __bfloat162float(tile[i]);
            for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            __syncwarp();
            if (lane == 0) {
                sums[j] = sum;
                if (misuse != RingMisuse::NoRelease) mbarrier_arrive(&empty[s]);
            }
        }
    }
}

TEST(tma_ring_twin_catches_each_missing_step) {
    const int tiles = 5;
    std::vector<uint16_t> t(64 * 8 * tiles);
    std::vector<float> want(tiles, 0.0f);
    for (size_t i = 0; i < t.size(); i++) {
        const float v = (float)(i % 7) - 3.0f;
        __nv_bfloat16 h = __float2bfloat16(v);
        memcpy(&t[i], &h, 2);
        want[i / 512] += v;
    }
    uint16_t* d_t = device_copy_of(t);
    const uint64_t dims[2] = {64, (uint64_t)8 * tiles}, strides[2] = {2, 128};
    const uint32_t box[2] = {64, 8};
    CUtensorMap map;
    make_tensor_map(&map, d_t, 2, 2, dims, strides, box, TmaSwizzle::B128);
    float* d_sums = device_poisoned<float>(tiles);
    auto run = [&](RingMisuse m, std::vector<float>* sums) {
        LAUNCH(ring_kernel, 1, 64, 2048 + 64 + 1024, 0, d_sums, map, tiles, m);
        const std::string report = emu::last_kernel_report();
        const cudaError_t err = cudaGetLastError();
        *sums = host_copy_of(d_sums, tiles);
        return err == cudaSuccess ? std::string() : report;
    };
    std::vector<float> sums;
    CHECK(run(RingMisuse::None, &sums).empty());
    for (int j = 0; j < tiles; j++)
        CHECK_MSG(sums[j] == want[j], "tile %d: %g, want %g", j, sums[j], want[j]);
    std::string report = run(RingMisuse::NoInitFence, &sums);
    CHECK_MSG(report.find("fence.mbarrier_init") != std::string::npos, "no init fence: '%s'", report.c_str());
    // The producer refills stage 0 while it is still in use: the phase is overrun.
    report = run(RingMisuse::NoEmptyWait, &sums);
    CHECK_MSG(report.find("no arrival pending") != std::string::npos, "no empty wait: '%s'", report.c_str());
    report = run(RingMisuse::NoRelease, &sums);
    CHECK_MSG(report.find("deadlock") != std::string::npos, "no release: '%s'", report.c_str());
    // The consumer reads before the data lands: poison (NaN) sums, and copies left in flight, or an
    // overrun phase when the producer runs ahead.
    report = run(RingMisuse::NoFullWait, &sums);
    CHECK_MSG(!report.empty() || std::isnan(sums[0]), "no full wait: '%s', sum %g", report.c_str(), sums[0]);
    CUDA_CHECK(cudaFree(d_t));
    CUDA_CHECK(cudaFree(d_sums));
}
#endif

}  // namespace
