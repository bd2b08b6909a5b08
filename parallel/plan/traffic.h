// What a rank sends to other ranks, counted where it is sent. Every collective of parallel/comm/ adds
// its bytes to a Traffic counter as it issues the call, by the cost rules below; the start-up report,
// --dry-run and the tests read plans (gpu/memory_plan.h) that add up the same calls' costs from the
// same rules, and the model checks its first step's counts against its plan.
//
// The rules (NCCL's ring algorithms, per rank, for elements of `bytes` each, over a group of R ranks):
//   all-gather of n elements per rank, or reduce-scatter to n elements per rank   (R − 1) · n
//   all-reduce of n elements                                                       2 · (R − 1) · ⌈n / R⌉
//   point-to-point send of n elements                                              n
// A group of one rank sends nothing.
//
// Where the bytes travel: a collective's bytes count as within-node when every rank of its group (a
// send's: the sender and the receiver) sits on one node, and as across-node otherwise (its ring
// crosses between machines, whose links pace it). Node k holds the world ranks [k·M, (k+1)·M) for M
// ranks per node (--node-ranks, or what the launcher says).
#pragma once
#include <cstddef>
#include <vector>

inline size_t gather_bytes(size_t n_per_rank, int ranks, size_t bytes) {
    return ranks > 1 ? (size_t)(ranks - 1) * n_per_rank * bytes : 0;
}
inline size_t all_reduce_bytes(size_t n, int ranks, size_t bytes) {
    return ranks > 1 ? 2 * (size_t)(ranks - 1) * ((n + ranks - 1) / ranks) * bytes : 0;
}
inline size_t send_bytes(size_t n, size_t bytes) { return n * bytes; }

// Whether a group of these world ranks sits on one node of `node_ranks` ranks (0: one node holds all).
inline bool within_one_node(const std::vector<int>& world_ranks, int node_ranks) {
    if (node_ranks <= 0) return true;
    for (int r : world_ranks)
        if (r / node_ranks != world_ranks.front() / node_ranks) return false;
    return true;
}

// Bytes sent, by where they travel.
struct SentBytes {
    size_t within_node = 0, across_node = 0;
    void add(size_t bytes, bool group_within_node) { (group_within_node ? within_node : across_node) += bytes; }
    size_t total() const { return within_node + across_node; }
    SentBytes& operator+=(const SentBytes& o) {
        within_node += o.within_node, across_node += o.across_node;
        return *this;
    }
    SentBytes operator-(const SentBytes& o) const { return {within_node - o.within_node, across_node - o.across_node}; }
    bool operator==(const SentBytes& o) const { return within_node == o.within_node && across_node == o.across_node; }
    bool operator!=(const SentBytes& o) const { return !(*this == o); }
};

// Bytes sent in each of the three groups a rank belongs to (parallel/plan/mesh.h).
struct Traffic {
    SentBytes data;      // gradients reduced and ZeRO's gathers, the loss averaged
    SentBytes tensor;    // tensor parallelism's activations, LayerNorm gradients, the norm
    SentBytes pipeline;  // activations and their gradients between stages, the tied embedding
    size_t total() const { return data.total() + tensor.total() + pipeline.total(); }
    SentBytes by_node() const {
        SentBytes all = data;
        all += tensor, all += pipeline;
        return all;
    }
    Traffic& operator+=(const Traffic& o) {
        data += o.data, tensor += o.tensor, pipeline += o.pipeline;
        return *this;
    }
    Traffic operator-(const Traffic& o) const { return {data - o.data, tensor - o.tensor, pipeline - o.pipeline}; }
    bool operator==(const Traffic& o) const { return data == o.data && tensor == o.tensor && pipeline == o.pipeline; }
    bool operator!=(const Traffic& o) const { return !(*this == o); }
};

// A collective's achieved bandwidth as nccl-tests reports it, from its size S in bytes (all-reduce and
// broadcast: the buffer; all-gather: the gathered result, R times each rank's part; reduce-scatter:
// the input, R times each rank's result; an all-to-all: what each rank sends and receives, its R parts;
// a send: the message) and its time t: the algorithm bandwidth S / t, times the factor that makes it
// comparable with a link's peak whatever the rank count (the share of S each rank's link carries in a
// ring): 2(R − 1)/R for an all-reduce, (R − 1)/R for an all-gather, a reduce-scatter or an all-to-all,
// 1 for a broadcast or a send. Bytes per second; 0 for t = 0.
enum class CollectiveKind { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, SEND, ALL_TO_ALL };
inline double bus_bandwidth(CollectiveKind kind, double size_bytes, int ranks, double seconds) {
    if (seconds <= 0) return 0;
    const double R = ranks, algorithm = size_bytes / seconds;
    switch (kind) {
        case CollectiveKind::ALL_REDUCE: return algorithm * 2 * (R - 1) / R;
        case CollectiveKind::ALL_GATHER:
        case CollectiveKind::REDUCE_SCATTER:
        case CollectiveKind::ALL_TO_ALL: return algorithm * (R - 1) / R;
        case CollectiveKind::BROADCAST:
        case CollectiveKind::SEND: return algorithm;
    }
    return algorithm;
}
