// Data parallelism end to end: the emulated CUDA trainer (train_gpt_emu_fp32: the real kernels, the
// NCCL stand-in over MPI) run as 1, 2, 3 and 4 MPI ranks (oversubscribed) on the same global batch
// gives the same per-step losses and final weights as one rank, with all-reduce (-z 0) and every ZeRO
// stage (-z 1, 2, 3), with and without accumulation, and with a parameter count that the ranks do not
// divide. Checkpoints written by 2 ranks resume bitwise on 2, and on 1 and 4 within 1e-6; checkpoints
// move between ZeRO stages and rank counts; --dry-run plans exactly the memory the ranks allocate;
// ZeRO-3 in the bf16 build with recomputation, validation and sampling tracks one rank. Hybrid
// sharding (--shard-ranks) matches one rank under -z 1/2/3, writes each shard's state once, moves its
// checkpoints between meshes, and its plan's memory and within-/across-node traffic are the arithmetic
// written here. Checkpoints taken into reused host memory on 2 ranks are those taken into fresh memory.
// Ranks sum the gradients in another order than one rank's accumulation, so the fp32 results differ
// in the last bits; AdamW divides each update by its gradient's own size, so for elements whose
// gradient is near zero (the key biases' is exactly zero in exact arithmetic) those bits decide the
// update's sign. The learning rate (2e-4, weights of ~0.02) keeps that noise below 1e-6 of the
// weights after a few steps while each step still moves them by ~1%: a wrong update would show.
#include "base/host_arrays.h"
#include "base/model_descriptor.h"
#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

// 134,912 parameters: divisible by 2 and 4, not by 3.
const char* MODEL = "custom:L2:C64:H2:V512:T32";

std::string run(int ranks, const std::string& flags, bool bf16 = false) {
    return trainer_runs::run(ranks, MODEL, default_data(), flags, bf16);
}

// The one-rank run (no mpirun) of "-d 256 -x 4" that ranks_match_one_rank_with_allreduce_and_zero1
// and zero2_and_zero3_match_one_rank compare against: run once, by whichever test comes first.
const std::string& one_rank_reference() {
    static const std::string dir = [] {
        const std::string one = out_dir();
        run(0, "-d 256 -x 4 -o " + one);
        return one;
    }();
    return dir;
}

}  // namespace

// -d 256 = 4 micro-batches of 2x32: one rank accumulates 4, two ranks 2 each, four ranks none.
TEST(ranks_match_one_rank_with_allreduce_and_zero1) {
    const std::string flags = "-d 256 -x 4 -o ";
    const std::string& one = one_rank_reference();
    struct Case {
        int ranks, zero;
    } cases[] = {{1, 1}, {2, 0}, {2, 1}, {4, 0}, {4, 1}};
    for (const Case& c : cases) {
        const std::string dir = out_dir();
        run(c.ranks, flags + dir + " -z " + std::to_string(c.zero));
        const std::string what = "mpirun -np " + std::to_string(c.ranks) + " -z " + std::to_string(c.zero);
        check_same_run(dir, one, 4, 1e-6, what.c_str());
    }
}

// Under -z 1 and -z 2 the updated weights are gathered during the next step's first forward, so reads
// between steps (validation every step, samples every second, the checkpoint) must gather them first:
// with one step's update missing from the other rank's chunks the validation loss would move by about
// 1e-4; here it matches the all-reduce run's on as many ranks (the same validation batches) within
// 1e-6, and so do the samples.
TEST(zero1_and_zero2_reads_between_steps_see_the_updated_weights) {
    const std::string flags = "-d 256 -x 4 -j " + default_data() + " -v 1 -m 1 -s 2 -g 8 -o ";
    const std::string one = out_dir();
    const std::string log_one = run(2, flags + one + " -z 0");
    for (int zero : {1, 2}) {
        const std::string two = out_dir();
        const std::string log_two = run(2, flags + two + " -z " + std::to_string(zero));
        const std::string what = "mpirun -np 2 -z " + std::to_string(zero) + " against -z 0";
        check_same_run(two, one, 4, 1e-6, what.c_str());
        const std::vector<double> a = logged(two, "val_loss"), b = logged(one, "val_loss");
        CHECK_MSG(a.size() == b.size() && a.size() >= 4, "%s: %zu vs %zu validation losses", what.c_str(), a.size(),
                  b.size());
        for (size_t i = 0; i < a.size() && i < b.size(); i++)
            CHECK_MSG(std::fabs(a[i] - b[i]) <= 1e-6 * std::fabs(b[i]) + 1e-6, "%s: val loss %zu %.6f vs %.6f",
                      what.c_str(), i, a[i], b[i]);
        CHECK_MSG(lines_starting(log_two, "sample: ") == lines_starting(log_one, "sample: ") &&
                      !lines_starting(log_one, "sample: ").empty(),
                  "%s: samples differ\n%s\none rank:\n%s", what.c_str(), log_two.c_str(), log_one.c_str());
    }
}

