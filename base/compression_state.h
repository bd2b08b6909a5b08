// Gradient compression's state on one rank (parallel/comm/compressed_reduction.h): the error-feedback
// residuals and PowerSGD's warm-started factors it keeps between steps, as the trainer lays them out,
// so that a checkpoint (train/training_state.h) resumes them bit for bit. `method` is the
// --grad-compression method's number (parallel/plan/compression_cost.h; 0: none, nothing kept),
// `data_ranks` the data group they were made for, `layout` a fingerprint of how the trainer cut them:
// a resumed run whose own differs starts them from zero instead.
#pragma once
#include <cstdint>
#include <vector>

struct CompressionState {
    int32_t method = 0;
    int32_t data_ranks = 0;
    uint64_t layout = 0;
    std::vector<float> values;
    bool empty() const { return method == 0 && values.empty(); }
};
