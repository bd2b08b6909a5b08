// Gradient compression across ranks (--grad-compression; the emulated CUDA trainer under mpirun): the
// replicas stay bitwise equal after every step (--check-replicas makes the ranks compare a hash of
// their weights and stop where two differ), the residuals resume bit for bit from a checkpoint and start
// afresh with a notice on another rank count, the bytes each rank counts on the wire are the bytes
// --dry-run plans, GPT-2 124M's plan on 8 ranks sends the fewer bytes each method promises, training on
// the built-in text with compression ends within 2% of the uncompressed run's validation loss, and bad
// flags get one-line errors. The maths of each method (quantisers, PowerSGD, the error-feedback
// identity) is checked against references in test/kernels/test_grad_compression.cu, and the byte
// formulas in test/parallel/test_compression_cost.cpp.
#include <cmath>
#include <cstring>
#include <map>

#include "base/model_descriptor.h"
#include "parallel/plan/compression_cost.h"
#include "test/parallel/trainer_runs.h"

using namespace trainer_runs;

namespace {

const char* MODEL = "custom:L2:C64:H2:V512:T32";
const char* METHODS[] = {"powersgd", "int8", "sign"};

// Compression from step 3 (two plain steps first).
std::string compression_flags(const char* method) {
    return strprintf(" --grad-compression %s --compression-start 2 --powersgd-rank 2", method);
}

// The run's exit status and output, for the runs expected to fail.
int run_status(const std::string& flags, std::string* out, int ranks = 2) {
    const std::string command = "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 " +
                                (ranks ? "mpirun --oversubscribe -np " + std::to_string(ranks) + " " : std::string()) +
                                trainer() + " -e " + MODEL + " -i " + default_data() + " -b 2 -t 32 -v 0 -s 0 " +
                                flags + " 2>&1";
    return tst::run_command(command, out);
}

// The exact bytes of the start-up report's "network compressed" line ("(N bytes)"), 0 when absent.
double planned_compressed_bytes(const std::string& log) {
    return number_after(log, "network compressed", "MiB (");
}

}  // namespace

// 2 and 3 ranks, each method, -z 0 (every rank decompresses the whole average itself) and -z 1 (each
// averages its chunk, then the chunks are gathered): every rank's weights hash the same after every
// step, or the run fails. The compressed steps send fewer bytes than the plain ones, and change the
// training (the losses leave the uncompressed run's).
TEST(replicas_stay_bitwise_equal) {
    struct Case {
        int ranks, zero;
    };
    for (const Case c : {Case{2, 0}, Case{3, 0}, Case{2, 1}}) {
        const std::string flags = strprintf("-d %d -x 5 --check-replicas 1 -z %d -o ", 64 * c.ranks, c.zero);
        const std::string plain = out_dir();
        run(c.ranks, MODEL, default_data(), flags + plain);
        const std::vector<double> plain_bytes = logged(plain, "sent_bytes"), plain_losses = losses(plain);
        for (const char* method : METHODS) {
            const std::string dir = out_dir(), what = strprintf("%s on %d ranks, -z %d", method, c.ranks, c.zero);
            run(c.ranks, MODEL, default_data(), flags + dir + compression_flags(method));
            const std::vector<double> bytes = logged(dir, "sent_bytes"), loss = losses(dir);
            CHECK_MSG(bytes.size() == 5 && plain_bytes.size() == 5, "%s: %zu logged steps", what.c_str(), bytes.size());
            for (int step = 0; step < 5; step++) {
                const bool compressed = step >= 2;
                CHECK_MSG(compressed ? bytes[step] < plain_bytes[step] : bytes[step] == plain_bytes[step],
                          "%s: step %d sent %.0f bytes, the uncompressed run %.0f", what.c_str(), step + 1,
                          bytes[step], plain_bytes[step]);
            }
            CHECK_MSG(loss[1] == plain_losses[1] && loss[4] != plain_losses[4],
                      "%s: losses %.6f %.6f, uncompressed %.6f %.6f", what.c_str(), loss[1], loss[4],
                      plain_losses[1], plain_losses[4]);
        }
    }
}