// 134,912 parameters over 3 ranks: the ZeRO shards are padded (-z 1; -z 3 gathers padded chunks).
TEST(zero_with_a_parameter_count_the_ranks_do_not_divide) {
    const std::string flags = "-d 384 -x 3 -o ";
    const std::string one = out_dir();
    run(0, flags + one);
    for (int zero : {1, 3}) {
        const std::string three = out_dir();
        run(3, flags + three + " -z " + std::to_string(zero));
        check_same_run(three, one, 3, 1e-6, ("mpirun -np 3 -z " + std::to_string(zero)).c_str());
    }
}

// A ZeRO-1 checkpoint of 2 ranks (two shards) resumes on 2 ranks bit for bit, and on 1 and 4 ranks
// (re-sharded) within 1e-6 of the uninterrupted run.
TEST(zero1_checkpoint_resumes_on_other_rank_counts) {
    const std::string flags = "-d 256 -x 4 -z 1 -n 2 -y 1 -o ";
    const std::string straight = out_dir();
    run(2, flags + straight);
    // The run stopped at step 2, once: each resume starts from a copy of its directory.
    const std::string stopped = out_dir();
    run(2, flags + stopped + " --stop-at 2");
    CHECK(path_exists(checkpoint_state_path(stopped, 2, 1)));  // one shard per rank
    for (int ranks : {2, 1, 4}) {
        const std::string dir = out_dir();
        CHECK(tst::run_command("cp -r " + stopped + " " + dir, nullptr) == 0);
        const std::string log = run(ranks, flags + dir);
        CHECK_MSG(log.find("resumed from step 2") != std::string::npos, "%s", log.c_str());
        if (ranks == 2) {
            for (const std::string& file :
                 {checkpoint_model_path(dir, 4), checkpoint_state_path(dir, 4, 0),
                  checkpoint_state_path(dir, 4, 1)}) {
                const std::string name = file.substr(file.rfind('/') + 1);
                CHECK_MSG(read_all(file) == read_all(straight + "/" + name), "%s differs after resuming",
                          name.c_str());
            }
        } else {
            CHECK(log.find("re-sharded") != std::string::npos);
            const std::string what = "resumed on " + std::to_string(ranks) + " rank(s)";
            check_same_run(dir, straight, 4, 1e-6, what.c_str());
        }
    }
}

// A model over the 32 MiB above which checkpoints and snapshots reuse their host memory
// (base/host_arrays.h), on 2 ranks: the model file rank 0 assembles from the gathered parts and the
// state files, taken after every step (each also a snapshot, its parts passed around the ring) into
// the memory the step before was written from, hold the bytes of the same checkpoint taken once.
TEST(checkpoints_in_reused_host_memory_on_two_ranks) {
    const char* big = "custom:L1:C256:H4:V32768:T32";
    CHECK(parameter_count(gpt2_model(config_from_descriptor(big))) * sizeof(float) > kReusedArrayBytes);
    const std::string every = out_dir(), once = out_dir();
    trainer_runs::run(2, big, default_data(), "-x 3 -z 1 -n 1 -nk 3 --snapshot-every 1 -o " + every);
    trainer_runs::run(2, big, default_data(), "-x 3 -z 1 -n 3 -o " + once);
    for (const std::string& file :
         {checkpoint_model_path(once, 3), checkpoint_state_path(once, 3, 0), checkpoint_state_path(once, 3, 1)}) {
        const std::string name = file.substr(file.rfind('/') + 1);
        CHECK_MSG(!read_all(file).empty() && read_all(file) == read_all(every + "/" + name), "%s differs",
                  name.c_str());
    }
}

