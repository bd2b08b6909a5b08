// Fuzz target: llm.c's multiple-choice eval file (HellaSwag) through read_eval_file, then what the
// trainer does with the examples: evaluate_multiple_choice, here on a fake model (tokens folded
// into its 64-token vocabulary) that checks every row and position the evaluation asks for, with a
// context window T of 1 to 16 tokens taken from the input's last byte.
#include <cmath>
#include <vector>

#include "base/formats.h"
#include "test/eval_only_model.h"
#include "test/fuzz/fuzz_target.h"
#include "train/hellaswag.h"

class CheckingModel : public EvalOnlyModel {
public:
    explicit CheckingModel(int max_T) {
        config_.vocab_size = 64, config_.padded_vocab_size = 128, config_.max_seq_len = max_T;
        model_ = gpt2_model(config_);
    }
    const ModelConfig& model_config() const override { return model_; }
    std::string description() const override { return "checking fake"; }
    float forward(const int* inputs, const int* targets, int B, int T) override {
        if (B != 1 || T < 1 || T > config_.max_seq_len || targets) {
            fprintf(stderr, "fuzz: forward(B=%d, T=%d, targets %s) with max T %d\n", B, T,
                    targets ? "given" : "none", config_.max_seq_len);
            abort();
        }
        row_.assign(inputs, inputs + T);
        for (int token : row_)
            if (token < 0 || token >= config_.vocab_size) abort();
        return NAN;
    }
    void logits_at(int t, float* out) override {
        if (t < 0 || t >= (int)row_.size()) {
            fprintf(stderr, "fuzz: logits_at(%d) after a row of %zu tokens\n", t, row_.size());
            abort();
        }
        for (int v = 0; v < config_.vocab_size; v++) out[v] = (float)std::sin(row_[t] * 0.37 + v);
    }

private:
    GPTConfig config_;
    ModelConfig model_;
    std::vector<int> row_;
};

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("hellaswag.bin", data, size);
    expect_clean([&] {
        std::vector<EvalExample> examples = read_eval_file(path, GPT2_VOCAB_SIZE);
        for (EvalExample& e : examples) {
            for (uint16_t& t : e.context) t %= 64;
            for (auto& c : e.completions)
                for (uint16_t& t : c) t %= 64;
        }
        const int T = 1 + (size ? data[size - 1] % 16 : 0);
        CheckingModel model(T);
        const EvalResult r = evaluate_multiple_choice(model, examples, T);
        if (r.total != (int)examples.size() || r.correct < 0 || r.correct > r.total) abort();
    });
    return 0;
}