// Stopped at step 4 (two compressed steps in) and resumed on the same 2 ranks, a run ends with the same
// bits as the uninterrupted one: the residuals (and PowerSGD's Q) were saved and read back. A 3-rank
// run resuming the same checkpoint starts them afresh and says so in one line.
TEST(compression_state_resumes_bit_for_bit) {
    for (const char* method : {"powersgd", "int8", "sign"}) {
        const std::string flags = "-d 384 -x 6 -n 2 -y 1" + compression_flags(method) + " -o ";
        const std::string straight = out_dir(), stopped = out_dir();
        run(2, MODEL, default_data(), flags + straight);
        run(2, MODEL, default_data(), flags + stopped + " --stop-at 4");
        const std::string stopped_at_4 = tst::make_temp_dir() + "/at4";
        CHECK(tst::run_command("cp -r " + stopped + " " + stopped_at_4, nullptr) == 0);
        const std::string log = run(2, MODEL, default_data(), flags + stopped);
        CHECK_MSG(log.find("resumed from step 4") != std::string::npos && log.find("notice:") == std::string::npos,
                  "%s", log.c_str());
        const ModelFile a = read_model_file(checkpoint_model_path(straight, 6));
        const ModelFile b = read_model_file(checkpoint_model_path(stopped, 6));
        CHECK_MSG(a.params == b.params, "%s: the resumed run's weights differ from the uninterrupted run's by %.3g",
                  method, tst::rel_l2_error(b.params.data(), a.params.data(), a.params.size()));
        const TrainingState state = read_training_state(checkpoint_state_path(stopped, 4, 1));
        CHECK_MSG(state.compression.data_ranks == 2 && !state.compression.values.empty(),
                  "%s: rank 1's state file holds %zu compression values for %d ranks", method,
                  state.compression.values.size(), state.compression.data_ranks);

        const std::string moved = out_dir();
        // The stopped run's directory as it was at step 4 (the same run as `stopped`'s first, which
        // is deterministic: the bitwise check above), rather than a third run to step 4.
        CHECK(tst::run_command("cp -r " + stopped_at_4 + " " + moved, nullptr) == 0);
        const std::string three = run(3, MODEL, default_data(), flags + moved);
        const std::string notice = lines_starting(three, "notice: the checkpoint's gradient compression state");
        CHECK_MSG(count_lines(notice, "notice:") == 1 && notice.find("on 2 data ranks") != std::string::npos &&
                      notice.find("on 3 data ranks") != std::string::npos && notice.find("start from zero") != std::string::npos,
                  "%s:\n%s", method, three.c_str());
    }
}

// The bytes the ranks count on the wire in each compressed step (metrics.jsonl's sent_bytes) are the
// bytes --dry-run plans for them, and the end-of-run line reports the average.
TEST(dry_run_plans_the_bytes_the_ranks_send) {
    for (const char* method : METHODS)
        for (int zero : {0, 1}) {
            const std::string z = strprintf(" -z %d", zero), what = strprintf("%s -z %d", method, zero);
            const std::string plan = run(0, MODEL, default_data(), "-d 192 --dry-run 1 --plan-ranks 3" + z +
                                                                       compression_flags(method));
            const double planned = planned_compressed_bytes(plan);
            CHECK_MSG(planned > 0, "%s:\n%s", what.c_str(), plan.c_str());
            const std::string dir = out_dir();
            const std::string log = run(3, MODEL, default_data(), "-d 192 -x 4 -o " + dir + z + compression_flags(method));
            CHECK_MSG(planned_compressed_bytes(log) == planned &&
                          number_after(log, "network:", "network: ") == number_after(plan, "network:", "network: "),
                      "%s: planned\n%sthe ranks\n%s", what.c_str(), plan.c_str(), log.c_str());
            const std::vector<double> sent = logged(dir, "sent_bytes");
            CHECK_MSG(sent.size() == 4 && sent[2] == planned && sent[3] == planned,
                      "%s: the compressed steps sent %.0f and %.0f bytes, the plan %.0f", what.c_str(),
                      sent.size() > 2 ? sent[2] : -1, sent.size() > 3 ? sent[3] : -1, planned);
            CHECK_MSG(log.find("traffic: rank 0 sent") != std::string::npos, "%s", log.c_str());
        }
}

