// The run's plan (memory_plan.h).
#include "gpu/memory_plan.h"

#include <algorithm>

#include "base/errors.h"
#include "gpu/activations.h"
#include "gpu/model_family.h"
#include "gpu/optimizer.h"
#include "parallel/comm/launch_order.h"
#include "parallel/comm/mesh_communicators.h"

// The tensor group's operations of one step, by their costs (parallel/comm/tensor_parallel.h), for
// activations of N = B·T positions and C channels: per micro-step (either family: GPT-2's qkv, attproj,
// fc, fcproj are Llama 3's q|k|v, o_proj, gate|up, down_proj)
//   each layer, forward    qkv and fc column-parallel (their input gathered), attproj and fcproj
//                          row-parallel (their partial sums reduced)
//   each layer, backward   fcproj and attproj's output gradient gathered, ln2 and ln1 gathered
//                          (prefetched) for fc's and qkv's weight gradients, fc's and qkv's input
//                          gradients reduced
//   first stage            the embedding's partial sums reduced, its output gradient gathered
//   last stage             lnf gathered for the logits and again for the head's backward, each row's
//                          statistics (3 floats) gathered, d(lnf) reduced
// per reduction of the gradients (every micro-step, or once a step: as the parameter store reduces),
// the norms' parameter gradients summed (each bucket's sequence_summed: GPT-2 4C a layer and 2C for
// lnf, Llama 3 2C a layer and C for its final norm); per step the squared norm.
static size_t plan_tensor_bytes(const ModelShape& shape, const TensorParallel& tp, const PipelineStage& stage,
                                const ParamBuckets& buckets, int N, int micro_steps, int reductions,
                                size_t gradient_bytes) {
    if (tp.size() == 1) return 0;
    const int C = shape.channels, L = stage.layers();
    const size_t gather = tp.gather_cost(N, C), reduce = tp.reduce_cost(N, C);
    size_t per_micro_step = L * (2 * gather + 2 * reduce + 4 * gather + 2 * reduce);
    if (stage.first) per_micro_step += reduce + gather;
    if (stage.last) per_micro_step += 2 * gather + gather_bytes((size_t)N * 3, tp.size(), sizeof(float)) + reduce;
    size_t per_reduction = 0;
    for (const ParamBucket& bucket : buckets.buckets)
        if (bucket.sequence_summed > 0)
            per_reduction += tp.sequence_gradients_cost(bucket.sequence_summed, gradient_bytes);
    return micro_steps * per_micro_step + reductions * per_reduction + all_reduce_bytes(1, tp.size(), sizeof(float));
}

Traffic plan_traffic(const ModelShape& shape, const TrainOptions& opt, const TensorParallel& tp,
                     const PipelineStage& stage, const ParameterStore& params, const PipelineParallel& pipeline,
                     int micro_steps, SentBytes optimizer, bool compressed) {
    const int N = opt.batch_size * opt.seq_len;
    Traffic t;
    t.data = params.planned_bytes(micro_steps, compressed);
    t.data += optimizer;
    t.tensor = tp.by_node(plan_tensor_bytes(shape, tp, stage, params.buckets(), N, micro_steps,
                                            params.reduces_gradients(false) ? micro_steps : 1, params.gradient_bytes()));
    // A tied embedding's gradients (GPT-2), as reduced, summed over the first and last stages.
    const int vocabulary = params.buckets().vocabulary_bucket();
    const bool tied = params.buckets().table.tied_classifier && vocabulary >= 0;
    t.pipeline = pipeline.planned_bytes(micro_steps, (size_t)tp.local_positions(N) * shape.channels,
                                        tied ? params.reduced_gradient_count(vocabulary) : 0, params.gradient_bytes());
    return t;
}

void set_planned_compressed_traffic(ModelMemory* memory, const Traffic& traffic, GradCompression method) {
    memory->compressed_bytes_per_step = traffic.total();
    memory->compression = grad_compression_name(method);
}

void set_planned_traffic(ModelMemory* memory, const Traffic& traffic) {
    memory->network_bytes_per_step = traffic.data.total();
    memory->tensor_bytes_per_step = traffic.tensor.total();
    memory->pipeline_bytes_per_step = traffic.pipeline.total();
    memory->within_node_bytes_per_step = traffic.by_node().within_node;
    memory->across_node_bytes_per_step = traffic.by_node().across_node;
}

