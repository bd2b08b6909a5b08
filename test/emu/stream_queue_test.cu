// The emulator's queued streams (emu/stream_queue.h, EMU_STREAMS): work runs at synchronisations in
// a seeded random order that honours stream order, event waits and the legacy stream, and nothing
// else; synchronising a stream runs its work and what it waits for; a captured graph replays in any
// order its stream and event edges allow.
#include <set>
#include <string>
#include <vector>

#include "emu/stream_queue.h"
#include "kernels/common.h"
#include "test/test.h"

namespace {

__global__ void set_value(int* x, int value) { *x = value; }
__global__ void copy_value(int* to, const int* from) { *to = *from; }
// Appends `id` to the log (log[0] counts the entries).
__global__ void note(int* log, int id) { log[1 + atomicAdd(log, 1)] = id; }

int read(const int* device) {
    int value = 0;
    CHECK(cudaMemcpy(&value, device, sizeof value, cudaMemcpyDeviceToHost) == cudaSuccess);
    return value;
}
std::vector<int> read_log(const int* log) {
    std::vector<int> entries(1 + read(log));
    CHECK(cudaMemcpy(entries.data(), log, entries.size() * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
    return std::vector<int>(entries.begin() + 1, entries.end());
}
int position(const std::vector<int>& log, int id) {
    for (size_t i = 0; i < log.size(); i++)
        if (log[i] == id) return (int)i;
    return -1;
}

struct Streams {
    cudaStream_t a, b;
    cudaEvent_t event;
    int *x, *y;
    Streams() {
        CHECK(cudaStreamCreate(&a) == cudaSuccess && cudaStreamCreate(&b) == cudaSuccess);
        CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess);
        CHECK(cudaMalloc(&x, 64 * sizeof(int)) == cudaSuccess && cudaMalloc(&y, 64 * sizeof(int)) == cudaSuccess);
        CHECK(cudaMemset(x, 0, 64 * sizeof(int)) == cudaSuccess && cudaMemset(y, 0, 64 * sizeof(int)) == cudaSuccess);
    }
    ~Streams() {
        emu::set_stream_seed(0);
        cudaFree(x), cudaFree(y), cudaEventDestroy(event), cudaStreamDestroy(a), cudaStreamDestroy(b);
    }
};

// Stream a writes x = 1, stream b copies x into y: without a wait b may read x before or after the
// write, and over a few seeds it does both; waiting on an event recorded after the write, never before.
TEST(two_streams_run_in_either_order_unless_one_waits) {
    for (bool wait : {false, true}) {
        std::set<int> seen;
        for (unsigned long long seed = 1; seed <= 16; seed++) {
            Streams s;
            emu::set_stream_seed(seed);
            LAUNCH(set_value, 1, 1, 0, s.a, s.x, 1);
            CHECK(cudaEventRecord(s.event, s.a) == cudaSuccess);
            if (wait) CHECK(cudaStreamWaitEvent(s.b, s.event, 0) == cudaSuccess);
            LAUNCH(copy_value, 1, 1, 0, s.b, s.y, s.x);
            CHECK(cudaDeviceSynchronize() == cudaSuccess);
            seen.insert(read(s.y));
        }
        if (wait) CHECK_MSG(seen == std::set<int>{1}, "with the wait, y was %zu values", seen.size());
        if (!wait) CHECK_MSG(seen == (std::set<int>{0, 1}), "without the wait, y was %zu values", seen.size());
    }
}

// One stream's work runs in the order issued, whatever the seed; without EMU_STREAMS work runs when
// issued.
TEST(a_stream_keeps_its_order) {
    for (unsigned long long seed = 0; seed <= 8; seed++) {
        Streams s;
        emu::set_stream_seed(seed);
        for (int i = 0; i < 6; i++) LAUNCH(note, 1, 1, 0, i % 2 ? s.a : s.b, s.x, i);
        if (seed == 0) CHECK(read(s.x) == 6);  // already run
        CHECK(cudaStreamSynchronize(s.a) == cudaSuccess && cudaStreamSynchronize(s.b) == cudaSuccess);
        const std::vector<int> log = read_log(s.x);
        CHECK(log.size() == 6);
        for (int i = 2; i < 6; i++) CHECK_MSG(position(log, i - 2) < position(log, i), "seed %llu: %d", seed, i);
    }
}

// Synchronising a stream runs its work and what it waits for, not another stream's; queries say what
// is still queued; the legacy stream (a synchronous copy) waits for every blocking stream.
TEST(synchronising_runs_what_it_waits_for) {
    Streams s;
    emu::set_stream_seed(3);
    LAUNCH(set_value, 1, 1, 0, s.a, s.x, 7);
    LAUNCH(set_value, 1, 1, 0, s.b, s.y, 8);
    CHECK(cudaStreamQuery(s.a) == cudaErrorNotReady && cudaStreamQuery(s.b) == cudaErrorNotReady);
    CHECK(cudaStreamSynchronize(s.a) == cudaSuccess);
    CHECK(cudaStreamQuery(s.a) == cudaSuccess && cudaStreamQuery(s.b) == cudaErrorNotReady);
    CHECK(cudaEventRecord(s.event, s.b) == cudaSuccess);
    CHECK(cudaEventQuery(s.event) == cudaErrorNotReady);
    CHECK(cudaStreamWaitEvent(s.a, s.event, 0) == cudaSuccess);
    LAUNCH(copy_value, 1, 1, 0, s.a, s.x + 1, s.y);
    CHECK(cudaStreamSynchronize(s.a) == cudaSuccess);  // runs b's write first: a waits for it
    CHECK(cudaStreamQuery(s.b) == cudaSuccess && cudaEventQuery(s.event) == cudaSuccess);
    LAUNCH(set_value, 1, 1, 0, s.b, s.y + 1, 9);
    CHECK(read(s.x) == 7 && read(s.x + 1) == 8 && read(s.y + 1) == 9);  // cudaMemcpy: the legacy stream
    CHECK(cudaStreamQuery(s.b) == cudaSuccess);
}

// Event times are those of the work before each record, once it has run; before that, not ready.
TEST(event_timing_waits_for_the_records) {
    Streams s;
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess);
    emu::set_stream_seed(5);
    CHECK(cudaEventRecord(start, s.a) == cudaSuccess);
    LAUNCH(set_value, 1, 1, 0, s.a, s.x, 1);
    CHECK(cudaEventRecord(stop, s.a) == cudaSuccess);
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaErrorNotReady);
    CHECK(cudaEventSynchronize(stop) == cudaSuccess);
    CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms >= 0 && ms < 10000);
    CHECK(cudaEventDestroy(start) == cudaSuccess && cudaEventDestroy(stop) == cudaSuccess);
}

