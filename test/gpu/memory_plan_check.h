// The memory report against the device and the plan (gpu/memory_plan.h, what --dry-run prints), for
// the GPU model of either family: test_gpu_model.cu (GPT-2) and test_gpu_llama.cu (Llama 3).
#pragma once
#include <nccl.h>

#include "gpu/gpu_model.h"
#include "gpu/memory_plan.h"
#include "kernels/matmul.h"
#include "test/kernels/kernel_test.h"

// Builds the model `model` with `opt` on one rank of the NCCL world `comm` and checks that the
// bytes its report adds up are the device memory its construction took (the emulated device counts
// every cudaMalloc; a real one hands out pages of 2 MiB, so there the memory taken is at most the
// report rounded up to whole pages), and that the plan for it (the same configuration as the
// training loop sees it) equals the report part by part, with the network bytes and the overhead.
// Returns the plan.
inline ModelMemory check_plan_equals_allocation(const ModelConfig& model, const TrainOptions& opt, ncclComm_t comm) {
    RankGroup one_rank;
    matmul_setup();  // the cuBLASLt workspace exists before, so only the model's is counted
    size_t free_before = 0, free_after = 0, total = 0;
    CHECK(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
    GPUModel gpu(model, opt, {&one_rank, comm});
    CHECK(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
    const ModelMemory m = gpu.memory();
    const size_t taken = free_before - free_after;
#ifdef EMU_CUDA
    const bool as_reported = taken == m.buffers();
#else
    const size_t page = (size_t)2 << 20;
    const bool as_reported = taken <= (m.buffers() + page - 1) / page * page;
#endif
    CHECK_MSG(as_reported && m.buffers() == gpu.allocated_bytes(), "-z %d -r %d: report %zu bytes, device %zu",
              opt.zero_stage, opt.recompute, m.buffers(), taken);
    const ModelMemory plan = plan_gpu_memory(model, opt, 1, true);
    CHECK_MSG(plan.parameters == m.parameters && plan.gradients == m.gradients &&
                  plan.master_weights == m.master_weights && plan.optimizer_state == m.optimizer_state &&
                  plan.activations == m.activations && plan.buffers() == m.buffers() &&
                  plan.network_bytes_per_step == m.network_bytes_per_step && plan.overhead == m.overhead,
              "-z %d -r %d: the plan (%zu bytes, activations %zu) differs from the model (%zu, %zu)",
              opt.zero_stage, opt.recompute, plan.buffers(), plan.activations, m.buffers(), m.activations);
    return plan;
}
