// The mesh's NCCL communicators (see mesh_communicators.h).
#include "parallel/comm/mesh_communicators.h"

#include "base/errors.h"

namespace {

ncclComm_t split(ncclComm_t world, int color, int key) {
    ncclComm_t comm = nullptr;
    const ncclResult_t result = ncclCommSplit(world, color, key, &comm, nullptr);
    if (result != ncclSuccess)
        fail("NCCL could not split the communicators of the mesh: %s", ncclGetErrorString(result));
    return comm;
}

}  // namespace

// Hybrid sharding's two groups: the sharding group (the same replica), the ranks holding the same
// shard (the same shard rank).
static void split_shard_groups(ncclComm_t world, const Mesh& m, MeshCommunicators* c) {
    if (!m.hybrid()) return;
    c->shard = split(world, (m.stage * m.replicas() + m.replica()) * m.tensor + m.tensor_rank, m.shard_rank());
    c->replicas = split(world, (m.stage * m.shard + m.shard_rank()) * m.tensor + m.tensor_rank, m.replica());
}

// ZeRO-3's second communicator over the sharding group (the data group's colour where it is not
// hybrid: replicas() is then 1).
static void split_weight_gathers(ncclComm_t world, const Mesh& m, bool sharded_weights, bool overlap,
                                 MeshCommunicators* c) {
    if (sharded_weights && overlap && m.shard > 1)
        c->weight_gathers = split(world, (m.stage * m.replicas() + m.replica()) * m.tensor + m.tensor_rank, m.shard_rank());
}

MeshCommunicators split_mesh_communicators(ncclComm_t world, const Mesh& m, bool sharded_weights, bool overlap) {
    MeshCommunicators c;
    if (!world) return c;
    if (m.tensor == 1 && m.pipeline == 1) {
        c.data = world, c.data_is_world = true;
        split_shard_groups(world, m, &c);
        split_weight_gathers(world, m, sharded_weights, overlap, &c);
        return c;
    }
    // Every rank takes part in every split; a colour names the group, the key orders its ranks.
    c.data = split(world, m.stage * m.tensor + m.tensor_rank, m.data_rank);
    split_shard_groups(world, m, &c);
    split_weight_gathers(world, m, sharded_weights, overlap, &c);
    ncclComm_t tensor = split(world, m.stage * m.data + m.data_rank, m.tensor_rank);
    ncclComm_t tensor_overlap = split(world, m.stage * m.data + m.data_rank, m.tensor_rank);
    ncclComm_t pipeline = split(world, m.data_rank * m.tensor + m.tensor_rank, m.stage);
    auto keep = [](ncclComm_t comm, bool wanted) {
        if (wanted) return comm;
        ncclCommDestroy(comm);
        return (ncclComm_t) nullptr;
    };
    c.tensor = keep(tensor, m.tensor > 1);
    c.tensor_overlap = keep(tensor_overlap, m.tensor > 1 && overlap);
    c.pipeline = keep(pipeline, m.pipeline > 1);
    const bool ends = m.stage == 0 || m.stage == m.pipeline - 1;
    ncclComm_t tied = split(world, ends ? m.data_rank * m.tensor + m.tensor_rank : NCCL_SPLIT_NOCOLOR, m.stage);
    if (m.pipeline > 2 && ends) {
        c.tied_embedding = tied;
    } else {
        if (tied) ncclCommDestroy(tied);
        c.tied_embedding = m.pipeline == 2 ? c.pipeline : nullptr;
    }
    return c;
}

void destroy_mesh_communicators(MeshCommunicators* c) {
    if (c->tied_embedding && c->tied_embedding != c->pipeline) ncclCommDestroy(c->tied_embedding);
    for (ncclComm_t comm : {c->shard, c->replicas, c->weight_gathers, c->tensor, c->tensor_overlap, c->pipeline})
        if (comm) ncclCommDestroy(comm);
    if (c->data && !c->data_is_world) ncclCommDestroy(c->data);
    *c = MeshCommunicators();
}

std::vector<int> mesh_communicator_sizes(const Mesh& m, bool communicates, bool sharded_weights, bool overlap) {
    if (!communicates) return {};
    std::vector<int> sizes = {m.size()};
    if (m.tensor > 1 || m.pipeline > 1) sizes.push_back(m.data);
    if (m.hybrid()) sizes.insert(sizes.end(), {m.shard, m.replicas()});
    if (sharded_weights && overlap && m.shard > 1) sizes.push_back(m.shard);
    if (m.tensor > 1) sizes.push_back(m.tensor);
    if (m.tensor > 1 && overlap) sizes.push_back(m.tensor);
    if (m.pipeline > 1) sizes.push_back(m.pipeline);
    if (m.pipeline > 2 && (m.first_stage() || m.last_stage())) sizes.push_back(2);
    return sizes;
}
