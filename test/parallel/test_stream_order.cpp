// The emulator's queued streams (EMU_STREAMS, emu/stream_queue.h) against the trainer's stream
// ordering. The trainer gives the same bits with queued streams as without, under data parallelism
// (the gradient reductions on their own stream) and ZeRO-3 (the prefetched weight gathers on a third,
// over a communicator of their own), and with those gathers in line on the reductions' stream. A
// build that can leave out one required wait (train_gpt_emu_fp32_broken: the wait named by
// TEST_DROP_WAIT, parallel/comm/stream_wait.h) gives the same bits too when streams run as issued,
// which is why the mode exists: with queued streams each missing wait goes wrong (in some of the random
// orders for weights_gathered, in every one so far for the other two). Without
// gradients_ready the reductions read gradients the backward has not written yet; under -z 3 without
// slot_released a gather overwrites a layer's weights while that layer still computes, and without
// weights_gathered the layer computes before its weights arrive.
// (gradients_ready runs without CUDA graphs: capturing a micro-step, the emulator, like a GPU, refuses
// the reduction stream's work as outside the capture, since without the wait that stream never joins
// it. ZeRO-3 runs without them anyway.)
// The same broken build with TEST_UNDECLARED_BUCKET=1 leaves a bucket out of a layer's declaration
// (gpu/parameter_scope.h): the run must stop at once, naming the layer and the bucket.
#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

const char* MODEL = "custom:L2:C64:H2:V512:T32";
// 4 layers: ZeRO-3's two layer slots each take a second layer within a pass.
const char* DEEPER_MODEL = "custom:L4:C64:H2:V512:T32";
const char* FLAGS = "-d 256 -x 2 -o ";  // 2 ranks: 2 micro-batches each, 2 steps

// Trains 2 ranks with `program` and `flags`, streams queued with `seed` (0: run as issued), leaving out
// the wait `dropped` names (the broken build only; "" none); returns the output folder.
std::string train(const std::string& program, const std::string& flags, int seed, const std::string& dropped = "",
                  const char* model = MODEL) {
    const std::string dir = out_dir();
    const std::string environment =
        (seed ? "EMU_STREAMS=" + std::to_string(seed) : "EMU_STREAMS=") + " TEST_DROP_WAIT=" + dropped;
    run_program(program, environment, 2, model, default_data(), FLAGS + dir + " " + flags);
    return dir;
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
    struct Case {
        const char *wait, *flags, *model;
    } cases[] = {{"gradients_ready", "-z 0 --cuda-graphs 0", MODEL},
                 {"slot_released", "-z 3", DEEPER_MODEL},
                 {"weights_gathered", "-z 3", DEEPER_MODEL}};
    for (const Case& c : cases) {
        const std::string issued = train(trainer(), c.flags, 0, "", c.model);
        check_same_run(train(broken_trainer(), c.flags, 0, c.wait, c.model), issued, 2, 0.0,
                       strprintf("%s, streams as issued", c.wait).c_str());
        // A seed draws one random order of the queued work, which may happen to be a safe one (a
        // weight gather runs late in only some orders): of six seeds at least two must go wrong. Any
        // difference is wrong: with every wait, queued streams give the issued order's bits exactly.
        int wrong = 0;
        for (int seed : {1, 2, 3, 4, 5, 6}) {
            const double err = weight_difference(train(broken_trainer(), c.flags, seed, c.wait, c.model), issued, 2);
            printf("  %s missing (%s), EMU_STREAMS=%d: weights differ by %.2g\n", c.wait, c.flags, seed, err);
            wrong += err > 0;
        }
        CHECK_MSG(wrong >= 2, "%s missing: only %d of 6 seeds of queued streams went wrong", c.wait, wrong);
    }
}

// The gathers that overlap on a communicator and a stream of their own (-z 3's weight gathers beside
// its reductions, the tensor group's prefetched gathers beside its all-reduces) give the same bits in
// line on the other communicator, as they run where NCCL cannot order several communicators' launches
// (NCCL_LAUNCH_ORDER_IMPLICIT=0, or an NCCL before 2.26: parallel/comm/launch_order.h); that run says
// so and holds one communicator fewer. Both with queued streams.
TEST(gathers_overlapping_or_in_line_give_the_same_bits) {
    for (const char* flags : {"-z 3", "-tp 2"}) {
        const std::string overlapped = out_dir(), in_line = out_dir();
        const std::string log = run_program(trainer(), "EMU_STREAMS=1", 2, MODEL, default_data(),
                                            FLAGS + overlapped + " " + flags);
        const std::string log_in_line = run_program(trainer(), "EMU_STREAMS=1 NCCL_LAUNCH_ORDER_IMPLICIT=0", 2, MODEL,
                                                    default_data(), FLAGS + in_line + " " + flags);
        check_same_run(in_line, overlapped, 2, 0.0, strprintf("%s, gathers in line", flags).c_str());
        const char* note = "note: NCCL_LAUNCH_ORDER_IMPLICIT=0: the gathers";
        CHECK_MSG(log_in_line.find(note) != std::string::npos && log.find(note) == std::string::npos, "%s\n%s",
                  log.c_str(), log_in_line.c_str());
        const double communicators = number_after(log, "overhead:", "MiB ("),
                     in_line_communicators = number_after(log_in_line, "overhead:", "MiB (");
        CHECK_MSG(communicators >= 2 && communicators == in_line_communicators + 1, "%s: %g and %g communicators",
                  flags, communicators, in_line_communicators);
    }
}

// A unit that asks for a bucket it did not declare stops the run at once with one line naming the unit
// and the bucket (gpu/parameter_scope.h): the broken build's GPT-2 with TEST_UNDECLARED_BUCKET=1 leaves
// the next layer's norm out of each layer's declared reads, which its fused residual add then reads.
// Under -z 3, where a missing gather would otherwise be found only by the slot check or by wrong bits,
// and on one plain process, where nothing is gathered at all.
TEST(a_layer_reading_an_undeclared_bucket_is_stopped_naming_both) {
    for (int ranks : {0, 2}) {
        const std::string launcher = ranks ? "mpirun --oversubscribe -np 2 " : "";
        const std::string command = "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 "
                                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TEST_UNDECLARED_BUCKET=1 timeout 120 " +
                                    launcher + broken_trainer() + " -e " + MODEL + " -i " + default_data() +
                                    " -b 2 -t 32 -v 0 -s 0 -x 1 -o " + out_dir() + (ranks ? " -z 3" : "");
        std::string out;
        const int status = tst::run_command(command, &out);
        const char* line = "error: internal error: layer 0's forward reads the weights of layer 1's bucket, which it "
                           "did not declare";
        CHECK_MSG(status != 0 && status != 124 && out.find(line) != std::string::npos, "%d ranks: exit %d\n%s", ranks,
                  status, out.c_str());
    }
}