// ZeRO-2 (gradients sharded, reduce-scattered every micro-step) and ZeRO-3 (weights sharded too,
// gathered per layer): 1, 2 and 4 ranks (4, 2 and 1 micro-steps of accumulation) match one rank.
TEST(zero2_and_zero3_match_one_rank) {
    const std::string flags = "-d 256 -x 4 -o ";
    const std::string& one = one_rank_reference();
    for (int ranks : {1, 2, 4})
        for (int zero : {2, 3}) {
            const std::string dir = out_dir();
            run(ranks, flags + dir + " -z " + std::to_string(zero));
            const std::string what = "mpirun -np " + std::to_string(ranks) + " -z " + std::to_string(zero);
            check_same_run(dir, one, 4, 1e-6, what.c_str());
        }
}

// ZeRO-3 with the rest of the trainer, in the bf16 build: recomputation (-r 2), validation and
// sampling (forward passes that gather the weights on every rank), the outlier detectors, on 2 ranks
// against one rank. bf16 gradients reduce-scattered across ranks round differently from one rank's
// accumulation, so losses agree to 1e-3 and weights to 2e-3 (measured 2.3e-4; a bf16 weight holds
// 8 bits, 4e-3 relative). -r 0 and -r 2 give the same bits, as on one rank.
TEST(zero3_bf16_with_validation_sampling_and_recompute) {
    const std::string flags = "-d 256 -x 4 -j " + default_data() + " -v 2 -m 2 -s 2 -g 8 -sl 5 -sg 5 -o ";
    const std::string one = out_dir(), r0 = out_dir(), r2 = out_dir();
    const std::string log_one = run(0, flags + one + " -r 1", true);
    run(2, flags + r0 + " -z 3 -r 0", true);
    const std::string log_two = run(2, flags + r2 + " -z 3 -r 2", true);
    for (const char* prefix : {"val loss ", "sample: "})
        CHECK_MSG(count_lines(log_one, prefix) == 3 - (prefix[0] == 's') && count_lines(log_two, prefix) ==
                  count_lines(log_one, prefix), "'%s' lines: one rank\n%s\ntwo ranks\n%s", prefix,
                  log_one.c_str(), log_two.c_str());
    check_same_run(r2, one, 4, 2e-3, "bf16, 2 ranks -z 3 -r 2");
    CHECK_MSG(read_all(checkpoint_model_path(r0, 4)) == read_all(checkpoint_model_path(r2, 4)),
              "bf16 -z 3: -r 0 and -r 2 differ");
}

// --grad-reduce in the bf16 build, where the backward computes each micro-step's gradients in bf16:
// with fp32 (the default) they are accumulated over micro-steps and reduced across ranks in fp32,
// with bf16 every micro-step's addition and every reduction rounds to bf16. 2 ranks under -z 2 with
// 16 micro-steps each end nearer the fp32 CPU trainer's master weights in fp32 than in bf16 (measured
// 3.6e-4 against 3.8e-4: most of the distance is the bf16 forward and backward, the same in both).
// And in fp32 the number of ranks and the ZeRO stage do not change the result: sums of a few dozen
// bf16 values are exact in fp32 whatever their order (measured: the same bits as one rank's
// 32-micro-step run, under every stage), where bf16 sums round differently with every split (3.1e-4).
TEST(fp32_gradient_reduction_in_the_bf16_build) {
    const std::string flags = "-d 2048 -x 2 -o ";  // 32 micro-batches of 2x32 a step
    const std::string cpu = out_dir(), one = out_dir(), fp32 = out_dir(), one_bf16 = out_dir(), bf16 = out_dir();
    run_program(cpu_trainer(), "", 0, MODEL, default_data(), flags + cpu);
    run(0, flags + one, true);
    run(2, flags + fp32 + " -z 2", true);
    run(0, flags + one_bf16 + " --grad-reduce bf16", true);
    const std::string log_bf16 = run(2, flags + bf16 + " -z 2 --grad-reduce bf16", true);
    CHECK_MSG(log_bf16.find("gradients reduced in bf16") != std::string::npos, "%s", log_bf16.c_str());
    auto distance = [&](const std::string& dir, int ranks, const std::string& reference, int reference_ranks) {
        const std::vector<float> a = master_weights(dir, 2, ranks), b = master_weights(reference, 2, reference_ranks);
        CHECK(a.size() == b.size());
        return tst::rel_l2_error(a.data(), b.data(), std::min(a.size(), b.size()));
    };
    const double cpu_fp32 = distance(fp32, 2, cpu, 1), cpu_bf16 = distance(bf16, 2, cpu, 1);
    const double ranks_fp32 = distance(fp32, 2, one, 1), ranks_bf16 = distance(bf16, 2, one_bf16, 1);
    printf("  master weights, 2 ranks -z 2 against the fp32 CPU trainer: --grad-reduce fp32 %.3g, bf16 %.3g; "
           "against one rank: fp32 %.3g, bf16 %.3g\n", cpu_fp32, cpu_bf16, ranks_fp32, ranks_bf16);
    CHECK_MSG(cpu_fp32 < cpu_bf16, "against the CPU trainer: fp32 reduction %.3g, bf16 %.3g", cpu_fp32, cpu_bf16);
    CHECK_MSG(ranks_fp32 <= 1e-6 && ranks_bf16 > 1e-5, "against one rank: fp32 %.3g, bf16 %.3g", ranks_fp32,
              ranks_bf16);
    check_same_run(fp32, one, 2, 1e-6, "bf16 build, 2 ranks -z 2, --grad-reduce fp32");
    struct Case {
        int ranks, zero;
    } cases[] = {{2, 0}, {2, 1}, {4, 3}};
    for (const Case& c : cases) {
        const std::string dir = out_dir();
        run(c.ranks, flags + dir + " -z " + std::to_string(c.zero), true);
        check_same_run(dir, one, 2, 1e-6, strprintf("bf16 build, %d ranks -z %d", c.ranks, c.zero).c_str());
    }
}

