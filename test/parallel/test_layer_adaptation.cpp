// LAMB and LARS across ranks (the emulated CUDA trainer, fp32 build, under mpirun): their trust
// ratios are taken per tensor over the whole tensor, so every mesh must give one rank's losses,
// gradient norms and weights, although under ZeRO each rank holds a chunk of a layer's tensors, under
// tensor parallelism a slice, and under pipeline parallelism each stage its own layers and the last a
// copy of the tied embedding. A trainer that takes the ratio over the piece a rank holds (the tests'
// broken build, train_gpt_emu_fp32_broken, with TEST_LOCAL_TRUST_RATIO=1: each rank's sums of squares
// left un-added across ranks) fails the same comparison, which shows that it sees the difference.
#include <cstring>
#include <map>

#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

// 4 layers: a pipeline of 2 stages gets 2 each.
const char* MODEL = "custom:L4:C64:H2:V512:T32";
// 3 steps of 4 micro-batches of 2×32 tokens; weight decay on (-c 0.1 in the common flags), the rates
// LAMB and LARS take at this size.
const std::string FLAGS = "-d 256 -x 3 -o ";

std::string optimizer_flags(const char* optimizer) {
    return strcmp(optimizer, "lars") == 0 ? " --optimizer lars -l 2 --trust-coefficient 0.01" : " --optimizer lamb -l 1e-2";
}

// The one-rank run (no mpirun) of FLAGS with `optimizer`, which both tests compare against: run once
// per optimizer, by whichever test comes first.
const std::string& one_rank_reference(const char* optimizer) {
    static std::map<std::string, std::string> dirs;
    auto found = dirs.find(optimizer);
    if (found != dirs.end()) return found->second;
    const std::string one = out_dir();
    run(0, MODEL, default_data(), FLAGS + one + optimizer_flags(optimizer));
    return dirs[optimizer] = one;
}

}  // namespace

// Meshes of 2, 3 and 4 ranks against one rank, for both optimizers: every ZeRO stage, tensor and
// pipeline parallelism, and 2 data × 2 tensor ranks.
TEST(lamb_and_lars_match_one_rank_on_every_mesh) {
    const std::vector<MeshCase> meshes = {
        {2, "-z 1"}, {2, "-z 2"}, {4, "-z 3"}, {2, "-tp 2"}, {2, "-pp 2"}, {4, "-tp 2 -z 1"},
    };
    for (const char* optimizer : {"lamb", "lars"}) {
        const std::string& one = one_rank_reference(optimizer);
        for (const MeshCase& mesh : meshes) {
            const std::string dir = out_dir();
            run(mesh.ranks, MODEL, default_data(), FLAGS + dir + optimizer_flags(optimizer) + " " + mesh.flags);
            check_same_run(dir, one, 3, 1e-6, strprintf("%s, mpirun -np %d %s", optimizer, mesh.ranks, mesh.flags).c_str());
        }
        // 3 ranks: 3 micro-batches a step (-d 192), against one rank's run of the same batch.
        const std::string one_192 = out_dir(), three = out_dir();
        run(0, MODEL, default_data(), "-d 192 -x 3 -o " + one_192 + optimizer_flags(optimizer));
        run(3, MODEL, default_data(), "-d 192 -x 3 -o " + three + optimizer_flags(optimizer) + " -z 1");
        check_same_run(three, one_192, 3, 1e-6, strprintf("%s, mpirun -np 3 -z 1", optimizer).c_str());
    }
}

// The ratio over each rank's own pieces: ZeRO's chunks (-z 1) and tensor-parallel slices (-tp 2)
// move the weights off one rank's by ten times the tolerance above, or more.
TEST(trust_ratios_over_a_ranks_pieces_fail_the_comparison) {
    for (const char* optimizer : {"lamb", "lars"}) {
        const std::string& one = one_rank_reference(optimizer);
        for (const char* mesh : {"-z 1", "-tp 2"}) {
            const std::string dir = out_dir();
            run_program(broken_trainer(), "TEST_LOCAL_TRUST_RATIO=1", 2, MODEL, default_data(),
                        FLAGS + dir + optimizer_flags(optimizer) + " " + mesh);
            const double err = weight_difference(dir, one, 3);
            printf("  %s %s, each rank's own norms: weights differ from one rank's by %.2g\n", optimizer, mesh, err);
            CHECK_MSG(err > 1e-5, "%s %s: only %.3g", optimizer, mesh, err);
        }
    }
}
