// Pipeline parallelism end to end (-pp, --pp-schedule) and the full mesh: the emulated CUDA trainer
// (train_gpt_emu_fp32) on up to 8 MPI ranks, oversubscribed, gives the per-step losses and final
// weights of one rank (fp32: within 1e-5 relative; the tied embedding's two gradients are summed in
// another order): 2 and 4 stages, 3 stages over 5 layers, with 2 tensor ranks, with 2 data ranks under
// -z 1 and -z 3, and 2 data x 2 pipeline x 2 tensor ranks; GPipe and 1F1B give the same bits;
// checkpoints move between meshes; --dry-run plans what the stages allocate.
#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

// 4 layers of 4 heads (head size 32): 862,976 parameters.
const char* MODEL = "custom:L4:C128:H4:V512:T32";

std::string run(int ranks, const std::string& flags, const std::string& model = MODEL) {
    return trainer_runs::run(ranks, model, default_data(), flags);
}

}  // namespace

// -d 256 is 4 micro-batches of 2 × 32 per data rank (2 with 2 data ranks): the pipeline's micro-batches.
TEST(pipeline_matches_one_rank) {
    const std::string flags = "-d 256 -x 3 -o ";
    const std::string one = out_dir();
    run(0, flags + one);
    const std::vector<std::string> dirs = check_meshes_match_one_rank(
        MODEL, flags, one,
        {{2, "-pp 2"}, {4, "-pp 4"}, {2, "-pp 2 --pp-schedule gpipe"}, {4, "-pp 2 -tp 2"}, {4, "-pp 2 -z 1"},
         {4, "-pp 2 -z 3"}, {8, "-pp 2 -tp 2 -z 3"}},
        "pipeline: ", 1e-5);
    const std::string& one_f_one_b = dirs[0];
    const std::string& gpipe = dirs[2];
    // The two schedules add every gradient in the same order: the same bits.
    CHECK(read_all(checkpoint_model_path(gpipe, 3)) == read_all(checkpoint_model_path(one_f_one_b, 3)));
    CHECK(read_all(checkpoint_state_path(gpipe, 3, 1)) == read_all(checkpoint_state_path(one_f_one_b, 3, 1)));
}

// The bf16 build, whose gradients are accumulated and reduced in fp32 (--grad-reduce fp32): on 2 data x
// 2 pipeline x 2 tensor ranks under -z 1 the LayerNorm gradients are summed over the tensor group, the
// tied embedding's over the first and last stage and every gradient over the data group, each in fp32,
// and the run tracks one rank's. The tensor ranks' products round differently in bf16, so the runs
// agree to 2e-3 (a bf16 weight holds 8 bits, 4e-3 relative); a missing or doubled sum would move the
// gradient norm by far more.
TEST(mesh_in_the_bf16_build_with_fp32_gradients) {
    const std::string flags = "-d 256 -x 3 -o ";
    const std::string one = out_dir(), mesh = out_dir();
    trainer_runs::run(0, MODEL, default_data(), flags + one, true);
    const std::string log = trainer_runs::run(8, MODEL, default_data(), flags + mesh + " -pp 2 -tp 2 -z 1", true);
    CHECK_MSG(log.find("gradients reduced in fp32") != std::string::npos, "%s", log.c_str());
    check_same_run(mesh, one, 3, 2e-3, "bf16 build, mpirun -np 8 -pp 2 -tp 2 -z 1");
}

// 5 layers over 3 stages (2, 2 and 1 with the classifier), with validation, HellaSwag and samples (the
// last stage's loss and logits sent to the others).
TEST(pipeline_over_five_layers) {
    const std::string model = "custom:L5:C64:H2:V512:T32";
    const std::string flags =
        "-d 256 -x 4 -j " + default_data() + " -v 2 -m 2 -s 4 -g 4 -h 1 --hellaswag-file " + eval_file(512) + " -o ";
    const std::string one = out_dir(), three = out_dir();
    const std::string reference = run(0, flags + one, model);
    const std::string log = run(3, flags + three + " -pp 3", model);
    CHECK_MSG(log.find("layers 0-1 | 2-3 | 4 + classifier") != std::string::npos, "%s", log.c_str());
    CHECK_MSG(count_lines(log, "val loss ") == 3 && count_lines(reference, "val loss ") == 3 &&
                  count_lines(log, "sample: ") == 1,
              "one rank:\n%s\nthree stages:\n%s", reference.c_str(), log.c_str());
    const double val = number_after(log, "val loss ", "val loss "), expected = number_after(reference, "val loss ", "val loss ");
    CHECK_MSG(std::fabs(val - expected) <= 1e-4, "the untrained model's val loss %.4f, one rank's %.4f", val, expected);
    CHECK_MSG(count_lines(log, "HellaSwag: ") == 3 && lines_starting(log, "HellaSwag: ") == lines_starting(reference, "HellaSwag: "),
              "HellaSwag, one rank:\n%sthree stages:\n%s", lines_starting(reference, "HellaSwag: ").c_str(),
              lines_starting(log, "HellaSwag: ").c_str());
    check_same_run(three, one, 4, 1e-5, "mpirun -np 3 -pp 3 over 5 layers");
}

// Universal checkpoints across meshes: 2 tensor x 2 pipeline ranks continue on one rank; one rank
// continues as 2 data x 2 pipeline ranks under ZeRO-3; 8 ranks (2 x 2 x 2) continue on 4 (2 x 2).
TEST(pipeline_checkpoints_move_between_meshes) {
    check_moves(MODEL, default_data(), {{4, "-tp 2 -pp 2", 0, ""}, {0, "", 4, "-pp 2 -z 3"}, {8, "-tp 2 -pp 2 -z 1", 4, "-tp 2 -pp 2"}},
                1e-5);
}

// --dry-run from one process plans the report the stages print once they have allocated: the memory
// and network lines of stage 0 and every stage's line.
TEST(dry_run_plans_what_the_stages_allocate) {
    for (const char* mesh : {"-pp 2", "-pp 2 -tp 2 -z 3 --pp-schedule gpipe"}) {
        const int ranks = std::string(mesh).find("-tp 2") != std::string::npos ? 4 : 2;
        const std::string plan = run(0, strprintf("-d 256 --dry-run 1 --plan-ranks %d %s", ranks, mesh));
        const std::string real = run(ranks, strprintf("-d 256 -x 1 %s", mesh));
        for (const char* prefix : {"memory:", "network:", "pipeline:", "stage "}) {
            const std::string planned = lines_starting(plan, prefix), actual = lines_starting(real, prefix);
            CHECK_MSG(!planned.empty() && planned == actual, "%s: planned\n%sbut the ranks report\n%s", mesh,
                      planned.c_str(), actual.c_str());
        }
    }
}
