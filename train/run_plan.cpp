// The start-up memory report and --dry-run (see run_plan.h).
#include "train/run_plan.h"

#include <algorithm>
#include <cstdio>

#include "base/errors.h"
#include "base/model_descriptor.h"
#include "parallel/plan/mesh.h"
#include "train/run_folder.h"

void print_memory_report(const ModelMemory& mem) {
    const double MiB = 1024.0 * 1024.0;
    const std::string overhead = mem.overhead > 0 ? strprintf(" | overhead %.1f MiB", mem.overhead / MiB) : "";
    printf("memory: parameters %.1f MiB | gradients %.1f MiB | master weights %.1f MiB | "
           "optimizer state %.1f MiB | activations %.1f MiB%s | total %.1f MiB\n",
           mem.parameters / MiB, mem.gradients / MiB, mem.master_weights / MiB,
           mem.optimizer_state / MiB, mem.activations / MiB, overhead.c_str(), mem.total() / MiB);
    printf("%s", mem.overhead_report.c_str());
    const size_t sent = mem.network_bytes_per_step + mem.tensor_bytes_per_step + mem.pipeline_bytes_per_step;
    std::string groups;  // by group, where the model is split across ranks
    if (mem.tensor_bytes_per_step > 0) groups += strprintf(", tensor group %.1f MiB", mem.tensor_bytes_per_step / MiB);
    if (mem.pipeline_bytes_per_step > 0) groups += strprintf(", pipeline %.1f MiB", mem.pipeline_bytes_per_step / MiB);
    if (!groups.empty())
        printf("network: %.1f MiB sent per step by each rank (data group %.1f MiB%s)\n", sent / MiB,
               mem.network_bytes_per_step / MiB, groups.c_str());
    else if (sent > 0)
        printf("network: %.1f MiB sent per step by each rank\n", sent / MiB);
    if (sent > 0)
        printf("network by node: %.1f MiB within the node, %.1f MiB across nodes\n",
               mem.within_node_bytes_per_step / MiB, mem.across_node_bytes_per_step / MiB);
    if (!mem.compression.empty())
        printf("network compressed (--grad-compression %s): %.2f MiB (%zu bytes) sent per step by each rank after "
               "--compression-start, %.1fx less\n", mem.compression.c_str(), mem.compressed_bytes_per_step / MiB,
               mem.compressed_bytes_per_step, (double)sent / std::max<size_t>(mem.compressed_bytes_per_step, 1));
    if (!mem.pipeline_report.empty()) printf("%s", mem.pipeline_report.c_str());
}

int planned_ranks(const TrainOptions& opt, const RankGroup& ranks) {
    if (!opt.dry_run || opt.plan_ranks == 0) return ranks.num_ranks;
    if (ranks.num_ranks > 1 && opt.plan_ranks != ranks.num_ranks)
        fail("--plan-ranks: %d, but %d ranks were started; plan from one process, or drop "
             "--plan-ranks to plan for the ranks started", opt.plan_ranks, ranks.num_ranks);
    return opt.plan_ranks;
}

static const char* zero_stage_text(int stage) {
    switch (stage) {
        case 0: return "-z 0: gradients all-reduced, everything else replicated";
        case 1: return "-z 1: AdamW state sharded";
        case 2: return "-z 2: gradients and AdamW state sharded";
        default: return "-z 3: weights, gradients and AdamW state sharded";
    }
}

// The fits line: the plan against the share of the device it may use (kFitsShare).
static void print_fits_verdict(double need, double device, const std::string& where) {
    const double GiB = 1024.0 * 1024.0 * 1024.0, usable = kFitsShare * device;
    const std::string margin = strprintf("%.0f%% of it, a %.0f%% margin", 100 * kFitsShare, 100 * (1 - kFitsShare));
    if (device <= 0)
        printf("fits: unknown (no device here to compare with; give --device-memory GiB)\n");
    else if (need <= usable)
        printf("fits: yes, %.2f GiB per rank of %s (%.0f%%; fits within %s)\n", need / GiB, where.c_str(),
               100.0 * need / device, margin.c_str());
    else
        printf("fits: no, %.2f GiB per rank but %s, and a run may use %.2f GiB (%s): shard more (a higher -z, "
               "more ranks), lower -b or -t, or recompute more (-r 2)\n", need / GiB, where.c_str(), usable / GiB,
               margin.c_str());
}

int print_run_plan(const TrainerSpec& spec, const TrainOptions& opt, const ModelConfig& config,
                   int num_ranks, bool main_rank) {
    if (!spec.plan_memory) fail("--dry-run: this trainer cannot plan its memory");
    // A run of several ranks, or one started by an MPI launcher, communicates (and shards per -z).
    const bool communicates = num_ranks > 1 || spec.ranks != nullptr;
    const ModelMemory memory = spec.plan_memory(config, opt, num_ranks, communicates);
    if (!main_rank) return 0;
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    printf("model: %s (%s), %zu parameters\n", model_source_text(opt, false, 0).c_str(),
           describe_model(config).c_str(), parameter_count(config));
    const int micro_steps = grad_accum_steps(opt, num_ranks);
    const Mesh mesh = make_mesh(num_ranks, 0, opt.tensor_parallel, opt.pipeline_parallel, opt.shard_ranks);
    const std::string shape = mesh.tensor > 1 || mesh.pipeline > 1 ? " as " + mesh.shape() : "";
    const std::string hybrid =
        communicates && mesh.hybrid()
            ? strprintf(" within groups of %d data ranks, replicated over %d groups (--shard-ranks)", mesh.shard,
                        mesh.replicas())
            : "";
    printf("plan: %d rank%s%s, %s%s; B=%d T=%d, %lld tokens per step (%d micro-step%s)\n", num_ranks,
           num_ranks == 1 ? "" : "s", shape.c_str(), communicates ? zero_stage_text(opt.zero_stage) : "one rank",
           hybrid.c_str(), opt.batch_size, opt.seq_len, opt.total_batch, micro_steps, micro_steps == 1 ? "" : "s");
    if (num_ranks > 1)
        printf("nodes: %d ranks per node (%s)\n", opt.node_ranks > 0 ? opt.node_ranks : kDryRunNodeRanks,
               opt.node_ranks > 0 ? "--node-ranks" : "the dry run's default; --node-ranks N to change it");
    print_memory_report(memory);
    double device = opt.device_memory_gib * GiB;
    std::string where = strprintf("a %.1f GiB device (--device-memory)", opt.device_memory_gib);
    if (device == 0 && spec.device_memory) {
        device = (double)spec.device_memory();
        where = strprintf("this machine's %.1f GiB free", device / GiB);
    }
    print_fits_verdict((double)memory.total(), device, where);
    printf("dry run: nothing was allocated or trained\n");
    return 0;
}
