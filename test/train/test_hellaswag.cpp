// HellaSwag evaluation across ranks: each rank evaluates every num_ranks-th example and the counts
// are summed, which must give exactly the one-rank result; and the accuracy's place in
// metrics.jsonl. The model is a fake whose logits depend only on the token at each position, so
// that some examples come out right and some wrong; the ranks are fakes that know every rank's
// values.
#include <cmath>

#include "test/eval_only_model.h"
#include "test/test.h"
#include "train/hellaswag.h"
#include "train/metrics_log.h"

// Logits at position t: a fixed pseudo-random function of (token at t, candidate next token).
class BigramModel : public EvalOnlyModel {
public:
    explicit BigramModel(bool collective = false) : collective_(collective) {
        config_.vocab_size = 64, config_.padded_vocab_size = 128;
        model_ = gpt2_model(config_);
    }
    bool forward_is_collective() const override { return collective_; }
    const ModelConfig& model_config() const override { return model_; }
    std::string description() const override { return "bigram fake"; }
    float forward(const int* inputs, const int*, int B, int T) override {
        row_.assign(inputs, inputs + B * T);
        return NAN;
    }
    void logits_at(int t, float* out) override {
        for (int v = 0; v < config_.vocab_size; v++)
            out[v] = 3.0f * (float)std::sin(0.7 * row_[t] + 1.3 * v + 0.01 * row_[t] * v);
    }

private:
    GPTConfig config_;
    ModelConfig model_;
    std::vector<int> row_;
    bool collective_;
};

// Rank `rank` of a group whose k-th call of mean() meets the values every rank passes to its k-th
// call (values[k][r]); it checks that this rank passes its own.
class FakeRanks : public RankGroup {
public:
    FakeRanks(int r, int n, std::vector<std::vector<double>> values) : values_(std::move(values)) {
        rank = r, num_ranks = n;
    }
    double mean(double value) override {
        const std::vector<double>& all = values_.at(call_++);
        CHECK(all.at(rank) == value);
        double sum = 0;
        for (double v : all) sum += v;
        return sum / num_ranks;
    }

private:
    std::vector<std::vector<double>> values_;
    size_t call_ = 0;
};

static std::vector<EvalExample> examples(int count) {
    std::vector<EvalExample> out;
    for (int i = 0; i < count; i++) {
        EvalExample e;
        e.index = i, e.label = i % 4;
        e.context = {(uint16_t)(i % 64), (uint16_t)(i * 7 % 64), (uint16_t)(i * 13 % 64)};
        for (int c = 0; c < 4; c++)
            e.completions.push_back({(uint16_t)((i + c * 5) % 64), (uint16_t)((i * c + 3) % 64)});
        out.push_back(e);
    }
    return out;
}

TEST(hellaswag_split_across_ranks_sums_to_the_one_rank_result) {
    BigramModel model;
    const std::vector<EvalExample> all = examples(23);
    const EvalResult one = evaluate_multiple_choice(model, all, 8);
    CHECK(one.total == 23);
    CHECK_MSG(one.correct > 0 && one.correct < one.total, "%d of %d right: the fake tells nothing",
              one.correct, one.total);
    for (int n : {2, 3, 5, 30}) {
        std::vector<EvalResult> mine(n);
        std::vector<std::vector<double>> values(2, std::vector<double>(n));
        for (int r = 0; r < n; r++) {
            mine[r] = evaluate_multiple_choice(model, all, 8, r, n);
            // Rank r takes examples r, r + n, ...: its share of the 23.
            CHECK_MSG(mine[r].total == (23 - r + n - 1) / n, "ranks %d, rank %d: %d examples", n, r,
                      mine[r].total);
            values[0][r] = mine[r].correct, values[1][r] = mine[r].total;
        }
        for (int r = 0; r < n; r++) {
            FakeRanks ranks(r, n, values);
            const EvalResult sum = sum_over_ranks(mine[r], ranks);
            CHECK_MSG(sum.correct == one.correct && sum.total == one.total,
                      "ranks %d, rank %d: %d/%d, one rank %d/%d", n, r, sum.correct, sum.total,
                      one.correct, one.total);
        }
    }
    CHECK(describe_eval_result(one) == tst::format("HellaSwag: %d/23 correct = %.4f (acc_norm)",
                                                   one.correct, one.correct / 23.0));
}


// Under ZeRO-3 forward() is a collective, so every rank must run the same forwards: each rank then
// evaluates every example (and no counts are exchanged: the fake ranks would fail on a mean()).
TEST(hellaswag_with_a_collective_forward_evaluates_everything_on_every_rank) {
    const std::vector<EvalExample> all = examples(23);
    TrainOptions opt;
    opt.hellaswag = 1;
    opt.hellaswag_file = tst::make_temp_dir() + "/hellaswag.bin";
    write_eval_file(opt.hellaswag_file, all);
    const HellaSwagEval eval(opt, 64);
    CHECK(eval.active());
    BigramModel local, collective(true);
    const EvalResult one = evaluate_multiple_choice(local, all, 8);
    for (int r = 0; r < 3; r++) {
        FakeRanks ranks(r, 3, {});
        const EvalResult result = eval.run(collective, 8, ranks);
        CHECK(result.correct == one.correct && result.total == 23);
    }
}

TEST(hellaswag_accuracy_goes_to_the_metrics_log) {
    StepMetrics m;
    m.step = 40, m.has_val = true, m.val_loss = 3.21, m.has_hellaswag = true;
    m.hellaswag_accuracy = 0.295;
    CHECK(metrics_json(m) == "{\"step\":40,\"val_loss\":3.210000,\"hellaswag\":0.2950}");
    StepMetrics baseline;
    baseline.has_hellaswag = true, baseline.hellaswag_accuracy = 0.25;
    CHECK(metrics_json(baseline) == "{\"step\":0,\"hellaswag\":0.2500}");
}
