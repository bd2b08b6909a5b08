// The emulator's queued streams (EMU_STREAMS, emu/stream_queue.h) against the trainer's stream
// ordering. The trainer gives the same bits with queued streams as without, under data parallelism
// (the gradient reductions on their own stream) and ZeRO-3 (the prefetched weight gathers too). A
// build missing one required wait (train_gpt_emu_fp32_drop_wait: the reduction's wait for the
// backward's gradients, dropped through -DTEST_DROP_WAIT=gradients_ready, parallel/comm/stream_wait.h)
// gives the same bits too when streams run as issued, which is why the mode exists: with queued
// streams its reductions read gradients the backward has not written yet, and its weights go wrong.
// (It runs without CUDA graphs: capturing a micro-step, the emulator, like a GPU, refuses the
// reduction stream's work as outside the capture, since without the wait that stream never joins it.)
#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

const char* MODEL = "custom:L2:C64:H2:V512:T32";
const char* FLAGS = "-d 256 -x 2 -o ";  // 2 ranks: 2 micro-batches each, 2 steps

std::string drop_wait_trainer() {
    const char* build = getenv("BUILD");
    return std::string(build && *build ? build : "build") + "/test/parallel/train_gpt_emu_fp32_drop_wait";
}

// Trains 2 ranks with `program` and `flags`, streams queued with `seed` (0: run as issued); returns the
// output folder.
std::string train(const std::string& program, const std::string& flags, int seed) {
    const std::string dir = out_dir();
    run_program(program, seed ? "EMU_STREAMS=" + std::to_string(seed) : "EMU_STREAMS=", 2, MODEL, default_data(),
                FLAGS + dir + " " + flags);
    return dir;
}

double weight_difference(const std::string& dir, const std::string& reference_dir) {
    const ModelFile x = read_model_file(checkpoint_model_path(dir, 2));
    const ModelFile y = read_model_file(checkpoint_model_path(reference_dir, 2));
    return tst::rel_l2_error(x.params.data(), y.params.data(), y.params.size());
}

}  // namespace

TEST(queued_streams_give_the_same_bits) {
    for (const char* flags : {"-z 0", "-z 3"}) {
        const std::string issued = train(trainer(), flags, 0);
        for (int seed : {1, 2}) {
            const std::string what = strprintf("%s, EMU_STREAMS=%d", flags, seed);
            check_same_run(train(trainer(), flags, seed), issued, 2, 0.0, what.c_str());
        }
    }
}

TEST(a_missing_wait_goes_wrong_only_with_queued_streams) {
    const char* flags = "-z 0 --cuda-graphs 0";
    const std::string issued = train(trainer(), flags, 0);
    check_same_run(train(drop_wait_trainer(), flags, 0), issued, 2, 0.0, "the missing wait, streams as issued");
    for (int seed : {1, 2, 3}) {
        const double err = weight_difference(train(drop_wait_trainer(), flags, seed), issued);
        printf("  the missing wait, EMU_STREAMS=%d: weights differ by %.2g\n", seed, err);
        CHECK_MSG(err > 1e-3, "EMU_STREAMS=%d: the weights differ by only %.3g", seed, err);
    }
}
