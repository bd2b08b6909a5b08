// The queued streams of EMU_STREAMS (stream_queue.h): every piece of work gets an id in issue order
// and the ids it waits for; a drain collects what must run (the targets, every communication, and what
// they wait for, transitively), then runs one of the ready ones at random until none is left.
#include "emu/cuda_emu.h"
#include "emu/runtime_state.h"
#include "emu/stream_queue.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <unordered_map>
#include <utility>

namespace emu {
namespace {

using Id = unsigned long long;

struct Work {
    std::string name;
    std::function<void()> run;
    bool communication = false;
    std::vector<Id> after;  // ids this work waits for (those still queued count)
};

unsigned long long mix(unsigned long long x) {  // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The seed from EMU_STREAMS, mixed with the MPI rank (from the launcher's environment) so that the
// ranks of a run draw different orders.
unsigned long long seed_from_environment() {
    const char* env = getenv("EMU_STREAMS");
    if (!env || !*env) return 0;
    unsigned long long seed = strtoull(env, nullptr, 10);
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
        if (const char* rank = getenv(name)) return seed ^ mix(strtoull(rank, nullptr, 10) + 1);
    return seed;
}

struct Queue {
    unsigned long long seed = seed_from_environment();
    std::mt19937_64 rng{seed};
    std::map<Id, Work> queued;  // in issue order
    // What the next work issued to a stream waits for (the legacy stream's under nullptr).
    std::unordered_map<cudaStream_t, std::vector<Id>> next_after;
    Id last_communication = 0, next_id = 1;
    bool draining = false;
};
Queue& queue() {
    static Queue* q = new Queue;  // never destroyed: exit handlers may still drain it
    return *q;
}

bool is_legacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }
cudaStream_t key(cudaStream_t s) { return is_legacy(s) ? nullptr : s; }
// Whether the stream synchronises with the legacy stream (every stream but a non-blocking one).
bool blocking(cudaStream_t s) { return is_legacy(s) || s == cudaStreamPerThread || s->blocking; }

void append_queued(std::vector<Id>* to, const std::vector<Id>& ids) {
    for (Id id : ids)
        if (queue().queued.count(id)) to->push_back(id);
}

// Adds work to the queue: after `also`, and (when `follows_stream`) after the stream's earlier work;
// the stream's next work then waits for it. Returns its id.
Id add(cudaStream_t stream, std::string name, std::function<void()> run, WorkKind kind, const std::vector<Id>& also,
       bool follows_stream) {
    Queue& q = queue();
    const Id id = q.next_id++;
    Work w{std::move(name), std::move(run), kind == WorkKind::communication, {}};
    append_queued(&w.after, also);
    if (follows_stream) {
        if (is_legacy(stream)) {  // after every blocking stream's work
            for (const auto& [s, ids] : q.next_after)
                if (blocking(s)) append_queued(&w.after, ids);
        } else {
            append_queued(&w.after, q.next_after[stream]);
            if (blocking(stream)) append_queued(&w.after, q.next_after[nullptr]);
        }
    }
    if (w.communication) {
        append_queued(&w.after, {q.last_communication});
        q.last_communication = id;
    }
    q.queued.emplace(id, std::move(w));
    if (follows_stream) q.next_after[key(stream)] = {id};
    return id;
}

// Everything that must run for `targets` to have run: the targets, every queued communication, and
// what each waits for, transitively.
std::vector<Id> needed_for(const std::vector<Id>& targets) {
    Queue& q = queue();
    std::vector<Id> stack, needed;
    append_queued(&stack, targets);
    for (const auto& [id, w] : q.queued)
        if (w.communication) stack.push_back(id);
    std::unordered_map<Id, bool> seen;
    while (!stack.empty()) {
        const Id id = stack.back();
        stack.pop_back();
        if (seen[id]) continue;
        seen[id] = true;
        needed.push_back(id);
        append_queued(&stack, q.queued.at(id).after);
    }
    return needed;
}

// Runs `needed` (closed under waiting), each once all it waits for has run, picking at random among
// the ready ones.
void run_in_random_order(const std::vector<Id>& needed) {
    Queue& q = queue();
    std::unordered_map<Id, int> waiting;  // how many queued ids each still waits for
    std::unordered_map<Id, std::vector<Id>> waiters;
    std::vector<Id> ready;
    for (Id id : needed) {
        std::vector<Id> after;
        append_queued(&after, q.queued.at(id).after);
        waiting[id] = (int)after.size();
        for (Id a : after) waiters[a].push_back(id);
    }
    for (const auto& [id, w] : q.queued)  // in issue order, so that a seed gives one order
        if (waiting.count(id) && waiting[id] == 0) ready.push_back(id);
    while (!ready.empty()) {
        const size_t pick = q.rng() % ready.size();
        const Id id = ready[pick];
        ready[pick] = ready.back();
        ready.pop_back();
        auto it = q.queued.find(id);
        std::function<void()> run = std::move(it->second.run);
        q.queued.erase(it);
        if (run) run();
        for (Id w : waiters[id])
            if (--waiting[w] == 0) ready.push_back(w);
    }
}

void drain(const std::vector<Id>& targets) {
    Queue& q = queue();
    if (q.draining || q.queued.empty()) return;
    q.draining = true;
    run_in_random_order(needed_for(targets));
    q.draining = false;
}

std::vector<Id> all_queued() {
    std::vector<Id> ids;
    for (const auto& [id, w] : queue().queued) ids.push_back(id);
    return ids;
}

// Anything still queued when the program exits runs then: a peer rank may be waiting on a collective.
void drain_at_exit() { drain(all_queued()); }

}  // namespace

bool streams_queued() { return queue().seed != 0; }

void set_stream_seed(unsigned long long seed) {
    drain_queued_work();
    queue().seed = seed;
    queue().rng.seed(seed);
}

void queue_work(cudaStream_t stream, const char* name, std::function<void()> work, WorkKind kind) {
    static const bool registered = atexit(drain_at_exit) == 0;
    (void)registered;
    add(stream, name, std::move(work), kind, {}, true);
}

// Each node waits for the nodes its edges name; a node without edges waits for a first no-op, which
// waits for the stream's earlier work; a last no-op waits for every node, and the stream's later work
// for it.
void queue_graph(cudaStream_t stream, const std::vector<GraphNode>& nodes) {
    const Id start = add(stream, "(graph start)", nullptr, WorkKind::device, {}, true);
    std::vector<Id> ids;
    for (const GraphNode& node : nodes) {
        std::vector<Id> after;
        for (size_t a : node.after) after.push_back(ids[a]);
        if (after.empty()) after.push_back(start);
        ids.push_back(add(stream, node.name, node.work, node.kind, after, false));
    }
    add(stream, "(graph end)", nullptr, WorkKind::device, ids, true);
}

void queue_event_record(cudaEvent_t event, cudaStream_t stream) {
    auto time = event->time;
    event->queued = add(stream, "(event record)", [time] { *time = std::chrono::steady_clock::now(); },
                        WorkKind::device, {}, true);
}

void queue_stream_wait(cudaStream_t stream, cudaEvent_t event) {
    append_queued(&queue().next_after[key(stream)], {event->queued});
}

void forget_stream(cudaStream_t stream) { queue().next_after.erase(key(stream)); }

void drain_stream(cudaStream_t stream) {
    if (is_legacy(stream)) return drain_queued_work();
    drain(queue().next_after[stream]);
}
void drain_event(cudaEvent_t event) { drain({event->queued}); }
void drain_queued_work() { drain(all_queued()); }

bool stream_idle(cudaStream_t stream) {
    std::vector<Id> left;
    append_queued(&left, queue().next_after[key(stream)]);
    return left.empty();
}
bool event_done(cudaEvent_t event) { return queue().queued.count(event->queued) == 0; }

}  // namespace emu
