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
//   - a spin-wait on a phase that can never complete is reported as a deadlock (block_runner.cpp).
#pragma once
#ifndef __CUDACC__
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
    std::vector<BulkCopy> copies;  // copies that complete_tx on this barrier, not landed yet
};
// A warp's share of the warpgroup's wgmma operations (each warp computes its 16 rows of D).
struct WgmmaWarpState {
    bool fenced = false;  // a wgmma.fence since this warp's last wait_group
    // Accumulator arrays (lane 0's address) that issued, not yet executed operations write: a later
    // mma_async on the same accumulators chains on their results, as the hardware orders them.
    std::unordered_map<const void*, int> in_flight;
    std::vector<std::function<void()>> uncommitted;
    std::deque<std::vector<std::function<void()>>> committed;  // oldest group first
};

inline thread_local std::unordered_map<const void*, MbarrierState> t_mbarriers;
inline thread_local std::unordered_map<int, WgmmaWarpState> t_wgmma_warps;  // by warp index in block
// What each spin-waiting thread (by index in block) waits for: barrier and parity, for reports.
struct SpinTarget {
    const void* barrier;
    unsigned parity;
};
inline thread_local std::unordered_map<int, SpinTarget> t_spin_targets;

inline void reset_async_state() {
    t_mbarriers.clear();
    t_wgmma_warps.clear();
    t_spin_targets.clear();
}

}  // namespace emu
#endif
