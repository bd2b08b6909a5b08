// A GPU run's device memory and traffic, planned without a device: what the start-up report and
// --dry-run print, and what the model checks its first step against (step.cu). The memory comes
// from the same buffer requests the model makes; the traffic adds up the same operations' costs
// (parallel/plan/traffic.h), as each operation counts them when it runs. The planners take the
// model's own config, of either family, and size it as the model does (gpu/model_family.h).
#pragma once
#include <string>

#include "base/gpt_config.h"
#include "base/model_config.h"
#include "base/train_model.h"
#include "base/train_options.h"
#include "gpu/device_overhead.h"
#include "gpu/placement.h"
#include "parallel/comm/parameter_store.h"
#include "parallel/comm/pipeline_parallel.h"
#include "parallel/comm/tensor_parallel.h"
#include "parallel/plan/traffic.h"

// What one optimizer step of `micro_steps` micro-steps sends in each group, on the rank these
// objects describe: the tensor group's operations of gpt2_layers.cu and passes.cu, the parameter
// store's, the pipeline's; `optimizer` what the optimizer's update sends (counted with the data
// group's: gpu/optimizer.h), for a model of `shape` (FamilyShape::core).
Traffic plan_traffic(const ModelShape& shape, const TrainOptions& opt, const TensorParallel& tp,
                     const PipelineStage& stage, const ParameterStore& params, const PipelineParallel& pipeline,
                     int micro_steps, SentBytes optimizer, bool compressed = false);
// The traffic into the report's fields: a step's, and (--grad-compression) a compressed step's.
void set_planned_traffic(ModelMemory* memory, const Traffic& traffic);
void set_planned_compressed_traffic(ModelMemory* memory, const Traffic& traffic, GradCompression method);
// Whether micro-steps and updates replay as CUDA graphs: --cuda-graphs, and neither a pipeline nor
// sharded gradients (ZeRO-2/3), whose steps change with host-side state (gpu_model.cu).
bool uses_cuda_graphs(const TrainOptions& opt, const Mesh& mesh, const ZeroSharding& sharding);
// The micro-steps' CUDA graphs a step makes (0 without graphs): one per shape and place in the step,
// the last micro-step's and, where the first forward gathers the updated weights (-z 1/2), the first's.
int micro_step_graphs(bool graphs, const ParameterStore& params, int micro_steps);
// The device's overhead (gpu/device_overhead.h) into the report's fields.
void set_planned_overhead(ModelMemory* memory, const DeviceOverhead& overhead);
// One line per pipeline stage for the start-up report: its layers, micro-batches in flight and memory.
std::string stage_report(const ModelConfig& config, const TrainOptions& opt, int num_ranks, bool communicates);
// The device memory and traffic of rank 0 of a run of num_ranks ranks (stage 0; the others' in
// memory.pipeline_report), without allocating anything (for --dry-run; no device needed).
ModelMemory plan_gpu_memory(const ModelConfig& config, const TrainOptions& opt, int num_ranks, bool communicates);
