// train_gpt: trains GPT-2 and Llama 3 on NVIDIA GPUs with the hand-written kernels of kernels/ and
// cuBLASLt. This file is main() and the GPU defaults: the ranks from MPI (one per GPU, `mpirun -np N
// ./train_gpt`), the device (or the CPU model when there is none), then the shared training loop
// (train/train_loop.h) driving the GPU model (gpu/gpu_model.h, with GPT-2's or Llama 3's layers: bf16
// weights, activations and gradients, or fp32 with -DENABLE_FP32; fp32 master weights and AdamW
// moments; recomputation -r; accumulation -d) over a mesh of data × pipeline × tensor ranks
// (parallel/plan/mesh.h; docs/ARCHITECTURE.md: where each parallelism is applied).
// Built by nvcc it is ./train_gpt; built through the emulator (emu/) it is ./train_gpt_emu, which runs
// the same kernels on the CPU for the tests.
#include <cstdio>
#include <memory>

#include <nccl.h>

#include "base/errors.h"
#include "cpu/cpu_train_model.h"
#include "gpu/gpu_model.h"
#include "gpu/memory_plan.h"
#include "kernels/common.h"
#include "parallel/comm/launch_order.h"
#include "parallel/comm/mpi_ranks.h"
#include "parallel/comm/nccl_check.h"
#include "train/train_loop.h"

// Defaults for a GPU: GPT-2 124M on the built-in dataset.
static TrainOptions gpu_defaults() {
    TrainOptions o;
    o.model = "d12";
    o.batch_size = 16;
    o.seq_len = 1024;
    o.max_steps = 200;
    o.learning_rate = 6e-4;
    o.warmup_steps = 20;
    o.final_lr_fraction = 0.1;
    o.weight_decay = 0.1;
    o.val_every = 50;
    o.val_batches = 10;
    o.sample_every = 100;
    o.gen_tokens = 64;
    return o;
}

// The GPU model of the configuration's family.
static GPUModel* make_gpu_model(const ModelConfig& config, const TrainOptions& opt, WorldRanks world) {
    return new GPUModel(config, opt, world);
}

// Whether the command line asks for Muon, which only the CPU trainer runs so far: refused before the
// device, the communicators or the model are set up. A malformed command line is the loop's to report.
static bool asks_for_muon(int argc, char** argv) {
    try {
        return train_flag_value(argc, argv, "--optimizer") == "muon";
    } catch (const InputError&) { return false; }
}

// Ranks from the MPI launcher (one without), one GPU per rank on each node, an NCCL communicator when
// there are several; then the shared training loop. Without a CUDA device a single rank trains on the
// CPU instead.
int main(int argc, char** argv) {
    TrainerSpec spec;
    std::unique_ptr<RankGroup> ranks;
    WorldRanks world{nullptr};
    try {
        if (launched_by_mpi()) ranks = make_mpi_rank_group();
        spec.ranks = ranks.get();
        world.ranks = ranks.get();
        if (asks_for_muon(argc, argv))
            fail("--optimizer muon: the CUDA trainer does not run Muon yet; use train_gpt_cpu");
        int devices = 0;
        const cudaError_t err = cudaGetDeviceCount(&devices);
        if (err != cudaSuccess || devices == 0) {
            if (world.num_ranks() > 1)
                fail("rank %d: no CUDA device (%s); a run of %d ranks needs one GPU per rank",
                     world.rank(), err != cudaSuccess ? cudaGetErrorName(err) : "none found",
                     world.num_ranks());
            // A dry run still plans a GPU run, with a GPU run's defaults (a login node without GPUs).
            const std::string dry_run_value = train_flag_value(argc, argv, "--dry-run");
            const bool dry_run = !dry_run_value.empty() && dry_run_value != "0";
            printf("train_gpt: no CUDA device (%s), so %s\n",
                   err != cudaSuccess ? cudaGetErrorName(err) : "cudaGetDeviceCount found 0",
                   dry_run ? "--dry-run plans a GPU run with an H100's SM count"
                           : "training runs on the CPU with the fp32 reference model");
            spec.defaults = dry_run ? gpu_defaults() : cpu_trainer_defaults();
            spec.create_model = create_cpu_train_model;
            spec.host_memory_needed = cpu_train_model_memory;
            spec.plan_memory = plan_gpu_memory;  // --dry-run still plans a GPU run (--device-memory)
            return run_training(argc, argv, spec);
        }
        CUDA_CHECK(cudaSetDevice(ranks ? ranks->local_rank % devices : 0));
        // Under an MPI launcher NCCL is used even by a single rank (mpirun -np 1 exercises the
        // communication path on one GPU).
        if (ranks) world.nccl = make_nccl_communicator(*ranks);
        if (ranks && ranks->rank == 0 && ranks->num_ranks > 1 && !launch_order_note().empty())
            printf("%s\n", launch_order_note().c_str());
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        if (ranks && ranks->num_ranks > 1) ranks->abort_all(1);
        return 1;
    }
    spec.defaults = gpu_defaults();
    spec.create_model = [world](const ModelConfig& config, const TrainOptions& opt) {
        return std::unique_ptr<TrainModel>(make_gpu_model(config, opt, world));
    };
    spec.model_parallel = true;
    spec.report_ignored_flags = [world](const TrainOptions& opt) {
        if (opt.zero_stage && !world.nccl)
            printf("note: -z (ZeRO) shards across ranks; with one rank it has no effect\n");
    };
    spec.plan_memory = plan_gpu_memory;
    spec.device_memory = [] {
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        return (double)free_bytes;
    };
    const int status = run_training(argc, argv, spec);
    if (world.nccl) ncclCommDestroy(world.nccl);
    return status;
}
