// Runs the threads of one block as fibers on the calling OS thread, switching between them at
// barriers and warp operations. A barrier that cannot complete (some threads exited, or lanes wait
// for each other in different places) ends the block with a report instead of hanging. With a
// shuffle seed, each barrier phase runs the block's threads in a random order, so that a missing
// barrier shows up as a wrong result. Each OS thread has one BlockRunner whose fiber stacks are
// reused by every block it runs.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "emu/fiber.h"

namespace emu {

class BlockRunner {
  public:
    static BlockRunner& for_this_thread();

    // Runs block `block_idx` of the launch: thread_body(arg) once per thread. Returns false with
    // *report set when an error stopped the block.
    bool run(const LaunchConfig& config, uint3 block_idx, void (*thread_body)(void*), void* arg,
             unsigned long long shuffle_seed, std::string* report);

    // For the device-side functions (device_builtins.h), called from inside a thread's fiber.
    int syncthreads(BarrierReduce reduce, int predicate);
    void warp_collective(WarpCombine combine, unsigned mask, void* lane_data);
    unsigned live_lanes() const;
    // A spin-wait's poll that found its condition false: lets the other threads run, then
    // returns. A round in which every remaining thread only polls in vain is a deadlock.
    void spin_yield(bool new_wait);
    int thread_index() const { return (int)(current_ - threads_.data()); }
    // A twin's error (emu::kernel_error): the block ends with `message`. From a thread's fiber
    // the thread stops for good; from a warp collective's combine (scheduler side) it returns.
    void fail(const char* message);

  private:
    enum class State : unsigned char { Runnable, AtBarrier, AtWarp, Spinning, Done, Failed };
    struct Thread {
        uint3 idx;
        State state;
        BarrierReduce reduce;
        int predicate, barrier_result;
        unsigned warp_mask;
        bool new_wait;  // its spin_yield started a wait (it made progress since the last one)
        WarpCombine combine;
        void* warp_data;
        BlockRunner* runner;
    };
    enum class Progress { Continue, Finished, Failed };

    static void thread_main(void* thread);
    Progress release_waiting(std::string* report, bool progressed);
    bool release_warps(std::string* report, bool* released);
    void release_barrier();
    std::string describe(const Thread& t) const;

    std::vector<std::unique_ptr<Fiber>> fibers_;
    std::vector<Thread> threads_;
    std::vector<int> order_;
    Thread* current_ = nullptr;
    void (*thread_body_)(void*) = nullptr;
    void* thread_arg_ = nullptr;
    std::string failure_;  // the first kernel_error() of the block being run
};

}  // namespace emu
