// The pipeline's plan (parallel/plan/pipeline_schedule.h), checked exhaustively on small pipelines:
// every schedule runs each micro-batch's forward and backward once, forwards and backwards each in
// micro-batch order, keeps at most the stated number of micro-batches in flight, and a simulation of
// the stages exchanging activations and gradients finishes (no stage waits forever); the layer split
// is contiguous, gives every stage a layer, and balances the stages as well as any split does.
#include <algorithm>
#include <functional>

#include "base/llama_descriptor.h"
#include "base/model_descriptor.h"
#include "parallel/plan/pipeline_schedule.h"
#include "test/test.h"

TEST(schedules_run_every_micro_batch_once_in_order) {
    for (const char* kind : {"1f1b", "gpipe"})
        for (int P = 1; P <= 5; P++)
            for (int s = 0; s < P; s++)
                for (int m = 1; m <= 9; m++) {
                    const std::vector<PipelineAction> actions = pipeline_schedule(kind, P, s, m);
                    CHECK((int)actions.size() == 2 * m);
                    int forwards = 0, backwards = 0, in_flight = 0, most = 0;
                    for (const PipelineAction& a : actions) {
                        // Forwards and backwards each come in micro-batch order, a backward after its forward.
                        if (a.forward) {
                            CHECK_MSG(a.micro_batch == forwards, "%s P%d s%d m%d: forward %d", kind, P, s, m, a.micro_batch);
                            forwards++, in_flight++;
                        } else {
                            CHECK_MSG(a.micro_batch == backwards && backwards < forwards, "%s P%d s%d m%d: backward %d",
                                      kind, P, s, m, a.micro_batch);
                            backwards++, in_flight--;
                        }
                        most = std::max(most, in_flight);
                    }
                    CHECK_MSG(most == micro_batches_in_flight(kind, P, s, m), "%s P%d s%d m%d: %d in flight, stated %d",
                              kind, P, s, m, most, micro_batches_in_flight(kind, P, s, m));
                }
    // 1F1B's point: the first stage keeps P micro-batches, not m.
    CHECK(micro_batches_in_flight("1f1b", 4, 0, 16) == 4 && micro_batches_in_flight("gpipe", 4, 0, 16) == 16);
    CHECK(std::fabs(pipeline_bubble(4, 12) - 3.0 / 15) < 1e-12);
}

// Stages take their actions in order; a forward (not on the first stage) needs the previous stage's
// forward of the same micro-batch done, a backward (not on the last stage) the next stage's backward.
// Round after round, every stage that can run its next action does; the step must finish.
TEST(stages_never_wait_for_each_other_forever) {
    for (const char* kind : {"1f1b", "gpipe"})
        for (int P = 1; P <= 6; P++)
            for (int m = 1; m <= 10; m++) {
                std::vector<std::vector<PipelineAction>> actions;
                for (int s = 0; s < P; s++) actions.push_back(pipeline_schedule(kind, P, s, m));
                std::vector<size_t> next(P, 0);
                std::vector<std::vector<bool>> forward_done(P, std::vector<bool>(m)), backward_done = forward_done;
                bool progress = true;
                while (progress) {
                    progress = false;
                    for (int s = 0; s < P; s++) {
                        if (next[s] == actions[s].size()) continue;
                        const PipelineAction a = actions[s][next[s]];
                        const bool ready = a.forward ? s == 0 || forward_done[s - 1][a.micro_batch]
                                                     : s == P - 1 || backward_done[s + 1][a.micro_batch];
                        if (!ready) continue;
                        (a.forward ? forward_done : backward_done)[s][a.micro_batch] = true;
                        next[s]++, progress = true;
                    }
                }
                for (int s = 0; s < P; s++)
                    CHECK_MSG(next[s] == actions[s].size(), "%s P%d m%d: stage %d stuck at action %zu", kind, P, m, s,
                              next[s]);
            }
}

// The split is contiguous with a layer per stage, and no split has a smaller largest stage (checked
// against every split of up to 8 layers, for GPT-2's and Llama 3's costs per layer); GPT-2 124M's
// classifier (about 5.5 layers' worth) leaves the last of 4 stages fewer layers than the first.
static void check_balanced_splits(ModelShape shape, int T) {
    const double layer = shape.layer_flops(T), classifier = shape.classifier_flops();
    for (int L = 1; L <= 8; L++) {
        shape.num_layers = L;
        for (int P = 1; P <= L; P++) {
            const std::vector<int> first = stage_layers(shape, T, P);
            CHECK(first.size() == (size_t)P + 1 && first[0] == 0 && first[P] == L);
            auto largest = [&](const std::vector<int>& split) {
                double worst = 0;
                for (int s = 0; s < P; s++)
                    worst = std::max(worst, (split[s + 1] - split[s]) * layer + (s == P - 1 ? classifier : 0));
                return worst;
            };
            for (int s = 0; s < P; s++) CHECK(first[s + 1] > first[s]);
            // Every split of L layers into P non-empty stages.
            double best = 1e300;
            std::vector<int> split(P + 1, 0);
            split[P] = L;
            std::function<void(int)> each = [&](int s) {
                if (s == P) return (void)(best = std::min(best, largest(split)));
                for (int at = split[s - 1] + 1; at <= L - (P - s); at++) split[s] = at, each(s + 1);
            };
            if (P == 1) best = largest(split); else each(1);
            CHECK_MSG(largest(first) <= best * (1 + 1e-12), "L%d P%d: %.3g, best %.3g", L, P, largest(first), best);
        }
    }
}

TEST(stage_layers_balance_the_stages) {
    const GPTConfig c = config_from_descriptor("d12");
    const int T = 1024;
    // GPT-2's cost, written out: four products 24·C² and attention 2·T·C per token a layer, the
    // classifier 2·C·Vp.
    const ModelShape gpt2 = gpt2_model_shape(c);
    const double C = c.channels;
    CHECK(gpt2.layer_flops(T) == 24 * C * C + 2.0 * T * C && gpt2.classifier_flops() == 2 * C * c.padded_vocab_size);
    check_balanced_splits(gpt2, T);
    // Llama 3.2 1B: q and o 2·C², k and v C²/2 together (8 of 32 heads), the MLP 3·C·F with F = 4C.
    const LlamaConfig llama = llama_config_from_descriptor("llama3.2-1b");
    const ModelShape llama_shape = llama3_model_shape(llama, llama.vocab_size);
    const double Cl = llama.channels, F = llama.ffn_channels;
    CHECK(llama_shape.layer_flops(T) == 2 * (2.5 * Cl * Cl + 3 * Cl * F) + 2.0 * T * Cl);
    check_balanced_splits(llama_shape, T);

    const std::vector<int> split = stage_layers(gpt2, T, 4);
    CHECK_MSG(split[4] - split[3] < split[1] - split[0], "%s", describe_stage_layers(split).c_str());
    printf("  GPT-2 124M over 4 stages: %s\n", describe_stage_layers(split).c_str());
    printf("  Llama 3.2 1B over 4 stages: %s\n", describe_stage_layers(stage_layers(llama_shape, T, 4)).c_str());
}
