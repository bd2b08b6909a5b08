// What a rank's device holds beyond the model's arena (kernels/device_arena.h), planned without a
// device: the CUDA context, NCCL's buffers for each of the rank's communicators, cuBLASLt's workspace,
// the scratch of the timed choice of matmul algorithms, and the executable CUDA graphs. The memory line
// prints their sum as `overhead`, and --dry-run's fits verdict counts it (train/run_plan.cpp).
//
// Where a figure cannot be derived from the run's shape it is a named constant below, with its source:
// NCCL's own defaults (its src/include/device.h and src/init.cc) or a measurement on an H100 (80 GB
// HBM3, driver 580.159, CUDA 13.0, NCCL 2.28.3: cudaMemGetInfo before and after each step of a small
// program that made a context, a cuBLASLt handle, CUDA graphs and NCCL communicators).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/train_options.h"
#include "gpu/activations.h"
#include "gpu/placement.h"
#include "parallel/plan/mesh.h"

// The CUDA context and the driver's reservation on an otherwise empty H100 (measured: 526.8 MiB in use
// after the first runtime call). Lazy module loading (CUDA's default since 12.2) adds the kernels a
// program launches when it first launches them; that is not counted.
constexpr size_t kCudaContextBytes = (size_t)527 << 20;
// NCCL, measured as above: the first communicator of a process took 584 MiB even over one rank, and
// every further one (ncclCommInitRank or ncclCommSplit) 388-390 MiB: its proxy's and the communicator's
// own structures, before any peer's buffers.
constexpr size_t kNcclFirstCommunicatorExtraBytes = (size_t)196 << 20;
constexpr size_t kNcclCommunicatorBytes = (size_t)390 << 20;
// NCCL's buffers for one connection to a peer, by protocol (NCCL's defaults, src/init.cc and
// src/include/device.h): Simple DEFAULT_BUFFSIZE = 4 MiB (NCCL_BUFFSIZE overrides it, as NCCL's
// documentation of that variable says), LL 8 lines × 512 threads × 8 steps × 16 bytes, LL128
// 120 elements × 640 threads × 8 steps × 8 bytes.
constexpr size_t kNcclSimpleBufferBytes = (size_t)4 << 20;
constexpr size_t kNcclLLBufferBytes = (size_t)8 * 512 * 8 * 16;
constexpr size_t kNcclLL128BufferBytes = (size_t)120 * 640 * 8 * 8;
// Channels NCCL may open per communicator: MAXCHANNELS (src/include/device.h), which NVLink machines
// reach (an all-to-all on 8 H100s has been seen to open 32 per peer pair, as NCCL users report); NCCL_MAX_NCHANNELS
// lowers it. Each channel of a communicator of two ranks or more receives on two connections (its
// ring's and its tree's; the buffers live on the receiving side, ncclConnInfo's "local for recv").
constexpr int kNcclMaxChannels = 32;
constexpr int kNcclConnectionsPerChannel = 2;
// An executable CUDA graph, per kernel node (measured as above: 46 MiB for a graph of 20,000 kernels,
// twice). A micro-step's graph holds about 27 kernels a layer (the emulated device counted 325 kernels
// in a 12-layer step's two graphs); 32 a layer and 64 outside the layers bound it.
constexpr size_t kGraphBytesPerNode = 2411;
constexpr int kGraphNodesPerLayer = 32, kGraphNodesOutsideLayers = 64;

// One rank's overhead, by part.
struct DeviceOverhead {
    size_t context = 0, nccl = 0, matmul_workspace = 0, autotuning = 0, graphs = 0;
    int communicators = 0;
    size_t total() const { return context + nccl + matmul_workspace + autotuning + graphs; }
    // `overhead: CUDA context X MiB | NCCL X MiB (N communicators) | cuBLASLt workspace X MiB | ...`
    std::string report() const;
};

// What the rank at `mesh`'s coordinates holds besides its arena, for layers of `widths` and a padded
// vocabulary of Vp, with NCCL communicators of the given sizes (mesh_communicator_sizes,
// parallel/comm/mesh_communicators.h; none without an NCCL world), on pipeline stage `stage`, with `micro_step_graphs` CUDA graphs of micro-steps (0: no
// graphs; gpu/memory_plan.h counts them). NCCL_BUFFSIZE and NCCL_MAX_NCHANNELS, where set, are NCCL's.
DeviceOverhead plan_device_overhead(const LayerWidths& widths, int Vp, const Mesh& mesh,
                                    const std::vector<int>& communicators, const PipelineStage& stage,
                                    int micro_step_graphs);
// NCCL's device memory for one communicator of `ranks` ranks (none for a missing one: ranks 0).
size_t nccl_communicator_bytes(int ranks);

// The overhead as a rank's device measured it once every part exists (after the step that first runs
// the CUDA graphs, or the first step without them): the device memory in use (cudaMemGetInfo) less the
// arena, beside what plan_device_overhead planned for that rank. It also counts memory that other
// processes hold on the same device.
struct MeasuredOverhead {
    size_t beside_arena = 0, planned = 0;
};
// `overhead measured <when>: X MiB beside the model's buffers on rank r | planned Y MiB`, for the rank
// whose measurement exceeds its plan the most (`ranks` in rank order), with the shortfall where the
// plan undercounts.
std::string measured_overhead_report(const std::vector<MeasuredOverhead>& ranks, const char* when);