// GPT-2 124M on 8 ranks, as the trainer plans it (its buckets, every collective of the step): PowerSGD
// of rank 4 sends at least 50 times fewer bytes than the plain fp32 exchange, int8 at least 1.9 times
// fewer than the bf16 one (--grad-reduce bf16), sign at least 12 times fewer than fp32.
TEST(gpt2_124m_on_8_ranks_sends_fewer_bytes) {
    auto plan = [](const std::string& flags) {
        return run(0, "d12", default_data(), "-b 4 -t 1024 -d 32768 --dry-run 1 --plan-ranks 8 " + flags, true);
    };
    const double MiB = 1024.0 * 1024.0;
    const double fp32 = number_after(plan(""), "network:", "network: ") * MiB;
    const double bf16 = number_after(plan("--grad-reduce bf16"), "network:", "network: ") * MiB;
    std::map<std::string, double> compressed;
    for (const char* method : METHODS)
        compressed[method] = planned_compressed_bytes(plan(strprintf("--grad-compression %s --powersgd-rank 4", method)));
    printf("  GPT-2 124M on 8 ranks, bytes per rank per step: fp32 %.1f MiB, bf16 %.1f MiB, powersgd r=4 %.2f MiB "
           "(%.0fx less than fp32), int8 %.1f MiB (%.2fx less than bf16), sign %.1f MiB (%.1fx less than fp32)\n",
           fp32 / MiB, bf16 / MiB, compressed["powersgd"] / MiB, fp32 / compressed["powersgd"], compressed["int8"] / MiB,
           bf16 / compressed["int8"], compressed["sign"] / MiB, fp32 / compressed["sign"]);
    CHECK_MSG(fp32 > 0 && bf16 > 0 && std::fabs(fp32 / bf16 - 2) < 0.01, "fp32 %.0f, bf16 %.0f", fp32, bf16);
    // The trainer's plan (its buckets, padded chunks, grouped collectives) against the per-tensor ring
    // formulas of parallel/plan/compression_cost.h (checked by hand in test_compression_cost.cpp):
    // within 1%, what bucketing and the step's loss average add or round.
    const std::vector<TensorShape> shapes = model_gradient_shapes(config_from_descriptor("d12"));
    const struct {
        const char* name;
        GradCompression method;
    } formulas[] = {{"powersgd", GradCompression::POWERSGD}, {"int8", GradCompression::INT8}, {"sign", GradCompression::SIGN}};
    for (const auto& f : formulas) {
        CompressionSettings settings;
        settings.method = f.method, settings.ranks = 8, settings.element_bytes = 4, settings.powersgd_rank = 4;
        const double formula = (double)compressed_gradient_bytes(shapes, settings);
        CHECK_MSG(std::fabs(compressed[f.name] / formula - 1) < 0.01, "%s: the plan sends %.0f bytes, the formulas %.0f",
                  f.name, compressed[f.name], formula);
    }
    CHECK_MSG(fp32 >= 50 * compressed["powersgd"], "powersgd: %.1fx", fp32 / compressed["powersgd"]);
    CHECK_MSG(bf16 >= 1.9 * compressed["int8"], "int8: %.2fx", bf16 / compressed["int8"]);
    CHECK_MSG(fp32 >= 12 * compressed["sign"], "sign: %.1fx", fp32 / compressed["sign"]);
}