// Universal checkpoints: a -z 3 run saved by 2 ranks continues on 4 ranks under -z 1 and on one rank
// without communication; a one-rank run continues on 2 ranks under -z 3. Each continuation matches
// the uninterrupted one-rank run.
TEST(checkpoints_move_between_zero_stages_and_rank_counts) {
    check_moves(MODEL, default_data(), {{2, "-z 3", 4, "-z 1"}, {2, "-z 3", 0, "-z 0"}, {0, "-z 0", 2, "-z 3"}}, 1e-6);
}

// Re-sharding reads only what each rank keeps (train/resharding.h). A model of 1.7M parameters,
// whose weights and optimizer state (26 MiB at 16 bytes a parameter) are far more than a rank's
// share, saved at step 1 by 2 ranks and resumed on 4, and saved by 4 and resumed on 3, each resumed
// under -z 3 (every array sharded): each rank reads and holds no more than its share (the whole over
// its ranks, plus the range tables), and its resident memory (VmHWM over the resume) grows by at
// most its share, one array's staging copy to the device and 4 MiB, where reading the whole model
// (as every rank once did) grows it by more than the whole. The continuation matches the
// uninterrupted one-rank run as every move does.
TEST(resharding_reads_only_each_ranks_share) {
    const std::string model = "custom:L2:C256:H4:V512:T32";
    const double whole = 16.0 * param_layout(config_from_descriptor(model)).total / 1048576;  // MiB
    // -d 96: 12 micro-batches of 1x8 tokens, which 1, 2, 3 and 4 ranks divide.
    const std::string flags = "-b 1 -t 8 -d 96 -x 2 -n 1 -y 1 -o ";
    const std::string straight = out_dir();
    trainer_runs::run(0, model, default_data(), flags + straight);
    const MeshMove moves[] = {{2, "-z 1", 4, "-z 3"}, {4, "-z 3", 3, "-z 3"}};
    for (const MeshMove& move : moves) {
        const std::string dir = out_dir();
        trainer_runs::run(move.saved_ranks, model, default_data(), flags + dir + " --stop-at 1 " + move.saved);
        const std::string log = trainer_runs::run(move.ranks, model, default_data(), flags + dir + " " + move.resumed);
        const std::string what = strprintf("%d ranks to %d", move.saved_ranks, move.ranks);
        const std::string line = lines_starting(log, "checkpoint read:");
        const double read = number_after(log, "checkpoint read:", "read at most "),
                     held = number_after(log, "checkpoint read:", "held at most "),
                     of_whole = number_after(log, "checkpoint read:", "the whole model's "),
                     grew = number_after(log, "checkpoint read:", "grew by at most ");
        const double share = whole / move.ranks;
        printf("  %s: read %.2f MiB, held %.2f MiB, resident memory grew by %.2f MiB (share %.2f, whole %.2f)\n",
               what.c_str(), read, held, grew, share, whole);
        CHECK_MSG(std::fabs(of_whole - whole) < 0.01, "%s: %s", what.c_str(), line.c_str());
        CHECK_MSG(read > 0.9 * share && read <= share + 0.5, "%s: %s", what.c_str(), line.c_str());
        CHECK_MSG(held > 0.7 * share && held <= share + 0.5, "%s: %s", what.c_str(), line.c_str());
        if (line.find("(unknown here)") == std::string::npos)
            CHECK_MSG(grew <= share + share / 4 + 4, "%s: %s", what.c_str(), line.c_str());
        else
            printf("  %s: this kernel keeps no resettable VmHWM, so resident memory is not checked\n", what.c_str());
        check_same_run(dir, straight, 2, 1e-6, what.c_str());
    }
}

