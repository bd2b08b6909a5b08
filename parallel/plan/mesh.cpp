// The mesh of ranks (see mesh.h).
#include "parallel/plan/mesh.h"

#include "base/errors.h"

std::string Mesh::shape() const {
    return strprintf("%d pipeline x %d data x %d tensor", pipeline, data, tensor);
}

std::string Mesh::coordinates() const {
    return strprintf("stage %d of %d, data %d of %d, tensor %d of %d", stage, pipeline, data_rank, data,
                     tensor_rank, tensor);
}

// The world ranks of `count` cells of the mesh, the i-th at world_rank_of(i).
template <typename F>
static std::vector<int> ranks_along(int count, F world_rank_of) {
    std::vector<int> ranks;
    for (int i = 0; i < count; i++) ranks.push_back(world_rank_of(i));
    return ranks;
}

std::vector<int> Mesh::data_group() const {
    return ranks_along(data, [&](int d) { return world_rank(d, stage, tensor_rank); });
}

std::vector<int> Mesh::shard_group() const {
    return ranks_along(shard, [&](int s) { return world_rank(replica() * shard + s, stage, tensor_rank); });
}

std::vector<int> Mesh::replica_group() const {
    return ranks_along(replicas(), [&](int g) { return world_rank(g * shard + shard_rank(), stage, tensor_rank); });
}

std::vector<int> Mesh::tensor_group() const {
    return ranks_along(tensor, [&](int t) { return world_rank(data_rank, stage, t); });
}

std::vector<int> Mesh::pipeline_group() const {
    return ranks_along(pipeline, [&](int s) { return world_rank(data_rank, s, tensor_rank); });
}

std::vector<int> Mesh::tied_embedding_group() const {
    return {world_rank(data_rank, 0, tensor_rank), world_rank(data_rank, pipeline - 1, tensor_rank)};
}

Mesh make_mesh(int num_ranks, int rank, int tensor, int pipeline, int shard, int node_ranks) {
    if (tensor < 1 || pipeline < 1 || num_ranks % (tensor * pipeline) != 0)
        fail("-tp (--tensor-parallel) %d x -pp (--pipeline-parallel) %d = %d does not divide the %d "
             "ranks", tensor, pipeline, tensor * pipeline, num_ranks);
    Mesh m;
    m.tensor = tensor, m.pipeline = pipeline, m.data = num_ranks / (tensor * pipeline);
    if (shard < 0 || (shard > 0 && m.data % shard != 0))
        fail("--shard-ranks: %d does not divide the %d data ranks", shard, m.data);
    m.shard = shard > 0 ? shard : m.data;
    m.node_ranks = node_ranks;
    m.tensor_rank = rank % tensor;
    m.data_rank = rank / tensor % m.data;
    m.stage = rank / (tensor * m.data);
    return m;
}
