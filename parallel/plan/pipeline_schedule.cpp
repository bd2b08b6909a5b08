// Pipeline schedules and the stages' layers (see pipeline_schedule.h).
#include "parallel/plan/pipeline_schedule.h"

#include <algorithm>

#include "base/errors.h"

static int warm_up(const std::string& kind, int stages, int stage, int m) {
    return kind == "gpipe" ? m : std::min(stages - stage - 1, m);
}

std::vector<PipelineAction> pipeline_schedule(const std::string& kind, int stages, int stage, int m) {
    if (kind != "1f1b" && kind != "gpipe") fail("unknown pipeline schedule '%s' (1f1b, gpipe)", kind.c_str());
    const int ahead = warm_up(kind, stages, stage, m);
    std::vector<PipelineAction> actions;
    for (int i = 0; i < ahead; i++) actions.push_back({true, i});
    for (int i = 0; i < m - ahead; i++) {  // steady state: one forward, one backward
        actions.push_back({true, ahead + i});
        actions.push_back({false, i});
    }
    for (int i = std::max(0, m - ahead); i < m; i++) actions.push_back({false, i});
    return actions;
}

int micro_batches_in_flight(const std::string& kind, int stages, int stage, int m) {
    return kind == "gpipe" ? m : std::min(stages - stage, m);
}

double pipeline_bubble(int stages, int m) { return (double)(stages - 1) / (m + stages - 1); }

std::vector<int> stage_layers(const ModelShape& shape, int T, int stages) {
    const int L = shape.num_layers;
    if (stages < 1 || stages > L) fail("%d pipeline stages for %d layers", stages, L);
    // Forward FLOPs per token: a layer's products and attention; the classifier's product.
    const double layer = shape.layer_flops(T), classifier = shape.classifier_flops();
    auto cost = [&](int first, int end) { return (end - first) * layer + (end == L ? classifier : 0); };
    // Contiguous split minimising the largest stage: best[s][l] = the best largest cost of splitting
    // layers [0, l) into s stages (L and P are small).
    const double inf = 1e300;
    std::vector<std::vector<double>> best(stages + 1, std::vector<double>(L + 1, inf));
    std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(L + 1, 0));
    best[0][0] = 0;
    for (int s = 1; s <= stages; s++)
        for (int l = s; l <= L; l++)
            for (int k = s - 1; k < l; k++) {
                const double worst = std::max(best[s - 1][k], cost(k, l));
                if (worst < best[s][l]) best[s][l] = worst, cut[s][l] = k;
            }
    std::vector<int> first(stages + 1);
    first[stages] = L;
    for (int s = stages; s > 0; s--) first[s - 1] = cut[s][first[s]];
    return first;
}

std::string describe_stage_layers(const std::vector<int>& first) {
    std::string text = "layers ";
    for (size_t s = 0; s + 1 < first.size(); s++) {
        if (s) text += " | ";
        text += first[s + 1] - first[s] == 1 ? strprintf("%d", first[s])
                                               : strprintf("%d-%d", first[s], first[s + 1] - 1);
    }
    return text + " + classifier";
}
