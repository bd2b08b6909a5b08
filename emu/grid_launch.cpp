// run_grid (launch.h): checks a launch's configuration against a compute-capability-9.0 device's
// limits, then runs its blocks in parallel over the cores (OpenMP), each on its OS thread's
// BlockRunner, with that thread's dynamic shared memory. The first error found stops the grid.
#include "emu/cuda_emu.h"
#include "emu/block_runner.h"
#include "emu/runtime_state.h"
#include "emu/async_state.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace emu {

namespace {
std::atomic<unsigned long long> g_shuffle_seed{[] {
    const char* env = getenv("EMU_SHUFFLE");
    return env ? strtoull(env, nullptr, 10) : 0ull;
}()};
std::atomic<unsigned long long> g_launch_count{0};  // launches since start-up: keys the shuffled order
std::atomic<unsigned long long> g_counted_launches{0};  // launch_count(): reset by reset_counters()
std::atomic<unsigned long long> g_graph_kernels{0}, g_graph_launches{0};

void count_one_launch(const char* name) {
    g_counted_launches++;
    if (replaying_graph()) g_graph_kernels++;
    if (getenv("EMU_TRACE_LAUNCHES")) fprintf(stderr, "emu: launch %s%s\n", name, replaying_graph() ? " (graph)" : "");
}

unsigned long long mix(unsigned long long x) {  // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// This OS thread's dynamic shared memory, exactly as large as the launch asks, so that ASan
// reports an access past its end; 1024-byte aligned, so that the swizzle patterns of TMA and
// wgmma (functions of the shared-memory address bits) match a GPU's.
struct DynamicShared {
    void* data = nullptr;
    size_t bytes = 0;
    bool allocated = false;
    void* get(size_t want) {
        if (allocated && bytes == want) return data;
        free(data);
        if (posix_memalign(&data, 1024, want ? want : 1) != 0) {
            fprintf(stderr, "emu: cannot allocate %zu bytes of shared memory\n", want);
            abort();
        }
        bytes = want;
        allocated = true;
        return data;
    }
    ~DynamicShared() { free(data); }
};
thread_local DynamicShared t_shared;

cudaError_t config_error(const LaunchConfig& c, cudaError_t err, const char* why) {
    char text[400];
    snprintf(text, sizeof text, "emu: kernel '%s' not launched (grid %u,%u,%u block %u,%u,%u, %zu "
             "bytes dynamic shared memory): %s", c.kernel_name, c.grid.x, c.grid.y, c.grid.z,
             c.block.x, c.block.y, c.block.z, c.dynamic_shared_bytes, why);
    fprintf(stderr, "%s\n", text);
    record_error(err, text);
    return err;
}
}  // namespace

void set_shuffle_seed(unsigned long long seed) { g_shuffle_seed = seed; }

unsigned long long launch_count() { return g_counted_launches.load(); }
unsigned long long graph_launch_count() { return g_graph_launches.load(); }
unsigned long long graph_kernel_count() { return g_graph_kernels.load(); }
void count_library_launch() { count_one_launch("(library)"); }
void count_graph_launch() { g_graph_launches++; }
void reset_launch_count() { g_counted_launches = 0, g_graph_kernels = 0, g_graph_launches = 0; }

cudaError_t check_launch(const LaunchConfig& c) {
    const dim3 g = c.grid, b = c.block;
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (threads == 0 || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
        return config_error(c, cudaErrorInvalidConfiguration,
                            "a block has 1 to 1024 threads, at most 1024 x 1024 x 64");
    if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        return config_error(c, cudaErrorInvalidConfiguration,
                            "grid dimensions are 1 to 2^31-1 x 65535 x 65535");
    if (c.dynamic_shared_bytes > max_dynamic_shared_bytes(c.kernel))
        return config_error(c, cudaErrorInvalidValue,
                            "too much dynamic shared memory; above 48 KiB, raise the limit with "
                            "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                            "bytes)");
    return cudaSuccess;
}

cudaError_t run_grid(const LaunchConfig& c, void (*thread_body)(void*), void* arg) {
    if (cudaError_t err = check_launch(c)) return err;
    const dim3 g = c.grid, b = c.block;
    const long long blocks = (long long)g.x * g.y * g.z;
    const unsigned long long seed = g_shuffle_seed.load();
    const unsigned long long launch = g_launch_count++;
    count_one_launch(c.kernel_name);
    std::atomic<bool> failed{false};
    std::mutex report_lock;
    std::string report;
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
    for (long long i = 0; i < blocks; i++) {
        if (failed.load(std::memory_order_relaxed)) continue;
        t_grid_dim = g;
        t_block_dim = b;
        t_dynamic_shared = t_shared.get(c.dynamic_shared_bytes);
        t_dynamic_shared_bytes = c.dynamic_shared_bytes;
        memset(t_dynamic_shared, 0xff, c.dynamic_shared_bytes);  // NaN: uninitialised shared memory
        reset_async_state();  // no mbarrier, TMA copy or wgmma of an earlier block survives
        const uint3 block_idx = make_uint3(i % g.x, i / g.x % g.y, i / ((long long)g.x * g.y));
        const unsigned long long block_seed = seed ? mix(seed ^ mix(launch * 0x100000001ull + i)) | 1 : 0;
        std::string block_report;
        if (!BlockRunner::for_this_thread().run(c, block_idx, thread_body, arg, block_seed,
                                                &block_report)) {
            std::lock_guard<std::mutex> hold(report_lock);
            if (!failed) report = block_report;
            failed = true;
        }
    }
    if (failed) {
        fprintf(stderr, "%s\n", report.c_str());
        record_error(cudaErrorLaunchFailure, report);
        return cudaErrorLaunchFailure;
    }
    return cudaSuccess;
}

}  // namespace emu
