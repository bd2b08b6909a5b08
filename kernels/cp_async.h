// Asynchronous copies from global to shared memory (PTX cp.async, sm_80+), with their commit and
// wait groups, for pipelines that load the next tile while computing on the current one.
//
// The PTX ISA's rules, which the emulated twin below enforces:
//   cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes
//       starts copying `bytes` (4, 8 or 16; .cg only 16) from global src to shared dst, both
//       aligned to `bytes`; the last bytes - src_bytes bytes are filled with zeros (src_bytes = 0
//       reads nothing, a cheap way to zero the rows past the end of a matrix). The copy runs
//       asynchronously: until it is known complete, dst holds undefined data.
//   cp.async.commit_group
//       closes the executing thread's copies issued since its last commit into one cp.async-group.
//   cp.async.wait_group N
//       waits until at most N of the thread's most recent committed groups are pending; all
//       older groups are complete. Copies not yet committed are not waited for.
//   cp.async.wait_all = commit_group + wait_group 0.
// Completion is per thread: other threads see the data only after a barrier that follows the
// waits of the threads that issued the copies (__syncthreads()).
//
// Usage: each thread keeps a CpAsyncQueue (empty on a GPU, where the hardware tracks its copies):
//     CpAsyncQueue copies;
//     cp_async_16(copies, smem_dst, gmem_src);      // per 16-byte chunk of a tile
//     cp_async_commit_group(copies);
//     ... issue and commit the next tile ...
//     cp_async_wait_group<1>(copies);               // the older tile has landed
//     __syncthreads();                              // ... for every thread's chunks
//
// The emulated twin makes ordering bugs visible: a copy poisons its destination (all bits set:
// NaN in floats and bf16) when it is issued and writes the data only when a wait says it must be
// complete. Reading a tile before waiting for it, or issuing a copy into a buffer that other
// threads are still reading (a missing barrier), then shows up as NaN instead of working by luck.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/common.h"

#ifdef __CUDACC__
struct CpAsyncQueue {};  // the hardware keeps track of each thread's copies
__device__ __forceinline__ uint32_t cp_async_shared_address(const void* p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
#else
#include <deque>
#include <vector>
// One CUDA thread's copies that have not landed yet (a local variable of the thread, on its fiber).
struct CpAsyncQueue {
    struct Copy {
        void* dst;
        const void* src;
        int bytes, src_bytes;
    };
    std::vector<Copy> uncommitted;
    std::deque<std::vector<Copy> > committed;  // oldest group first
    // Copies never waited for never land: on a GPU they would land at some unknown time, which no
    // correct kernel can rely on.
};
namespace emu {
inline void issue_cp_async(CpAsyncQueue& queue, void* dst, const void* src, int bytes, int src_bytes) {
    if ((uintptr_t)dst % bytes != 0 || (src_bytes > 0 && (uintptr_t)src % bytes != 0)) {
        fprintf(stderr, "emu: cp.async of %d bytes with a misaligned address (dst %p, src %p)\n", bytes, dst,
                src);
        abort();
    }
    memset(dst, 0xff, bytes);  // undefined until a wait: poison
    queue.uncommitted.push_back({dst, src, bytes, src_bytes});
}
inline void land(const std::vector<CpAsyncQueue::Copy>& group) {
    for (const CpAsyncQueue::Copy& c : group) {
        if (c.src_bytes > 0) memcpy(c.dst, c.src, c.src_bytes);
        memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
    }
}
}  // namespace emu
#endif

// 16 bytes, cached in L2 only (.cg): tiles that each block reads once.
__device__ __forceinline__ void cp_async_16(CpAsyncQueue& queue, void* smem_dst, const void* gmem_src) {
#ifdef __CUDACC__
    (void)queue;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(cp_async_shared_address(smem_dst)),
                 "l"(gmem_src)
                 : "memory");
#else
    emu::issue_cp_async(queue, smem_dst, gmem_src, 16, 16);
#endif
}
// 16 bytes when `valid`, else 16 zero bytes (gmem_src is then not read; pass any valid pointer).
__device__ __forceinline__ void cp_async_16_or_zero(CpAsyncQueue& queue, void* smem_dst, const void* gmem_src,
                                                    bool valid) {
#ifdef __CUDACC__
    (void)queue;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cp_async_shared_address(smem_dst)),
                 "l"(gmem_src), "r"(valid ? 16 : 0)
                 : "memory");
#else
    emu::issue_cp_async(queue, smem_dst, gmem_src, 16, valid ? 16 : 0);
#endif
}
// 4 bytes (.ca), or 4 zero bytes when not `valid`: per-row values such as a float vector.
__device__ __forceinline__ void cp_async_4_or_zero(CpAsyncQueue& queue, void* smem_dst, const void* gmem_src,
                                                   bool valid) {
#ifdef __CUDACC__
    (void)queue;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(cp_async_shared_address(smem_dst)),
                 "l"(gmem_src), "r"(valid ? 4 : 0)
                 : "memory");
#else
    emu::issue_cp_async(queue, smem_dst, gmem_src, 4, valid ? 4 : 0);
#endif
}

__device__ __forceinline__ void cp_async_commit_group(CpAsyncQueue& queue) {
#ifdef __CUDACC__
    (void)queue;
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#else
    queue.committed.push_back(std::move(queue.uncommitted));
    queue.uncommitted.clear();
#endif
}

// Waits until at most kPending of this thread's most recently committed groups are incomplete.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group(CpAsyncQueue& queue) {
    static_assert(kPending >= 0 && kPending <= 7, "wait_group takes 0..7");
#ifdef __CUDACC__
    (void)queue;
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#else
    while (queue.committed.size() > (size_t)kPending) {
        emu::land(queue.committed.front());
        queue.committed.pop_front();
    }
#endif
}

// Commits any uncommitted copies and waits for all of them.
__device__ __forceinline__ void cp_async_wait_all(CpAsyncQueue& queue) {
#ifdef __CUDACC__
    (void)queue;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#else
    cp_async_commit_group(queue);
    cp_async_wait_group<0>(queue);
#endif
}
