// The settings' derived counts (see train_options.h).
#include "base/train_options.h"

#include <algorithm>

int data_ranks(const TrainOptions& o, int num_ranks) {
    return std::max(1, num_ranks / (o.tensor_parallel * o.pipeline_parallel));
}

int grad_accum_steps(const TrainOptions& o, int num_ranks) {
    return (int)(o.total_batch / ((long long)o.batch_size * o.seq_len * data_ranks(o, num_ranks)));
}
