// Tensor parallelism end to end (-tp, -sp): the emulated CUDA trainer (train_gpt_emu_fp32) on 2 and 4
// MPI ranks, oversubscribed, gives the per-step losses and final weights of one rank (fp32: within
// 1e-5 relative; the group sums partial products in another order), with and without sequence
// parallelism, alone and composed with data parallelism under ZeRO-1 and ZeRO-3, with gradient
// accumulation; GPT-2's 50,257-token vocabulary split over ranks with the padding in the last slice,
// and a vocabulary the ranks do not divide;
// checkpoints move between -tp 2 and one rank both ways; the start-up report's memory and traffic are
// what the ranks allocate and send (GPUModel checks the traffic itself, every run); sequence
// parallelism divides the activations it can.
#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

// 4 heads (so -tp 4 gives each rank one), head size 32; 466,432 parameters.
const char* MODEL = "custom:L2:C128:H4:V512:T32";

std::string run(int ranks, const std::string& flags, const std::string& model = MODEL) {
    return trainer_runs::run(ranks, model, default_data(), flags);
}

}  // namespace

// -d 256 is 4 micro-batches of 2 × 32 on one data rank (2 on each of 2): accumulation throughout.
TEST(tensor_parallel_matches_one_rank) {
    const std::string flags = "-d 256 -x 3 -o ";
    const std::string one = out_dir();
    run(0, flags + one);
    check_meshes_match_one_rank(MODEL, flags, one,
                                {{2, "-tp 2"}, {4, "-tp 4"}, {2, "-tp 2 -sp 0"}, {2, "-tp 2 -r 2"}, {4, "-tp 2 -z 1"},
                                 {4, "-tp 2 -z 3"}},
                                "tensor parallel over", 1e-5);
}

// GPT-2's vocabulary, 50,257 tokens padded to 50,304: two slices of 25,152 rows, the second ending in
// the 47 padding rows, with training tokens (and targets) drawn from the whole vocabulary; validation
// and samples (the logits' rows gathered from both slices) run too.
TEST(gpt2_vocabulary_split_over_ranks) {
    const std::string model = "custom:L1:C64:H2:T32";  // V 50257 by default
    const std::string tokens = data_file(50257, 4000);
    const std::string flags = "-d 128 -x 2 -j " + tokens + " -v 2 -m 1 -s 2 -g 4 -h 1 --hellaswag-file " +
                              eval_file(50257) + " -o ";
    const std::string one = out_dir(), two = out_dir();
    const std::string reference = trainer_runs::run(0, model, tokens, flags + one);
    const std::string log = trainer_runs::run(2, model, tokens, flags + two + " -tp 2");
    CHECK_MSG(count_lines(log, "val loss ") == 2 && count_lines(log, "sample: ") == 1, "%s", log.c_str());
    CHECK_MSG(count_lines(log, "HellaSwag: ") == 2 && lines_starting(log, "HellaSwag: ") == lines_starting(reference, "HellaSwag: "),
              "HellaSwag, one rank:\n%s-tp 2:\n%s", lines_starting(reference, "HellaSwag: ").c_str(),
              lines_starting(log, "HellaSwag: ").c_str());
    check_same_run(two, one, 2, 1e-5, "GPT-2's vocabulary over -tp 2");
}

// Three ranks: 3 heads, and a padded vocabulary of 512 rows that 3 does not divide (slices of 176 rows,
// the last one ending in 16 rows past the model's); the sequence of 30 positions split in three.
TEST(tensor_parallel_over_three_ranks) {
    const std::string model = "custom:L2:C96:H3:V512:T32";
    const std::string flags = "-t 30 -d 120 -x 3 -o ";
    const std::string one = out_dir(), three = out_dir();
    run(0, flags + one, model);
    run(3, flags + three + " -tp 3", model);
    check_same_run(three, one, 3, 1e-5, "mpirun -np 3 -tp 3");
}

// A -tp 2 checkpoint continues on one rank, and a one-rank checkpoint continues under -tp 2 with
// ZeRO-3 over 2 data ranks: both match the uninterrupted one-rank run.
TEST(tensor_parallel_checkpoints_move_between_meshes) {
    check_moves(MODEL, default_data(), {{2, "-tp 2", 0, ""}, {0, "", 4, "-tp 2 -z 3"}, {2, "-tp 2 -sp 0", 2, "-tp 2"}}, 1e-5);
}

// --dry-run from one process plans the memory and network lines the ranks then report (their memory
// is the arena's requests, their traffic checked against the plan while they train), for -tp 2 with
// and without sequence parallelism and for 2 data x 2 tensor ranks under ZeRO-3.
TEST(dry_run_plans_what_tensor_parallel_ranks_allocate) {
    struct Case {
        int ranks;
        const char* flags;
    } cases[] = {{2, "-tp 2"}, {2, "-tp 2 -sp 0"}, {4, "-tp 2 -z 3"}};
    for (const Case& c : cases) {
        const std::string plan = run(0, strprintf("-d 128 --dry-run 1 --plan-ranks %d %s", c.ranks, c.flags));
        const std::string real = run(c.ranks, strprintf("-d 128 -x 1 %s", c.flags));
        for (const char* prefix : {"memory:", "network:"}) {
            const std::string planned = lines_starting(plan, prefix), actual = lines_starting(real, prefix);
            CHECK_MSG(!planned.empty() && planned == actual, "%s: planned\n%sbut the ranks report\n%s", c.flags,
                      planned.c_str(), actual.c_str());
        }
    }
}

// Sequence parallelism divides by T the activations tensor parallelism alone keeps whole on every
// rank: the residual stream and the LayerNorms, 4 of the 12 (N, C)-sized activations a layer keeps at
// -r 1 (the other 8, qkv, the attention output and the MLP's hidden units, are split by tensor
// parallelism either way). Per layer that leaves 12/T against 4 + 8/T: 0.75 at -tp 2, 0.5 at -tp 4 (as
// in Megatron-LM's accounting), plus the vocabulary-parallel logits, the same in both. The plans of
// GPT-2 350M (B 8, T 1024) show it.
TEST(sequence_parallelism_divides_activations) {
    auto activations = [&](int tp, int sp) {
        const std::string plan =
            run(0, strprintf("-b 8 -t 1024 -r 1 --dry-run 1 --plan-ranks %d -tp %d -sp %d", tp, tp, sp), "d24");
        return number_after(plan, "memory:", "activations ");
    };
    const double ratio2 = activations(2, 1) / activations(2, 0), ratio4 = activations(4, 1) / activations(4, 0);
    printf("  activations with -sp 1 / -sp 0: %.3f at -tp 2, %.3f at -tp 4\n", ratio2, ratio4);
    CHECK_MSG(ratio2 <= 0.80 && ratio2 >= 0.75, "-tp 2: %.3f", ratio2);
    CHECK_MSG(ratio4 <= 0.60 && ratio4 >= 0.50, "-tp 4: %.3f", ratio4);
}