// ---- hybrid sharding (--shard-ranks)

// 4 ranks as 2 sharding groups of 2 (--shard-ranks 2; --node-ranks 2 makes each group a node) under
// -z 1, 2 and 3, each rank accumulating 2 micro-steps (-d 512: -z 2/3 reduce-scatter within the group
// on each, and average the shard across the groups once): losses, gradient norms and final weights
// match one rank's; the second group's ranks write no optimizer state (their shards are copies), and
// the first group's state files make up one rank's. The dry run plans the traffic the ranks report.
TEST(hybrid_sharding_matches_one_rank) {
    const std::string flags = "-d 512 -x 3 -o ";
    const std::string one = out_dir();
    run(0, flags + one);
    const std::vector<float> one_state = master_weights(one, 3, 1);
    for (int zero : {1, 2, 3}) {
        const std::string dir = out_dir(), hybrid = strprintf(" -z %d --shard-ranks 2 --node-ranks 2", zero);
        const std::string log = run(4, flags + dir + hybrid);
        const std::string what = "mpirun -np 4" + hybrid;
        CHECK_MSG(log.find("over 2 ranks") != std::string::npos &&
                      log.find("replicated over 2 groups (--shard-ranks)") != std::string::npos, "%s", log.c_str());
        check_same_run(dir, one, 3, 1e-6, what.c_str());
        for (int rank : {2, 3})
            CHECK_MSG(read_training_state(checkpoint_state_path(dir, 3, rank)).ranges.empty(),
                      "%s: rank %d (the second group) wrote optimizer state", what.c_str(), rank);
        const std::vector<float> state = master_weights(dir, 3, 4);
        CHECK_MSG(state.size() == one_state.size(), "%s: %zu state values", what.c_str(), state.size());
        const double err = tst::rel_l2_error(state.data(), one_state.data(), one_state.size());
        CHECK_MSG(err <= 1e-6, "%s: the state files differ from one rank's by %.3g", what.c_str(), err);
        const std::string plan = run(0, "-d 512 --dry-run 1 --plan-ranks 4" + hybrid);
        for (const char* prefix : {"memory:", "network:", "network by node:"})
            CHECK_MSG(!lines_starting(plan, prefix).empty() && lines_starting(plan, prefix) == lines_starting(log, prefix),
                      "%s: planned\n%sbut the ranks report\n%s", what.c_str(), lines_starting(plan, prefix).c_str(),
                      lines_starting(log, prefix).c_str());
    }
}

// A checkpoint of a hybrid-sharded run resumes on another mesh: saved by 4 ranks as 2 groups of 2
// under -z 2, continued by 2 ranks as 2 groups of one rank each (--shard-ranks 1: every rank keeps all
// of the optimizer state, the groups average the gradients) under -z 3, and by one rank.
TEST(hybrid_sharding_checkpoints_move_between_meshes) {
    check_moves(MODEL, default_data(),
                {{4, "-z 2 --shard-ranks 2", 2, "-z 3 --shard-ranks 1"}, {4, "-z 2 --shard-ranks 2", 0, ""}}, 1e-6);
}

// --dry-run from one process (--plan-ranks 2) prints the same memory and network lines as the two
// ranks print once they have allocated (their figures are the device allocation's, as
// test_gpu_model checks), for every ZeRO stage; nothing is trained or written.
TEST(dry_run_plans_what_the_ranks_allocate) {
    for (int zero = 0; zero <= 3; zero++) {
        const std::string z = " -z " + std::to_string(zero);
        const std::string dir = out_dir();
        const std::string plan = run(0, "-d 128 --dry-run 1 --plan-ranks 2 -o " + dir + z);
        CHECK_MSG(plan.find("dry run: nothing was allocated") != std::string::npos && !path_exists(dir),
                  "%s", plan.c_str());
        const std::string real = run(2, "-d 128 -x 1" + z);
        for (const char* prefix : {"memory:", "network:"}) {
            const std::string planned = lines_starting(plan, prefix), actual = lines_starting(real, prefix);
            CHECK_MSG(!planned.empty() && planned == actual, "-z %d: planned\n%sbut the ranks report\n%s", zero,
                      planned.c_str(), actual.c_str());
        }
    }
}

