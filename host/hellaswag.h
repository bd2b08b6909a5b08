// HellaSwag accuracy (-h 1) on llm.c's multiple-choice eval file, which llm.c's
// dev/data/hellaswag.py writes (dev/data/hellaswag/hellaswag_val.bin, 10,042 examples):
//   header  256 int32: [0] 20240522, [1] 1, [2] number of examples, [3] the longest example in bytes
//   then per example, uint16 values: 65535 (start marker), the example's size in bytes (these
//   fields included), its index, the label (which completion is right), the number of
//   completions, the context's length and tokens, then each completion's length and tokens.
// The model reads context + completion for each completion; the one whose tokens get the lowest
// mean cross-entropy is its answer (llm.c's "acc_norm", completion style). A row longer than the
// model's T keeps its last T tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "host/train_flags.h"
#include "host/train_model.h"

struct EvalExample {
    int index = 0, label = 0;
    std::vector<uint16_t> context;
    std::vector<std::vector<uint16_t>> completions;
};

// Reads and checks a whole eval file (magic, version, each example's markers and sizes, labels,
// tokens below vocab_size); throws InputError naming the file and the example.
std::vector<EvalExample> read_eval_file(const std::string& path, int vocab_size);

struct EvalResult {
    int correct = 0, total = 0;
};
// Evaluates every example with rows of at most T tokens (model.forward with B = 1).
EvalResult evaluate_multiple_choice(TrainModel& model, const std::vector<EvalExample>& examples,
                                    int T);

// The trainer's -h: loaded at start when -h 1 and the file exists, run whenever validation runs.
class HellaSwagEval {
public:
    HellaSwagEval(const TrainOptions& opt, int vocab_size);  // throws InputError naming the flag
    bool active() const { return !examples_.empty(); }
    // The start-up report's line: what runs, or why -h 1 is skipped ("" without -h 1).
    const std::string& note() const { return note_; }
    // "HellaSwag: 12/40 correct = 0.3000 (acc_norm)".
    std::string run(TrainModel& model, int T) const;

private:
    std::vector<EvalExample> examples_;
    std::string note_;
};
