// The one collective over every rank of the mesh: LAMB's and LARS's per-tensor sums of squares
// (gpu/optimizer.h). A tensor's pieces may lie on ranks of every group (ZeRO's chunks in the sharding
// group, slices in the tensor group, the tied embedding on a pipeline's first and last stage), and each
// rank contributes the sums of the elements it counts (zeros for the tensors it does not hold), so one
// all-reduce over all of them gives every rank every tensor's whole sums.
#pragma once
#include <nccl.h>

#include "parallel/comm/collective_hook.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/traffic.h"

// Sums n fp32 values in place across every rank of `everyone` (null: one process, nothing to do), on
// `stream`; adds what it sends to *sent, on the side of the node boundary the ranks sit; tells `hook`
// (collective_hook.h) where one is set.
inline void sum_over_every_rank(float* values, size_t n, ncclComm_t everyone, cudaStream_t stream, SentBytes* sent,
                                bool within_node, CollectiveHook* hook = nullptr) {
    if (!everyone) return;
    int ranks = 1;
    NCCL_CHECK(ncclCommCount(everyone, &ranks));
    sent->add(all_reduce_bytes(n, ranks, sizeof(float)), within_node);
    HookedCollective timed(hook, CollectiveKind::ALL_REDUCE, (double)n * sizeof(float), ranks, stream);
    NCCL_CHECK(ncclAllReduce(values, values, n, ncclFloat32, ncclSum, everyone, stream));
}
