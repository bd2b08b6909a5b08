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
#pragma once
#include <cstddef>

inline size_t gather_bytes(size_t n_per_rank, int ranks, size_t bytes) {
    return ranks > 1 ? (size_t)(ranks - 1) * n_per_rank * bytes : 0;
}
inline size_t all_reduce_bytes(size_t n, int ranks, size_t bytes) {
    return ranks > 1 ? 2 * (size_t)(ranks - 1) * ((n + ranks - 1) / ranks) * bytes : 0;
}
inline size_t send_bytes(size_t n, size_t bytes) { return n * bytes; }

// Bytes sent in each of the three groups a rank belongs to (parallel/plan/mesh.h).
struct Traffic {
    size_t data = 0;      // gradients reduced and ZeRO's gathers, the loss averaged
    size_t tensor = 0;    // tensor parallelism's activations, LayerNorm gradients, the norm
    size_t pipeline = 0;  // activations and their gradients between stages, the tied embedding
    size_t total() const { return data + tensor + pipeline; }
    bool operator==(const Traffic& o) const {
        return data == o.data && tensor == o.tensor && pipeline == o.pipeline;
    }
    bool operator!=(const Traffic& o) const { return !(*this == o); }
};
