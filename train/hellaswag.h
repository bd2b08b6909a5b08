// HellaSwag accuracy (-h 1) on llm.c's multiple-choice eval file, which llm.c's
// dev/data/hellaswag.py writes (dev/data/hellaswag/hellaswag_val.bin, 10,042 examples):
//   header  256 int32: [0] 20240522, [1] 1, [2] number of examples, [3] the longest example in bytes
//   then per example, uint16 values: 65535 (start marker), the example's size in bytes (these
//   fields included), its index, the label (which completion is right), the number of
//   completions, the context's length and tokens, then each completion's length and tokens.
// The model reads context + completion for each completion; the one whose tokens get the lowest
// mean cross-entropy is its answer (llm.c's "acc_norm", completion style). A row longer than the
// model's T keeps its last T tokens. With several ranks each evaluates every num_ranks-th example and
// the counts are summed, so the accuracy is that of the whole file (under ZeRO-3, whose forward pass
// is a collective, every rank evaluates every example).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/ranks.h"
#include "base/train_model.h"
#include "train/train_flags.h"

struct EvalExample {
    int index = 0, label = 0;
    std::vector<uint16_t> context;
    std::vector<std::vector<uint16_t>> completions;
};

// Reads and checks a whole eval file (magic, version, each example's markers and sizes, labels,
// tokens below vocab_size); throws InputError naming the file and the example.
std::vector<EvalExample> read_eval_file(const std::string& path, int vocab_size);

// Writes examples as an eval file in this format (read_eval_file reads them back).
void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples);

struct EvalResult {
    int correct = 0, total = 0;
    double accuracy() const { return total ? (double)correct / total : 0.0; }
};
// Evaluates this rank's share of the examples, those with i % num_ranks == rank (every example for
// one rank), with rows of at most T tokens (model.forward with B = 1). Ranks may evaluate different
// numbers of examples, so forward() must be local to the rank (not under ZeRO-3).
EvalResult evaluate_multiple_choice(TrainModel& model, const std::vector<EvalExample>& examples,
                                    int T, int rank = 0, int num_ranks = 1);

// The counts summed over the ranks (every rank gets the sums).
EvalResult sum_over_ranks(const EvalResult& mine, RankGroup& ranks);

// "HellaSwag: 12/40 correct = 0.3000 (acc_norm)".
std::string describe_eval_result(const EvalResult& result);

// The trainer's -h: loaded at start when -h 1 and the file exists, run whenever validation runs.
class HellaSwagEval {
public:
    // Throws InputError naming the flag. gpt2_tokens: whether the model reads GPT-2's tokens, which
    // llm.c's eval file holds (else the evaluation is skipped, with a note).
    HellaSwagEval(const TrainOptions& opt, int vocab_size, bool gpt2_tokens = true);
    bool active() const { return !examples_.empty(); }
    // The start-up report's line: what runs, or why -h 1 is skipped ("" without -h 1).
    const std::string& note() const { return note_; }
    // Each rank evaluates its share of the examples (all of them where forward() is a collective);
    // every rank gets the counts of all of them.
    EvalResult run(TrainModel& model, int T, RankGroup& ranks) const;

private:
    std::vector<EvalExample> examples_;
    std::string note_;
};
