// A rank's device memory beyond its arena (device_overhead.h).
#include "gpu/device_overhead.h"

#include <algorithm>
#include <cstdlib>

#include "base/errors.h"
#include "kernels/matmul.h"
#include "parallel/plan/param_buckets.h"

// A positive whole number from the environment variable `name`, or `otherwise` where it is unset.
static long long environment_count(const char* name, long long otherwise) {
    const char* text = getenv(name);
    if (!text || !*text) return otherwise;
    char* end = nullptr;
    const long long value = strtoll(text, &end, 10);
    if (*end != '\0' || value <= 0) fail("%s=%s: NCCL reads a positive whole number there", name, text);
    return value;
}

size_t nccl_communicator_bytes(int ranks) {
    if (ranks <= 0) return 0;
    if (ranks == 1) return kNcclCommunicatorBytes;  // no peer: no connection buffers
    const size_t simple = (size_t)environment_count("NCCL_BUFFSIZE", (long long)kNcclSimpleBufferBytes);
    const size_t channels = (size_t)std::min<long long>(environment_count("NCCL_MAX_NCHANNELS", kNcclMaxChannels),
                                                        kNcclMaxChannels);
    const size_t per_connection = simple + kNcclLLBufferBytes + kNcclLL128BufferBytes;
    return kNcclCommunicatorBytes + channels * kNcclConnectionsPerChannel * per_connection;
}

// The timed choice of an algorithm (matmul_fastest) keeps aside the output of a product that
// accumulates, the weight gradients, and an 8-byte fingerprint: the largest of them counts, once. A
// layer's largest is its widest weight (GPT-2: fc's or fcproj's 4C·C; Llama 3: gate|up's 2F·C), split
// over the tensor group; the classifier's is its slice of the vocabulary (Vs·C).
static size_t autotuning_bytes(const LayerWidths& widths, int Vp, const Mesh& m, const PipelineStage& stage) {
    const size_t C = widths.channels;
    size_t largest = 0;
    if (stage.layers() > 0)
        largest = std::max({widths.qkv * C, widths.attention * C, widths.hidden * C, widths.activated * C}) / m.tensor;
    if (stage.last) largest = std::max(largest, vocab_slice_rows(Vp, m.tensor) * C);
    return largest * sizeof(floatX) + sizeof(unsigned long long);
}

DeviceOverhead plan_device_overhead(const LayerWidths& widths, int Vp, const Mesh& mesh,
                                    const std::vector<int>& communicators, const PipelineStage& stage,
                                    int micro_step_graphs) {
    DeviceOverhead o;
    o.context = kCudaContextBytes;
    const std::vector<int>& sizes = communicators;
    o.communicators = (int)sizes.size();
    for (int ranks : sizes) o.nccl += nccl_communicator_bytes(ranks);
    if (!sizes.empty()) o.nccl += kNcclFirstCommunicatorExtraBytes;
    o.matmul_workspace = MATMUL_WORKSPACE_BYTES;
    o.autotuning = autotuning_bytes(widths, Vp, mesh, stage);
    if (micro_step_graphs > 0) {  // the micro-steps' graphs and the update's
        const size_t nodes = (size_t)stage.layers() * kGraphNodesPerLayer + kGraphNodesOutsideLayers;
        o.graphs = micro_step_graphs * nodes * kGraphBytesPerNode + kGraphNodesOutsideLayers * kGraphBytesPerNode;
    }
    return o;
}

std::string DeviceOverhead::report() const {
    const double MiB = 1024.0 * 1024.0;
    return strprintf("overhead: CUDA context %.1f MiB | NCCL %.1f MiB (%d communicator%s) | cuBLASLt workspace "
                     "%.1f MiB | algorithm timing %.1f MiB | CUDA graphs %.1f MiB | total %.1f MiB\n",
                     context / MiB, nccl / MiB, communicators, communicators == 1 ? "" : "s", matmul_workspace / MiB,
                     autotuning / MiB, graphs / MiB, total() / MiB);
}

std::string measured_overhead_report(const std::vector<MeasuredOverhead>& ranks, const char* when) {
    if (ranks.empty()) return "";
    auto excess = [](const MeasuredOverhead& m) { return (double)m.beside_arena - (double)m.planned; };
    int worst = 0;
    for (int r = 1; r < (int)ranks.size(); r++)
        if (excess(ranks[r]) > excess(ranks[worst])) worst = r;
    const MeasuredOverhead& m = ranks[worst];
    const double MiB = 1024.0 * 1024.0;
    std::string line = strprintf("overhead measured %s: %.1f MiB beside the model's buffers", when,
                                 m.beside_arena / MiB);
    if (ranks.size() > 1) line += strprintf(" on rank %d (the most over its plan)", worst);
    line += strprintf(" | planned %.1f MiB", m.planned / MiB);
    if (excess(m) > 0)
        line += strprintf(" | %.1f MiB more than planned: --dry-run and the memory line undercount this machine",
                          excess(m) / MiB);
    return line + "\n";
}