// Training on the built-in text (Jane Austen's novels; the 511 most frequent GPT-2 tokens kept, the rest
// one token, so that a small model learns in a few hundred steps) on 2 ranks: PowerSGD of rank 4 and
// int8 end within 2% of the uncompressed run's validation loss. sign, which has no such bound, is left
// to dev/grad_compression.sh (its gap on 4 ranks is in dev/RESULTS.md), which saves the suite a
// quarter of this test's time. 100 steps (90 of them compressed) by default, half the time of 200: the
// uncompressed run's validation loss is then 3.533 (ln 512 = 6.24), powersgd's +0.74%, int8's +0.58%.
// STEPS=200 runs the longer version (measured: 3.573, powersgd +1.31%, int8 -0.61%).
TEST(compressed_training_reaches_the_uncompressed_loss) {
    const std::string root = tst::make_temp_dir();
    std::string out;
    CHECK_MSG(tst::run_command("data/prepare janeausten 2>&1", &out) == 0, "%s", out.c_str());
    auto tokens_of = [](const std::string& path) {
        const std::vector<unsigned char> bytes = read_all(path);
        CHECK_MSG(bytes.size() > 1024, "%s: %zu bytes", path.c_str(), bytes.size());
        std::vector<uint16_t> tokens((bytes.size() - 1024) / 2);
        memcpy(tokens.data(), bytes.data() + 1024, tokens.size() * 2);
        return tokens;
    };
    std::vector<uint16_t> train = tokens_of("data/janeausten/janeausten_train.bin");
    std::vector<uint16_t> val = tokens_of("data/janeausten/janeausten_val.bin");
    std::vector<size_t> count(65536);
    for (uint16_t t : train) count[t]++;
    std::vector<int> order(65536);
    for (int i = 0; i < 65536; i++) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
    std::vector<uint16_t> small(65536, 511);
    for (int i = 0; i < 511; i++) small[order[i]] = (uint16_t)i;
    for (uint16_t& t : train) t = small[t];
    for (uint16_t& t : val) t = small[t];
    val.resize(std::min<size_t>(val.size(), 8 * 4 * 32 + 1));
    write_shard(root + "/train.bin", train);
    write_shard(root + "/val.bin", val);

    const int steps = getenv("STEPS") ? atoi(getenv("STEPS")) : 100;
    const std::string flags = strprintf("-b 4 -d 256 -x %d -l 3e-3 -u 10 -q 0.1 -v %d -m 8 -j %s/val.bin -o ", steps,
                                        steps, root.c_str());
    std::map<std::string, double> final_loss;
    for (const char* arm : {"none", "powersgd", "int8"}) {
        const std::string dir = out_dir();
        run(2, MODEL, root + "/train.bin", flags + dir + " --grad-compression " + arm + " --compression-start 10");
        const std::vector<double> val_losses = logged(dir, "val_loss");
        CHECK_MSG(!val_losses.empty(), "%s: no validation loss logged", arm);
        final_loss[arm] = val_losses.empty() ? 0 : val_losses.back();
    }
    const double none = final_loss["none"];
    CHECK_MSG(none < 0.8 * std::log(512.0), "the uncompressed run did not learn: val loss %.3f", none);
    for (const char* arm : {"powersgd", "int8"}) {
        const double gap = (final_loss[arm] - none) / none;
        printf("  %d steps on 2 ranks: %s val loss %.4f, uncompressed %.4f (%+.2f%%)\n", steps, arm, final_loss[arm],
               none, 100 * gap);
        CHECK_MSG(gap <= 0.02, "%s: %.2f%% above the uncompressed loss", arm, 100 * gap);
    }
}

// One-line errors: an unknown method, PowerSGD of rank 0, -z 2 and -z 3, bf16 reduction, model
// parallelism, a negative --compression-start, and --check-replicas where no rank holds a whole replica.
TEST(bad_compression_flags_fail_in_one_line) {
    struct Bad {
        const char* flags;
        const char* says;
    };
    const Bad cases[] = {
        {"--grad-compression topk", "--grad-compression: unknown method 'topk' (none, powersgd, int8, sign)"},
        {"--grad-compression powersgd --powersgd-rank 0", "--powersgd-rank"},
        {"--grad-compression int8 -z 2", "works with -z 0 and -z 1"},
        {"--grad-compression powersgd -z 3", "works with -z 0 and -z 1"},
        {"--grad-compression int8 --grad-reduce bf16", "compresses fp32 gradients"},
        {"--grad-compression int8 -tp 2", "drop -tp, -pp and --shard-ranks"},
        {"--compression-start -1", "--compression-start"},
        {"--check-replicas 1 -z 3", "--check-replicas 1: compares the weights of whole replicas"},
    };
    for (const Bad& bad : cases) {
        std::string out;
        const int status = run_status(std::string("-d 128 -x 1 ") + bad.flags, &out);
        const std::string errors = lines_starting(out, "error");
        CHECK_MSG(status != 0 && out.find(bad.says) != std::string::npos, "'%s': exit %d\n%s", bad.flags, status,
                  out.c_str());
        CHECK_MSG(!errors.empty(), "'%s': no error line\n%s", bad.flags, out.c_str());
    }
}
