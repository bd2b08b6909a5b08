// The run's plan (memory_plan.h): the tensor group's and the pipeline's traffic, and the device memory
// of each stage, from the same buffer requests the model makes.
#include "gpu/memory_plan.h"

#include "base/errors.h"
#include "gpu/activations.h"
#include "parallel/comm/zero.h"

TensorTraffic tensor_traffic(const GPTConfig& c, int B, int T_len, const TensorParallel& tp,
                                    const Stage& stage) {
    TensorTraffic t;
    const int T = tp.size();
    if (T == 1) return t;
    const size_t N = (size_t)B * T_len, C = c.channels, L = stage.layers(), e = sizeof(floatX);
    const size_t first = stage.first ? 1 : 0, last = stage.last ? 1 : 0;
    if (stage.last) t.per_micro_step = TensorParallel::gather_bytes(N * 3, T, sizeof(float));
    if (tp.sequence_parallel()) {
        t.per_micro_step += (10 * L + 2 * first + 3 * last) * TensorParallel::gather_bytes(N / T * C, T, e);
        t.per_reduction = L * TensorParallel::all_reduce_bytes(4 * C, T, e) +
                          (stage.last ? TensorParallel::all_reduce_bytes(2 * C, T, e) : 0);
    } else {
        t.per_micro_step += (4 * L + first + last) * TensorParallel::all_reduce_bytes(N * C, T, e);
    }
    t.per_step = TensorParallel::all_reduce_bytes(1, T, sizeof(float));
    return t;
}
size_t tensor_bytes_per_step(const TensorTraffic& t, int micro_steps, int zero_stage) {
    const size_t reductions = zero_stage >= 2 ? micro_steps : 1;  // as ParameterStore::reduces_gradients
    return micro_steps * t.per_micro_step + reductions * t.per_reduction + t.per_step;
}
// Bytes one rank sends along its pipeline per step: each micro-batch's activations to the next stage
// and their gradients to the previous one, (Nl, C) each; the tied embedding's gradient between the
// first and the last stage; the loss, from the last stage.
size_t pipeline_bytes_per_step(const GPTConfig& c, const TrainOptions& opt, const TensorParallel& tp,
                                      const Stage& stage, int stages, int micro_steps) {
    if (stages == 1) return 0;
    const size_t Nl = tp.local_positions(opt.batch_size * opt.seq_len), C = c.channels;
    const size_t boundaries = (stage.first ? 0 : 1) + (stage.last ? 0 : 1);
    const size_t tied = stage.first || stage.last ? tp.vocab_slice(c.padded_vocab_size) * C : 0;
    return (micro_steps * boundaries * Nl * C + tied) * sizeof(floatX);
}


// The device memory and network traffic of rank 0 of a run of num_ranks ranks (stage 0; the others'
// in memory.pipeline_report), computed from the same buffer requests the model makes, without
// allocating anything (for --dry-run; no device needed).
static ModelMemory plan_stage_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks,
                                     bool communicates, int stage_index) {
    Mesh mesh = make_mesh(num_ranks, 0, opt.tensor_parallel, opt.pipeline_parallel);
    mesh.stage = stage_index;
    const int micro_steps = grad_accum_steps(opt, num_ranks);
    const Stage stage = make_stage(config, opt, mesh, micro_steps);
    const TensorParallel tp(nullptr, nullptr, 0, mesh.tensor, sequence_parallel(opt));
    const int zero_stage = zero_stage_in_effect(opt, communicates);
    DeviceArena arena;
    ParameterStore store(make_param_buckets(config, mesh.data, model_slice(mesh, stage)), zero_stage, 0,
                         fp32_master_weights(opt));
    store.request_memory(&arena);
    StepBuffers buffers;
    request_step_buffers(&arena, &buffers, config, opt, tp, stage);
    ModelMemory memory = arena.memory();
    memory.network_bytes_per_step = store.bytes_sent_per_step(micro_steps);
    memory.tensor_bytes_per_step =
        tensor_bytes_per_step(tensor_traffic(config, opt.batch_size, opt.seq_len, tp, stage), micro_steps, zero_stage);
    memory.pipeline_bytes_per_step = pipeline_bytes_per_step(config, opt, tp, stage, mesh.pipeline, micro_steps);
    return memory;
}
ModelMemory plan_gpu_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    ModelMemory memory = plan_stage_memory(config, opt, num_ranks, communicates, 0);
    memory.pipeline_report = stage_report(config, opt, num_ranks, communicates);
    return memory;
}
std::string stage_report(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    const int P = opt.pipeline_parallel, m = grad_accum_steps(opt, num_ranks);
    if (P == 1) return "";
    const std::vector<int> first = stage_layers(config, opt.seq_len, P);
    std::string report = strprintf("pipeline: %d stages, %s; %s schedule, %d micro-batches, bubble %.1f%%\n", P,
                                   describe_stage_layers(first).c_str(), opt.pp_schedule.c_str(), m,
                                   100.0 * pipeline_bubble(P, m));
    const double MiB = 1024.0 * 1024.0;
    for (int s = 0; s < P; s++) {
        const ModelMemory mem = plan_stage_memory(config, opt, num_ranks, communicates, s);
        const int kept = micro_batches_in_flight(opt.pp_schedule, P, s, m);
        const std::string layers = first[s + 1] - first[s] == 1 ? strprintf("layer %d", first[s])
                                                                 : strprintf("layers %d-%d", first[s], first[s + 1] - 1);
        report += strprintf("stage %d: %s, %d micro-batch%s in flight, activations %.1f MiB, total %.1f MiB\n", s,
                            layers.c_str(), kept, kept == 1 ? "" : "es", mem.activations / MiB, mem.total() / MiB);
    }
    return report;
}
