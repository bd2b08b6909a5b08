// Shared-memory barriers with transaction counts (PTX mbarrier, sm_90), the synchronisation of
// Hopper's asynchronous copies: a producer announces how many bytes a phase will receive, the TMA
// unit counts them down as they land, and consumers wait for the phase to complete.
//
// The PTX ISA's model, which the emulated twin below follows:
//   mbarrier.init [bar], count       phase 0 begins; `count` arrivals expected, transaction count 0.
//   mbarrier.arrive [bar]            one arrival (pending count - 1).
//   mbarrier.arrive.expect_tx [bar], bytes
//                                    adds `bytes` to the transaction count, then arrives.
//   complete_tx (done by cp.async.bulk.tensor as its bytes land) subtracts the bytes.
//   The current phase completes when its pending arrivals and its transaction count are both
//   zero; the next phase then begins with `count` pending arrivals.
//   mbarrier.try_wait.parity [bar], P  true once the phase of parity P has completed, i.e. while the
//                                    current (incomplete) phase has the other parity.
// Usage: a consumer keeps the parity of the phase it waits for, flipping it each time round a ring
// of stages: mbarrier_wait(bar, parity); ... parity ^= 1.
//
// Emulated twin (emu/async_state.h): the barrier's state lives beside the block, keyed by address;
// copies that complete on it land when a thread polls it; a poll that cannot succeed yields to the
// other threads, and a block whose threads only poll in vain is reported as a deadlock (too many
// expect_tx bytes or a missing arrival ends there instead of hanging). Misuses end the launch with
// a report (emu::kernel_error): an arrival with none pending, more bytes landing than expect_tx
// announced, a TMA copy completing on a barrier whose init no fence.mbarrier_init followed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/common.h"
#include "kernels/shared_address.h"
#ifndef __CUDACC__
#include "emu/async_state.h"
#endif

#ifndef __CUDACC__
namespace emu {
inline MbarrierState& mbarrier_state(const void* bar, const char* what) {
    auto it = t_mbarriers.find(bar);
    if (it == t_mbarriers.end()) kernel_error("%s on %p, which is not an initialised mbarrier", what, bar);
    return it->second;
}
inline void mbarrier_advance(MbarrierState& s) {
    if (s.pending == 0 && s.tx == 0) {
        s.phase++;
        s.pending = s.expected;
        s.copies.clear();
    }
}
// Lands every copy that completes on this barrier (its bytes count down the transaction count).
inline void mbarrier_land_copies(MbarrierState& s) {
    for (BulkCopy& c : s.copies) {  // into shared memory as both proxies see it
        memcpy(c.dst, c.bytes.data(), c.bytes.size());
        memcpy(async_view() + smem_address(c.dst), c.bytes.data(), c.bytes.size());
        s.tx -= (long long)c.bytes.size();
    }
    s.copies.clear();
    mbarrier_advance(s);
}
}  // namespace emu
#endif

// Initialise (one thread): `count` arrivals complete each phase. Make it visible to the block (and
// the async proxy) with mbarrier_init_fence() and __syncthreads() before anyone uses it.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    smem_address(bar);  // checks that it is in shared memory
    if ((uintptr_t)bar % 8 != 0 || count == 0)
        emu::kernel_error("mbarrier.init needs an 8-byte aligned barrier and count >= 1");
    emu::MbarrierState s;
    s.expected = s.pending = count;
    emu::t_mbarriers[bar] = s;
    memset(bar, 0, 8);
#endif
}
__device__ __forceinline__ void mbarrier_init_fence() {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#elif !defined(__CUDACC__)
    for (auto& entry : emu::t_mbarriers) entry.second.init_fenced = true;
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    emu::MbarrierState& s = emu::mbarrier_state(bar, "mbarrier.arrive");
    if (s.pending == 0)
        emu::kernel_error("mbarrier.arrive on +%u with no arrival pending in the phase", smem_address(bar));
    s.pending--;
    emu::mbarrier_advance(s);
#endif
}
// The producer's arrival: `bytes` more will land in this phase (by TMA copies that name `bar`).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(HOPPER_DEVICE_CODE)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
                 : "memory");
#elif defined(__CUDACC__)
    hopper_unsupported();
#else
    emu::MbarrierState& s = emu::mbarrier_state(bar, "mbarrier.arrive.expect_tx");
    if (s.pending == 0)
        emu::kernel_error("mbarrier.arrive.expect_tx on +%u with no arrival pending", smem_address(bar));
    s.tx += bytes;
    s.pending--;
    emu::mbarrier_advance(s);
#endif
}

// One poll: has the phase of parity `parity` completed?
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
#if defined(HOPPER_DEVICE_CODE)
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_address(bar)), "r"(parity)
        : "memory");
    return done != 0;
#elif defined(__CUDACC__)
    hopper_unsupported();
    return false;
#else
    emu::MbarrierState& s = emu::mbarrier_state(bar, "mbarrier.try_wait.parity");
    emu::mbarrier_land_copies(s);
    if (s.tx < 0 && s.pending == 0)  // (negative counts are legal while arrivals are pending)
        emu::kernel_error("mbarrier at +%u received %lld more bytes than expect_tx announced",
                          smem_address(bar), -s.tx);
    return (s.phase & 1u) != (parity & 1u);
#endif
}
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifndef __CUDACC__
    bool first_poll = true;  // a new wait is progress; polling again in vain is not
#endif
    while (!mbarrier_try_wait_parity(bar, parity)) {
#ifndef __CUDACC__
        emu::t_spin_targets[emu::linear_thread_index()] = {bar, parity};
        emu::spin_yield(first_poll);
        first_poll = false;
        emu::t_spin_targets.erase(emu::linear_thread_index());
#endif
    }
}
