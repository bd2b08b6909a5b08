// State of the asynchronous Hopper units, as the emulated twins in kernels/mbarrier.h, kernels/tma.h
// and kernels/wgmma.h model them: mbarrier objects (arrival counts, transaction bytes, phase) with the
// TMA copies that complete on them, and each warp's wgmma groups in flight. It lives beside the
// block, not in shared memory, and is cleared whenever an OS thread starts a block (grid_launch.cpp),
// so nothing issued by one block survives into another.
//
// How the twins make ordering bugs visible:
//   - a TMA copy poisons its destination (all bits set: NaN in bf16/fp32) when issued and writes the
//     data only when a thread polls the mbarrier it completes on and finds the phase complete;
//   - a wgmma poisons its accumulator registers when issued and writes the products only at the
//     wgmma.wait_group that completes its group, reading shared memory at that time;
//   - the async proxy (wgmma's operand reads) has its own view of shared memory: TMA copies land in
//     both, but ordinary stores reach it only through fence.proxy.async (a snapshot of the block's
//     shared memory), so a missing proxy fence reads stale or poisoned bytes;
//   - a TMA copy completing on an mbarrier whose init no fence.mbarrier_init followed, a block that
//     exits with copies in flight, and a spin-wait on a phase that can never complete end the
//     launch with a report (emu::kernel_error, block_runner.cpp).
#pragma once
#ifndef __CUDACC__
#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

namespace emu {

// One bulk copy in flight: its destination and the bytes it will write there.
struct BulkCopy {
    void* dst;
    std::vector<unsigned char> bytes;
};
struct MbarrierState {
    unsigned expected = 0;  // arrivals per phase (the init count)
    unsigned pending = 0;   // arrivals still missing in the current phase
    long long tx = 0;       // transaction bytes expected but not yet arrived in the current phase
    unsigned phase = 0;     // completed phases; the current phase's parity is phase & 1
    bool init_fenced = false;      // a fence.mbarrier_init since the init: the TMA unit may use it
    std::vector<BulkCopy> copies;  // copies that complete_tx on this barrier, not landed yet
};
// A warp's share of the warpgroup's wgmma operations (each warp computes its 16 rows of D).
struct WgmmaWarpState {
    bool fenced = false;  // a wgmma.fence since this warp's last wait_group
    size_t issued = 0;    // mma_async operations issued so far (checked against the warpgroup's)
    // Accumulator arrays (lane 0's address) that issued, not yet executed operations write: a later
    // mma_async on the same accumulators chains on their results, as the hardware orders them.
    std::unordered_map<const void*, int> in_flight;
    std::vector<std::function<void()>> uncommitted;
    std::deque<std::vector<std::function<void()>>> committed;  // oldest group first
};

// What the four warps of a warpgroup must agree on, mma_async by mma_async.
struct WgmmaSignature {
    int n, scale_d, trans_a, trans_b, a_in_registers;
    uint64_t desc_a, desc_b;
    bool operator==(const WgmmaSignature& o) const {
        return n == o.n && scale_d == o.scale_d && trans_a == o.trans_a && trans_b == o.trans_b &&
               a_in_registers == o.a_in_registers && desc_a == o.desc_a && desc_b == o.desc_b;
    }
};

inline thread_local std::unordered_map<const void*, MbarrierState> t_mbarriers;
inline thread_local std::unordered_map<int, WgmmaWarpState> t_wgmma_warps;  // by warp index in block
inline thread_local std::unordered_map<int, std::vector<WgmmaSignature>> t_wgmma_issued;  // by warpgroup
// What each spin-waiting thread (by index in block) waits for: barrier and parity, for reports.
struct SpinTarget {
    const void* barrier;
    unsigned parity;
};
inline thread_local std::unordered_map<int, SpinTarget> t_spin_targets;

// The async proxy's view of the block's dynamic shared memory (empty until first used; then as the
// block started: all bits set).
inline thread_local std::vector<unsigned char> t_async_view;
inline unsigned char* async_view() {
    if (t_async_view.size() != t_dynamic_shared_bytes) t_async_view.assign(t_dynamic_shared_bytes, 0xff);
    return t_async_view.data();
}

inline void reset_async_state() {
    t_mbarriers.clear();
    t_wgmma_warps.clear();
    t_wgmma_issued.clear();
    t_spin_targets.clear();
    t_async_view.clear();
}
// Copies issued but never landed (no thread waited for them), for the end-of-block check.
inline size_t copies_in_flight() {
    size_t n = 0;
    for (const auto& entry : t_mbarriers) n += entry.second.copies.size();
    return n;
}

}  // namespace emu
#endif