bool uses_cuda_graphs(const TrainOptions& opt, const Mesh& mesh, const ZeroSharding& sharding) {
    return opt.cuda_graphs != 0 && mesh.pipeline == 1 && !sharding.gradients;
}

int micro_step_graphs(bool graphs, const ParameterStore& params, int micro_steps) {
    if (!graphs) return 0;
    if (params.gathers_updated_weights()) return std::min(micro_steps, 3);
    return micro_steps > 1 ? 2 : 1;
}

void set_planned_overhead(ModelMemory* memory, const DeviceOverhead& overhead) {
    memory->overhead = overhead.total();
    memory->overhead_report = overhead.report();
}

// Rank 0 of stage `stage_index`'s memory and traffic: the model's own objects, made without a device.
static ModelMemory plan_stage_memory(const ModelConfig& model, const TrainOptions& opt, int num_ranks,
                                     bool communicates, int stage_index) {
    const FamilyShape family = model_family(model, opt);
    const ModelShape& shape = family.core;
    // Rank 0's coordinates but the stage.
    const Mesh mesh = make_mesh(num_ranks, stage_index * (num_ranks / opt.pipeline_parallel), opt.tensor_parallel,
                                opt.pipeline_parallel, opt.shard_ranks, planned_node_ranks(opt, nullptr));
    const int micro_steps = grad_accum_steps(opt, num_ranks);
    const PipelineStage stage = make_pipeline_stage(shape, opt, mesh, micro_steps);
    const TensorParallel tp(nullptr, nullptr, 0, mesh.tensor, sequence_parallel(opt),
                            within_one_node(mesh.tensor_group(), mesh.node_ranks));
    const PipelineParallel pipeline(nullptr, nullptr, mesh.stage, mesh.pipeline, pipeline_links(mesh));
    DeviceArena arena;
    GradCompression compression = GradCompression::NONE;
    parse_grad_compression(opt.grad_compression.c_str(), &compression);
    ParameterStore params(make_param_buckets(family.table, mesh.shard, model_slice(mesh, stage)),
                          zero_sharding(opt, communicates), 0, shard_groups(mesh), fp32_gradient_reduction(opt),
                          communicates ? compression : GradCompression::NONE, opt.powersgd_rank);
    Optimizer optimizer(params, fp32_master_weights(opt), optimizer_kind(opt), layer_adaptation(opt));
    params.request_memory(&arena);
    optimizer.request_memory(&arena);
    StepBuffers buffers;
    request_step_buffers(&arena, &buffers, family.widths, shape.padded_vocab_size, opt, tp, stage);
    ModelMemory memory = arena.memory();
    const SentBytes optimizer_bytes = optimizer.planned_bytes(communicates ? mesh.size() : 1, world_within_one_node(mesh));
    set_planned_traffic(&memory, plan_traffic(shape, opt, tp, stage, params, pipeline, micro_steps, optimizer_bytes));
    if (params.compression().active())
        set_planned_compressed_traffic(
            &memory, plan_traffic(shape, opt, tp, stage, params, pipeline, micro_steps, optimizer_bytes, true),
            params.compression().method());
    const int graphs = micro_step_graphs(uses_cuda_graphs(opt, mesh, params.sharding()), params, micro_steps);
    const std::vector<int> communicators =
        mesh_communicator_sizes(mesh, communicates, params.sharding().weights, communicators_may_overlap());
    set_planned_overhead(&memory, plan_device_overhead(family.widths, shape.padded_vocab_size, mesh, communicators, stage, graphs));
    return memory;
}

ModelMemory plan_gpu_memory(const ModelConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    ModelMemory memory = plan_stage_memory(config, opt, num_ranks, communicates, 0);
    memory.pipeline_report = stage_report(config, opt, num_ranks, communicates);
    return memory;
}

std::string stage_report(const ModelConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    const int P = opt.pipeline_parallel, m = grad_accum_steps(opt, num_ranks);
    if (P == 1) return "";
    const std::vector<int> first = stage_layers(model_family(config, opt).core, opt.seq_len, P);
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