// Planning GPT-2 1.5B (B=8, T=1024, -r 2; fp32 storage in this build) on 8 ranks of 40 GiB: each ZeRO
// stage holds less per rank than the one before; -z 0 does not fit, -z 3 does; --plan-ranks needs
// --dry-run.
TEST(dry_run_plans_gpt2_xl_on_8_ranks) {
    double totals[4];
    for (int zero = 0; zero <= 3; zero++) {
        const std::string out = run(0, strprintf("-e d48 -b 8 -t 1024 -r 2 --dry-run 1 --plan-ranks 8 "
                                                 "--device-memory 40 -z %d", zero));
        const std::string memory = lines_starting(out, "memory:");
        const size_t at = memory.find("total ");
        CHECK_MSG(at != std::string::npos, "%s", out.c_str());
        totals[zero] = atof(memory.c_str() + at + 6);
        if (zero > 0) CHECK_MSG(totals[zero] < totals[zero - 1], "-z %d: %.1f MiB, -z %d: %.1f MiB", zero,
                                totals[zero], zero - 1, totals[zero - 1]);
        if (zero == 0) CHECK_MSG(out.find("fits: no") != std::string::npos, "%s", out.c_str());
        if (zero == 3) CHECK_MSG(out.find("fits: yes") != std::string::npos, "%s", out.c_str());
    }
    std::string refused;
    const int status = tst::run_command(trainer() + " -e d12 --plan-ranks 8 2>&1", &refused);
    CHECK_MSG(status != 0 && refused.find("--plan-ranks and --device-memory plan a run") != std::string::npos,
              "%s", refused.c_str());
}

// ---- the planner against arithmetic written here, not the model's requests

