// The mesh of ranks (see mesh.h).
#include "parallel/plan/mesh.h"

#include "base/errors.h"

std::string Mesh::shape() const {
    return strprintf("%d data x %d pipeline x %d tensor", data, pipeline, tensor);
}

std::string Mesh::coordinates() const {
    return strprintf("data %d of %d, stage %d of %d, tensor %d of %d", data_rank, data, stage, pipeline,
                     tensor_rank, tensor);
}

Mesh make_mesh(int num_ranks, int rank, int tensor, int pipeline) {
    if (tensor < 1 || pipeline < 1 || num_ranks % (tensor * pipeline) != 0)
        fail("-tp (--tensor-parallel) %d x -pp (--pipeline-parallel) %d = %d does not divide the %d "
             "ranks", tensor, pipeline, tensor * pipeline, num_ranks);
    Mesh m;
    m.tensor = tensor, m.pipeline = pipeline, m.data = num_ranks / (tensor * pipeline);
    m.tensor_rank = rank % tensor;
    m.stage = rank / tensor % pipeline;
    m.data_rank = rank / (tensor * pipeline);
    return m;
}
