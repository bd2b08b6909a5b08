// The block scheduler (see block_runner.h) and the device-side entry points that yield to it.
#include "emu/cuda_emu.h"
#include "emu/block_runner.h"
#include "emu/async_state.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

namespace emu {

EMU_TLS uint3 t_thread_idx;
EMU_TLS uint3 t_block_idx;
EMU_TLS dim3 t_block_dim;
EMU_TLS dim3 t_grid_dim;
EMU_TLS void* t_dynamic_shared;
EMU_TLS size_t t_dynamic_shared_bytes;

namespace {
thread_local BlockRunner* t_runner;  // the runner whose fiber is executing, if any

#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kStackBytes = 256 << 10;  // instrumented frames are several times larger
#else
constexpr size_t kStackBytes = 64 << 10;
#endif

BlockRunner& running(const char* what) {
    if (!t_runner) {
        fprintf(stderr, "emu: %s called outside a kernel\n", what);
        abort();
    }
    return *t_runner;
}
}  // namespace

int syncthreads(BarrierReduce reduce, int predicate) {
    return running("__syncthreads()").syncthreads(reduce, predicate);
}
void warp_collective(WarpCombine combine, unsigned mask, void* lane_data) {
    running("a warp operation").warp_collective(combine, mask, lane_data);
}
unsigned live_lanes() { return running("__activemask()").live_lanes(); }
void spin_yield(bool new_wait) { running("a spin-wait").spin_yield(new_wait); }
int linear_thread_index() { return running("a thread index").thread_index(); }
void kernel_error(const char* format, ...) {
    char text[600];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    BlockRunner::for_this_thread().fail(text);
}

// No temporaries with heap memory here or in kernel_error: a fiber never resumed would leak them.
void BlockRunner::fail(const char* message) {
    if (failure_.empty()) failure_ = message;
    if (!current_) return;  // a combine function, on the scheduler's side
    current_->state = State::Failed;
    fibers_[current_ - threads_.data()]->yield();  // never resumed: the block ends
    abort();
}

BlockRunner& BlockRunner::for_this_thread() {
    static thread_local BlockRunner runner;
    return runner;
}

void BlockRunner::thread_main(void* p) {
    Thread* t = static_cast<Thread*>(p);
    t->runner->thread_body_(t->runner->thread_arg_);
}

int BlockRunner::syncthreads(BarrierReduce reduce, int predicate) {
    Thread* t = current_;
    t->state = State::AtBarrier;
    t->reduce = reduce;
    t->predicate = predicate != 0;
    fibers_[t - threads_.data()]->yield();
    return t->barrier_result;
}

void BlockRunner::warp_collective(WarpCombine combine, unsigned mask, void* lane_data) {
    Thread* t = current_;
    t->state = State::AtWarp;
    t->warp_mask = mask;
    t->combine = combine;
    t->warp_data = lane_data;
    fibers_[t - threads_.data()]->yield();
}

void BlockRunner::spin_yield(bool new_wait) {
    Thread* t = current_;
    t->state = State::Spinning;
    t->new_wait = new_wait;
    fibers_[t - threads_.data()]->yield();
}

unsigned BlockRunner::live_lanes() const {
    size_t first = (current_ - threads_.data()) / 32 * 32;
    unsigned mask = 0;
    for (size_t i = first; i < std::min(first + 32, threads_.size()); i++)
        if (threads_[i].state != State::Done) mask |= 1u << (i - first);
    return mask;
}

bool BlockRunner::run(const LaunchConfig& config, uint3 block_idx, void (*thread_body)(void*),
                      void* arg, unsigned long long shuffle_seed, std::string* report) {
    const dim3 b = config.block;
    const size_t n = (size_t)b.x * b.y * b.z;
    while (fibers_.size() < n) fibers_.push_back(std::make_unique<Fiber>(kStackBytes));
    threads_.resize(n);
    order_.resize(n);
    std::iota(order_.begin(), order_.end(), 0);
    thread_body_ = thread_body;
    thread_arg_ = arg;
    failure_.clear();
    for (size_t i = 0; i < n; i++) {
        Thread& t = threads_[i];
        t = Thread{};
        t.idx = make_uint3(i % b.x, i / b.x % b.y, i / ((size_t)b.x * b.y));
        t.state = State::Runnable;
        t.runner = this;
        fibers_[i]->reset(&thread_main, &t);
    }
    t_block_idx = block_idx;
    std::mt19937_64 rng(shuffle_seed);

    auto describe_block = [&] {
        char where[160];
        snprintf(where, sizeof where, "emu: kernel '%s' block (%u,%u,%u): ", config.kernel_name,
                 block_idx.x, block_idx.y, block_idx.z);
        return std::string(where);
    };
    for (;;) {
        if (shuffle_seed) std::shuffle(order_.begin(), order_.end(), rng);
        t_runner = this;
        bool progressed = false;  // some thread did more than poll in vain
        for (int i : order_) {
            Thread& t = threads_[i];
            if (t.state != State::Runnable && t.state != State::Spinning) continue;
            const bool was_spinning = t.state == State::Spinning;
            t.state = State::Runnable;
            current_ = &t;
            t_thread_idx = t.idx;
            fibers_[i]->resume();
            if (!failure_.empty()) {  // a twin's error: the block stops here
                t_runner = nullptr;
                current_ = nullptr;
                *report = describe_block() + describe(t) + ": " + failure_;
                return false;
            }
            if (fibers_[i]->finished()) t.state = State::Done;
            if (!(was_spinning && t.state == State::Spinning && !t.new_wait)) progressed = true;
        }
        t_runner = nullptr;
        current_ = nullptr;
        Progress p = release_waiting(report, progressed);
        if (p == Progress::Finished) {
            if (copies_in_flight() == 0) return true;
            *report = describe_block() + "exited with " + std::to_string(copies_in_flight()) +
                      " TMA copies in flight (no thread waited on their mbarrier's phase)";
            return false;
        }
        if (p == Progress::Failed) {
            *report = describe_block() + *report;
            return false;
        }
    }
}

std::string BlockRunner::describe(const Thread& t) const {
    char text[64];
    snprintf(text, sizeof text, "thread (%u,%u,%u)", t.idx.x, t.idx.y, t.idx.z);
    return text;
}

// Called when no thread can run: every thread is done or waits. Releases the warp groups and
// barriers that are complete, or explains why none can be.
BlockRunner::Progress BlockRunner::release_waiting(std::string* report, bool progressed) {
    size_t done = 0, at_barrier = 0, at_warp = 0, spinning = 0;
    for (const Thread& t : threads_) {
        done += t.state == State::Done;
        at_barrier += t.state == State::AtBarrier;
        at_warp += t.state == State::AtWarp;
        spinning += t.state == State::Spinning;
    }
    if (done == threads_.size()) return Progress::Finished;
    if (at_warp > 0) {
        bool released = false;
        if (!release_warps(report, &released)) return Progress::Failed;
        if (released) return Progress::Continue;
    }
    if (spinning > 0) {
        if (progressed) return Progress::Continue;
        const Thread* spinner = nullptr;
        for (const Thread& t : threads_)
            if (t.state == State::Spinning) { spinner = &t; break; }
        char text[400];
        snprintf(text, sizeof text,
                 "deadlock: %zu threads spin-wait (first: %s, e.g. on an mbarrier phase that never "
                 "completes) while %zu wait at __syncthreads(), %zu at warp operations and %zu exited",
                 spinning, describe(*spinner).c_str(), at_barrier, at_warp, done);
        *report = text;
        // The mbarriers' states (by shared-memory offset), to see which phase is stuck.
        for (const auto& [bar, state] : t_mbarriers) {
            snprintf(text, sizeof text, "; mbarrier at +%ld: phase %u, %u of %u arrivals pending, %lld bytes "
                     "pending", (long)(static_cast<const char*>(bar) - static_cast<const char*>(t_dynamic_shared)),
                     state.phase, state.pending, state.expected, state.tx);
            *report += text;
        }
        int shown = 0;  // and what the first spinning threads wait for
        for (const Thread& t : threads_) {
            if (t.state != State::Spinning || shown == 4) continue;
            auto it = t_spin_targets.find((int)(&t - threads_.data()));
            if (it == t_spin_targets.end()) continue;
            snprintf(text, sizeof text, "; %s waits for parity %u of the mbarrier at +%ld", describe(t).c_str(),
                     it->second.parity,
                     (long)(static_cast<const char*>(it->second.barrier) - static_cast<const char*>(t_dynamic_shared)));
            *report += text;
            shown++;
        }
        return Progress::Failed;
    }
    if (at_warp == 0 && done == 0) {
        release_barrier();
        return Progress::Continue;
    }
    const Thread* exited = nullptr;
    const Thread* waiting = nullptr;
    for (const Thread& t : threads_) {
        if (t.state == State::Done && !exited) exited = &t;
        if (t.state == State::AtBarrier && !waiting) waiting = &t;
    }
    char text[400];
    if (at_warp == 0) {
        snprintf(text, sizeof text,
                 "__syncthreads() reached by %zu of %zu threads; the other %zu exited without "
                 "reaching it (first: %s), a divergent barrier",
                 at_barrier, threads_.size(), done, describe(*exited).c_str());
    } else {
        const Thread* warp_waiter = nullptr;
        for (const Thread& t : threads_)
            if (t.state == State::AtWarp) { warp_waiter = &t; break; }
        snprintf(text, sizeof text,
                 "deadlock: %zu threads wait at __syncthreads() (first: %s) while %zu wait at warp "
                 "operations whose lanes never all arrive (first: %s, mask 0x%08x); %zu exited",
                 at_barrier, waiting ? describe(*waiting).c_str() : "none", at_warp,
                 describe(*warp_waiter).c_str(), warp_waiter->warp_mask, done);
    }
    *report = text;
    return Progress::Failed;
}

// Releases every warp group whose lanes have all arrived at the same warp operation.
bool BlockRunner::release_warps(std::string* report, bool* released) {
    const size_t n = threads_.size();
    for (size_t first = 0; first < n; first += 32) {
        const size_t lanes = std::min<size_t>(32, n - first);
        const unsigned existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        for (size_t lane = 0; lane < lanes; lane++) {
            Thread& t = threads_[first + lane];
            if (t.state != State::AtWarp) continue;
            const unsigned group = t.warp_mask & existing;
            char text[300];
            if (!(group >> lane & 1)) {
                snprintf(text, sizeof text,
                         "%s (lane %zu) calls a warp operation with mask 0x%08x, which does not "
                         "include its own lane",
                         describe(t).c_str(), lane, t.warp_mask);
                *report = text;
                return false;
            }
            bool ready = true;
            void* data[32] = {};
            for (size_t j = 0; j < lanes; j++) {
                if (!(group >> j & 1)) continue;
                const Thread& o = threads_[first + j];
                if (o.state == State::Done) {
                    snprintf(text, sizeof text,
                             "%s exited, but lane %zu of its warp (%s) waits for it at a warp "
                             "operation with mask 0x%08x",
                             describe(o).c_str(), lane, describe(t).c_str(), t.warp_mask);
                    *report = text;
                    return false;
                }
                if (o.state != State::AtWarp || (o.warp_mask & existing) != group ||
                    o.combine != t.combine)
                    ready = false;
                data[j] = o.warp_data;
            }
            if (!ready) continue;
            if (t.combine) t.combine(data, group);
            if (!failure_.empty()) {
                *report = describe(t) + "'s warp: " + failure_;
                return false;
            }
            for (size_t j = 0; j < lanes; j++)
                if (group >> j & 1) threads_[first + j].state = State::Runnable;
            *released = true;
        }
    }
    return true;
}

// Every thread waits at __syncthreads(): compute the predicate reductions and let all go.
void BlockRunner::release_barrier() {
    int count = 0;
    for (const Thread& t : threads_) count += t.predicate;
    const int all = count == (int)threads_.size(), any = count > 0;
    for (Thread& t : threads_) {
        switch (t.reduce) {
            case BarrierReduce::None: t.barrier_result = 0; break;
            case BarrierReduce::Count: t.barrier_result = count; break;
            case BarrierReduce::And: t.barrier_result = all; break;
            case BarrierReduce::Or: t.barrier_result = any; break;
        }
        t.state = State::Runnable;
    }
}

}  // namespace emu