namespace {

const double MiB = 1024.0 * 1024.0;
// GPT-2 124M (-e d12): channels, layers, padded vocabulary, positions.
const double C = 768, L = 12, Vp = 50304, positions = 1024;

// Parameters of one layer, and of its slice on a tensor rank (column- and row-parallel matrices and
// the column-parallel biases split; the LayerNorms and the row-parallel biases whole).
double layer_parameters(int tp) { return (12 * C * C + 7 * C) / tp + 6 * C; }
// The vocabulary's rows on a tensor rank: a 1/tp slice rounded up to a multiple of 8.
double vocabulary_rows(int tp) { return std::ceil(std::ceil(Vp / tp) / 8) * 8; }

// NCCL's device memory for one communicator of `ranks` ranks, from the figures gpu/device_overhead.h
// documents: 390 MiB of its own, and with peers 32 channels × 2 connections × (Simple 4 MiB + LL
// 512 KiB + LL128 4,915,200 bytes).
double nccl_bytes(int ranks) {
    const double buffers = 32 * 2 * (4 * MiB + 0.5 * MiB + 4915200);
    return 390 * MiB + (ranks > 1 ? buffers : 0);
}

struct Planned {
    int ranks, zero, tp, pp;
    int shard = 0;  // --shard-ranks (0: the data group shards)
};

// What rank 0 keeps of a run on `p`, in the fp32 build (4-byte weights and gradients, no separate master
// weights, 8 bytes of AdamW moments per parameter), and its overhead; compared with the plan's memory
// line within the printed 0.1 MiB and the buckets' padding (each to a multiple of 128 × data ranks).
void check_plan_by_hand(const Planned& p) {
    const std::string out = trainer_runs::run(0, "d12", default_data(), strprintf("-b 4 -t 1024 -d %d --dry-run 1 --plan-ranks %d -z %d -tp %d -pp %d "
                                             "--shard-ranks %d --device-memory 80", 4 * 1024 * p.ranks / (p.tp * p.pp) * 2, p.ranks, p.zero,
                                             p.tp, p.pp, p.shard));
    const int D = p.ranks / (p.tp * p.pp);  // data ranks
    const int R = p.shard > 0 ? p.shard : D;  // the ranks ZeRO shards over
    int layers = (int)L;                    // stage 0's, from the plan's stage line
    if (p.pp > 1) {
        const std::string stage = lines_starting(out, "stage 0:");
        int first = 0, last = 0;
        CHECK_MSG(sscanf(stage.c_str(), "stage 0: layers %d-%d", &first, &last) == 2, "%s", out.c_str());
        layers = last - first + 1;
    }
    const double embeddings = (vocabulary_rows(p.tp) + positions) * C, layer = layer_parameters(p.tp);
    const double lnf = p.pp == 1 ? 2 * C : 0;
    const double psi = embeddings + layers * layer + lnf;  // stage 0 of a pipeline holds no lnf
    const double shard = psi / R;
    const double weights = p.zero == 3 ? 4 * shard : 4 * psi;
    const double optimizer = p.zero >= 1 ? 8 * shard : 8 * psi;
    const double padding = (layers + 3) * 128.0 * R * 4;
    auto near = [&](const char* key, double expected, double slack) {
        const double planned = number_after(out, "memory:", key) * MiB;
        CHECK_MSG(planned >= expected - 0.05 * MiB && planned <= expected + slack + 0.05 * MiB,
                  "-z %d -tp %d -pp %d --shard-ranks %d: %s%.1f MiB planned, %.1f MiB by hand (+ up to %.1f)\n%s",
                  p.zero, p.tp, p.pp, p.shard, key, planned / MiB, expected / MiB, slack / MiB, out.c_str());
    };
    // -z 3's weights and -z 2/3's gradients add transient whole-bucket slots: checked by size below.
    if (p.zero < 3) near("parameters ", weights, padding);
    if (p.zero < 2) near("gradients ", 4 * psi, padding);
    near("optimizer state ", optimizer, padding + 4096);  // + the update's run table
    if (p.zero >= 2) {
        const double slots = 2 * layer + embeddings + 2 * C;  // two layers, the embeddings, lnf
        near("gradients ", 4 * shard, 4 * (3 * slots) + 4 * embeddings / R + padding);
    }
    // The overhead: context 527 MiB; the world's communicator and, on a split mesh, the data group's, two
    // over the tensor group and the pipeline's, with --shard-ranks the sharding group's and the
    // replicas' (R and D/R ranks), under -z 3 a second over the sharding group (its gathers' own),
    // plus 196 MiB for the first; cuBLASLt's 32 MiB; the timed
    // algorithms' copy of the largest accumulated product (fc's 4C², the classifier's Vs·C) + 8 bytes;
    // graphs (-z 0/1 without a pipeline): two micro-step graphs and the update's, 2,411 bytes a node.
    double nccl = 196 * MiB + nccl_bytes(p.ranks);
    if (p.tp > 1 || p.pp > 1) nccl += nccl_bytes(D) + (p.tp > 1 ? 2 * nccl_bytes(p.tp) : 0) + (p.pp > 1 ? nccl_bytes(p.pp) : 0);
    if (R < D) nccl += nccl_bytes(R) + nccl_bytes(D / R);
    if (p.zero == 3) nccl += nccl_bytes(R);
    const double autotuning = 4 * std::max(4 * C * C / p.tp, p.pp == 1 ? vocabulary_rows(p.tp) * C : 0) + 8;
    const double graphs = p.zero <= 1 && p.pp == 1 ? (2 * (layers * 32 + 64) + 64) * 2411.0 : 0;
    const double overhead = 527 * MiB + nccl + 32 * MiB + autotuning + graphs;
    near("overhead ", overhead, 0);
    for (const char* part : {"CUDA context ", "NCCL ", "cuBLASLt workspace ", "algorithm timing ", "CUDA graphs "})
        CHECK_MSG(lines_starting(out, "overhead:").find(part) != std::string::npos, "%s", out.c_str());
    const double total = number_after(out, "memory:", "total ");
    double parts = 0;
    for (const char* key : {"parameters ", "gradients ", "master weights ", "optimizer state ", "activations ", "overhead "})
        parts += number_after(out, "memory:", key);
    CHECK_MSG(std::fabs(total - parts) <= 0.35, "the memory line does not add up: %s", out.c_str());
}

}  // namespace

