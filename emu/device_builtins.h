// threadIdx, blockIdx, blockDim, gridDim, warpSize, __syncthreads and the warp operations
// (__syncwarp, shuffles, votes) for emulated kernels. The scheduler (block_runner.cpp) sets the
// index variables before it switches into a thread's fiber; barriers and warp operations yield to
// it until every participant has arrived.
#pragma once
#include <cstring>
#include <type_traits>

namespace emu {
// The emulator is linked into executables, never into a shared library: its thread-locals can use
// the local-exec model (the fastest, and also the one UBSan's null checks handle correctly: with the
// default model, the linker's relaxation of the TLS access leaves the check testing stale flags).
#define EMU_TLS thread_local __attribute__((tls_model("local-exec")))
extern EMU_TLS uint3 t_thread_idx;
extern EMU_TLS uint3 t_block_idx;
extern EMU_TLS dim3 t_block_dim;
extern EMU_TLS dim3 t_grid_dim;
extern EMU_TLS void* t_dynamic_shared;  // this block's dynamic shared memory (1024-byte aligned)
extern EMU_TLS size_t t_dynamic_shared_bytes;

// Block barrier. reduce: 0 plain, 1 count, 2 and, 3 or of the threads' predicates (returned).
enum class BarrierReduce { None, Count, And, Or };
int syncthreads(BarrierReduce reduce = BarrierReduce::None, int predicate = 0);

// A warp collective: waits until every lane named in `mask` calls it, then runs combine once with
// each participating lane's lane_data (nullptr for the others) and releases them. combine may be
// nullptr (__syncwarp). Lanes that do not exist (a partial last warp) are dropped from the mask.
using WarpCombine = void (*)(void* const lane_data[32], unsigned group);
void warp_collective(WarpCombine combine, unsigned mask, void* lane_data);
unsigned live_lanes();  // lanes of the caller's warp that have not exited
// For spin-waits (mbarrier try_wait loops): lets the block's other threads run before the caller
// polls again. new_wait: the first failed poll of a wait (the thread got somewhere since its last
// yield). A round where every unfinished thread only polled again in vain is reported as a deadlock.
void spin_yield(bool new_wait);
int linear_thread_index();  // the caller's index in its block (x fastest), for twins of warp ops
// An error a twin finds while a kernel runs (a missing wgmma.fence, an mbarrier misuse, a TMA copy
// into the wrong place): ends the block with this one-line report and fails the launch
// (cudaErrorLaunchFailure), like the scheduler's own reports. Called by a thread, it does not
// return; called from a warp collective's combine function, it returns and the combine must too.
void kernel_error(const char* format, ...) __attribute__((format(printf, 1, 2)));

enum class ShuffleKind : int { Index, Up, Down, Xor };
struct ShuffleSlot {
    unsigned long long value, result;
    ShuffleKind kind;
    int arg, width;
};
void combine_shuffle(void* const lane_data[32], unsigned group);
struct VoteSlot {
    int predicate;
    unsigned ballot;
};
void combine_vote(void* const lane_data[32], unsigned group);

template <typename T>
T shuffle(ShuffleKind kind, unsigned mask, T var, int arg, int width) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                  "warp shuffles move values of at most 8 bytes");
    ShuffleSlot slot{};
    std::memcpy(&slot.value, &var, sizeof(T));
    slot.kind = kind;
    slot.arg = arg;
    slot.width = width;
    warp_collective(&combine_shuffle, mask, &slot);
    T out;
    std::memcpy(&out, &slot.result, sizeof(T));
    return out;
}
inline unsigned vote(unsigned mask, int predicate) {
    VoteSlot slot{predicate != 0, 0};
    warp_collective(&combine_vote, mask, &slot);
    return slot.ballot;
}
}  // namespace emu

// Read by value, so that kernels cannot assign them.
namespace emu {
inline uint3 thread_idx() { return t_thread_idx; }
inline uint3 block_idx() { return t_block_idx; }
inline dim3 block_dim() { return t_block_dim; }
inline dim3 grid_dim() { return t_grid_dim; }
}  // namespace emu
#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
constexpr int warpSize = 32;

inline void __syncthreads() { emu::syncthreads(); }
inline int __syncthreads_count(int p) { return emu::syncthreads(emu::BarrierReduce::Count, p); }
inline int __syncthreads_and(int p) { return emu::syncthreads(emu::BarrierReduce::And, p); }
inline int __syncthreads_or(int p) { return emu::syncthreads(emu::BarrierReduce::Or, p); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_collective(nullptr, mask, nullptr); }

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
    return emu::shuffle(emu::ShuffleKind::Index, mask, var, src_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return emu::shuffle(emu::ShuffleKind::Up, mask, var, (int)delta, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return emu::shuffle(emu::ShuffleKind::Down, mask, var, (int)delta, width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
    return emu::shuffle(emu::ShuffleKind::Xor, mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return emu::vote(mask, predicate); }
inline int __any_sync(unsigned mask, int predicate) { return emu::vote(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
    return emu::vote(mask, !predicate) == 0;
}
// Not a synchronisation point: the lanes of the warp that have not exited.
inline unsigned __activemask() { return emu::live_lanes(); }