// An async copy from pageable memory reads its source when issued (the driver stages it); from pinned
// memory when it runs.
TEST(pageable_copies_read_their_source_when_issued) {
    Streams s;
    int* pinned;
    CHECK(cudaMallocHost(&pinned, sizeof(int)) == cudaSuccess);
    emu::set_stream_seed(2);
    int pageable = 4;
    *pinned = 4;
    CHECK(cudaMemcpyAsync(s.x, &pageable, sizeof(int), cudaMemcpyHostToDevice, s.a) == cudaSuccess);
    CHECK(cudaMemcpyAsync(s.y, pinned, sizeof(int), cudaMemcpyHostToDevice, s.a) == cudaSuccess);
    pageable = *pinned = 5;
    CHECK(cudaStreamSynchronize(s.a) == cudaSuccess);
    CHECK(read(s.x) == 4 && read(s.y) == 5);
    CHECK(cudaFreeHost(pinned) == cudaSuccess);
}

// A graph captured from two streams (forked and joined through events) replays in any order its edges
// allow: each stream's nodes in order, the join last; over a few seeds, in more than one order.
TEST(captured_graph_replays_in_orders_its_edges_allow) {
    Streams s;
    cudaEvent_t join;
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(s.a, cudaStreamCaptureModeGlobal) == cudaSuccess);
    LAUNCH(note, 1, 1, 0, s.a, s.x, 0);
    CHECK(cudaEventRecord(s.event, s.a) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s.b, s.event, 0) == cudaSuccess);
    LAUNCH(note, 1, 1, 0, s.a, s.x, 1);
    LAUNCH(note, 1, 1, 0, s.a, s.x, 2);
    LAUNCH(note, 1, 1, 0, s.b, s.x, 3);
    LAUNCH(note, 1, 1, 0, s.b, s.x, 4);
    CHECK(cudaEventRecord(join, s.b) == cudaSuccess);
    CHECK(cudaStreamWaitEvent(s.a, join, 0) == cudaSuccess);
    LAUNCH(note, 1, 1, 0, s.a, s.x, 5);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamEndCapture(s.a, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    std::set<std::vector<int>> orders;
    for (unsigned long long seed = 0; seed <= 12; seed++) {
        emu::set_stream_seed(seed);
        CHECK(cudaMemsetAsync(s.x, 0, sizeof(int), s.a) == cudaSuccess);
        CHECK(cudaGraphLaunch(exec, s.a) == cudaSuccess);
        CHECK(cudaStreamSynchronize(s.a) == cudaSuccess);
        const std::vector<int> log = read_log(s.x);
        if (seed == 0) CHECK(log == (std::vector<int>{0, 1, 2, 3, 4, 5}));  // issue order
        CHECK(log.size() == 6 && log[0] == 0 && log[5] == 5);
        CHECK(position(log, 1) < position(log, 2) && position(log, 3) < position(log, 4));
        orders.insert(log);
    }
    CHECK_MSG(orders.size() > 2, "%zu orders", orders.size());
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess && cudaGraphDestroy(graph) == cudaSuccess);
    CHECK(cudaEventDestroy(join) == cudaSuccess);
}

}  // namespace