// GPT-2 124M planned on 8 ranks under every -z, 2-way tensor and 2-way pipeline parallel: the plan's
// weights, gradients, AdamW state and overhead are what the arithmetic above gives.
TEST(dry_run_matches_arithmetic_by_hand) {
    for (int zero = 0; zero <= 3; zero++) check_plan_by_hand({8, zero, 1, 1});
    for (int zero : {1, 3}) check_plan_by_hand({8, zero, 2, 1});
    for (int zero : {0, 2}) check_plan_by_hand({8, zero, 1, 2});
    check_plan_by_hand({8, 1, 2, 2});
    // Hybrid sharding: ZeRO's shards are those of a group of 4 (-z 1) or 2 (-z 3, and with -tp 2).
    check_plan_by_hand({8, 1, 1, 1, 4});
    check_plan_by_hand({8, 3, 1, 1, 2});
    check_plan_by_hand({8, 3, 2, 1, 2});
}

// The report's traffic split for GPT-2 124M (Ψ = 124,475,904 parameters: buckets of layers, embeddings
// and the final norm that 256 divides, so no padding) on 4 ranks of 2 per node, -z 1, one micro-step,
// 4-byte gradients and weights, by the ring rules (all-gather or reduce-scatter over R ranks: (R−1)·n
// per rank for n per rank; all-reduce of n: 2·(R−1)·⌈n/R⌉):
//   --shard-ranks 2   within: reduce-scatter and gather in the node's group, 4·Ψ/2 each, + the norm's 8;
//                     across: each half averaged with the other node's copy, 2·⌈Ψ/4⌉·4, + the loss's 24
//   no --shard-ranks  across: reduce-scatter and gather over all 4, 3·Ψ/4·4 each, the norm's and the
//                     loss's 24 each; nothing within
//   one node of 4     within: as the line before
TEST(dry_run_splits_traffic_within_and_across_nodes) {
    const double psi = 124475904;
    struct Case {
        const char* flags;
        double within, across;
    } cases[] = {
        {"--shard-ranks 2 --node-ranks 2", 2 * (4 * psi / 2) + 8, 2 * std::ceil(psi / 4) * 4 + 24},
        {"--node-ranks 2", 0, 2 * (3 * psi / 4 * 4) + 48},
        {"--node-ranks 4", 2 * (3 * psi / 4 * 4) + 48, 0},
    };
    for (const Case& c : cases) {
        const std::string out = trainer_runs::run(
            0, "d12", default_data(), strprintf("-b 4 -t 1024 -d 16384 -z 1 --dry-run 1 --plan-ranks 4 %s", c.flags));
        const double within = number_after(out, "network by node:", "network by node: ");
        const double total = number_after(out, "network:", "network: ");
        const std::string line = lines_starting(out, "network by node:");
        const size_t comma = line.find(", ");
        const double across = comma == std::string::npos ? -1 : atof(line.c_str() + comma + 2);
        CHECK_MSG(std::fabs(within - c.within / MiB) <= 0.05 && std::fabs(across - c.across / MiB) <= 0.05 &&
                      std::fabs(total - (c.within + c.across) / MiB) <= 0.05,
                  "%s: %.1f MiB within, %.1f across planned; %.1f and %.1f by hand\n%s", c.flags, within, across,
                  c.within / MiB, c.across / MiB, out.c_str());
    }
    const std::string out = trainer_runs::run(0, "d12", default_data(), "-b 4 -t 1024 -d 16384 -z 1 --dry-run 1 --plan-ranks 4");
    CHECK_MSG(out.find("nodes: 8 ranks per node (the dry run's default") != std::string::npos, "%s", out.c_str());
}

// The fits verdict keeps a 10% margin: GPT-2 124M at B=4 on one rank of a device just above its plan
// does not fit; on one of the plan over 0.9 it does; the line says the margin.
TEST(dry_run_fits_leaves_a_margin) {
    auto run = [](const std::string& flags) { return trainer_runs::run(0, "d12", default_data(), flags); };
    const std::string base = "-b 4 -t 1024 -d 4096 --dry-run 1 --plan-ranks 1 --device-memory ";
    const double total = number_after(run(base + "80"), "memory:", "total ") / 1024;  // GiB
    const std::string tight = run(base + strprintf("%.3f", total * 1.05));
    CHECK_MSG(tight.find("fits: no") != std::string::npos && tight.find("10% margin") != std::string::npos, "%s",
              tight.c_str());
    const std::string roomy = run(base + strprintf("%.3f", total / 0.9 * 1.01));
    CHECK_MSG(roomy.find("fits: yes") != std::string::npos && roomy.find("10% margin") != std::string::npos, "%s",
              roomy.c_str());
}
