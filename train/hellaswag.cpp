// llm.c's multiple-choice eval (see hellaswag.h).
#include "train/hellaswag.h"

#include <algorithm>
#include <cmath>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"

constexpr uint16_t EXAMPLE_START = 65535;

// Reads the uint16 stream after the header, one example at a time.
class EvalStream {
public:
    EvalStream(const std::string& path, std::vector<uint16_t> values)
        : path_(path), values_(std::move(values)) {}
    bool done() const { return at_ == values_.size(); }
    size_t position() const { return at_; }
    uint16_t next(int example) {
        if (at_ >= values_.size())
            fail("%s: example %d is cut off at the end of the file", path_.c_str(), example);
        return values_[at_++];
    }
    std::vector<uint16_t> tokens(int example, int vocab_size) {
        const uint16_t count = next(example);
        std::vector<uint16_t> out(count);
        for (uint16_t& t : out) {
            t = next(example);
            if (t >= vocab_size)
                fail("%s: example %d holds token %d, outside the model's vocabulary of %d",
                     path_.c_str(), example, t, vocab_size);
        }
        return out;
    }

private:
    std::string path_;
    std::vector<uint16_t> values_;
    size_t at_ = 0;
};

std::vector<EvalExample> read_eval_file(const std::string& path, int vocab_size) {
    const std::vector<int32_t> h = read_header(path);
    if (h[0] != EVAL_FILE_MAGIC) {
        const char* kind = file_kind_of_magic(h[0]);
        fail("%s: %s%s, not an eval file (magic %d expected)", path.c_str(), kind ? "is " : "",
             kind ? kind : "unknown format", EVAL_FILE_MAGIC);
    }
    if (h[1] != EVAL_FILE_VERSION)
        fail("%s: eval file version %d (expected %d)", path.c_str(), h[1], EVAL_FILE_VERSION);
    const uint64_t bytes = file_size(path) - FILE_HEADER_BYTES;
    if (h[2] <= 0 || bytes % 2) fail("%s: %d examples in %llu bytes", path.c_str(), h[2],
                                     (unsigned long long)bytes);
    std::vector<uint16_t> values(bytes / 2);
    read_bytes(path, FILE_HEADER_BYTES, values.data(), bytes);
    EvalStream stream(path, std::move(values));
    std::vector<EvalExample> examples;
    for (int i = 0; i < h[2]; i++) {
        const size_t start = stream.position();
        if (stream.next(i) != EXAMPLE_START)
            fail("%s: example %d does not start with the 65535 marker", path.c_str(), i);
        const uint16_t size = stream.next(i);
        EvalExample e;
        e.index = stream.next(i);
        e.label = stream.next(i);
        const int completions = stream.next(i);
        e.context = stream.tokens(i, vocab_size);
        for (int c = 0; c < completions; c++) {
            e.completions.push_back(stream.tokens(i, vocab_size));
            if (e.completions.back().empty())
                fail("%s: example %d has an empty completion", path.c_str(), i);
        }
        if (completions == 0 || e.label >= completions)
            fail("%s: example %d has label %d among %d completions", path.c_str(), i, e.label,
                 completions);
        if ((stream.position() - start) * 2 != size)
            fail("%s: example %d says it has %d bytes but has %zu", path.c_str(), i, size,
                 (stream.position() - start) * 2);
        examples.push_back(std::move(e));
    }
    if (!stream.done())
        fail("%s: data after the %d examples its header announces", path.c_str(), h[2]);
    return examples;
}

void write_eval_file(const std::string& path, const std::vector<EvalExample>& examples) {
    std::vector<uint16_t> stream;
    size_t longest = 0;
    for (const EvalExample& e : examples) {
        std::vector<uint16_t> x = {EXAMPLE_START, 0, (uint16_t)e.index, (uint16_t)e.label,
                                   (uint16_t)e.completions.size(), (uint16_t)e.context.size()};
        x.insert(x.end(), e.context.begin(), e.context.end());
        for (const std::vector<uint16_t>& c : e.completions) {
            x.push_back((uint16_t)c.size());
            x.insert(x.end(), c.begin(), c.end());
        }
        x[1] = (uint16_t)(x.size() * 2);
        longest = std::max(longest, x.size() * 2);
        stream.insert(stream.end(), x.begin(), x.end());
    }
    int32_t header[FILE_HEADER_INTS] = {EVAL_FILE_MAGIC, EVAL_FILE_VERSION, (int32_t)examples.size(),
                                        (int32_t)longest};
    AtomicFile file(path);
    file.write(header, sizeof(header));
    file.write(stream.data(), stream.size() * sizeof(uint16_t));
    file.commit();
}

// Mean cross-entropy of the completion's tokens after the context (the last T tokens of the row).
static double completion_loss(TrainModel& model, const std::vector<uint16_t>& context,
                              const std::vector<uint16_t>& completion, int T,
                              std::vector<float>& logits) {
    std::vector<int> row(context.begin(), context.end());
    row.insert(row.end(), completion.begin(), completion.end());
    const size_t start = row.size() > (size_t)T ? row.size() - T : 0;
    const int length = (int)(row.size() - start);
    model.forward(row.data() + start, nullptr, 1, length);
    double sum = 0;
    int scored = 0;
    // Token k is predicted at position k - 1; the first token of the window has no prediction.
    for (size_t k = std::max(context.size(), start + 1); k < row.size(); k++) {
        model.logits_at((int)(k - 1 - start), logits.data());
        double max_logit = logits[0];
        for (float l : logits) max_logit = std::fmax(max_logit, (double)l);
        double total = 0;
        for (float l : logits) total += std::exp(l - max_logit);
        sum += max_logit + std::log(total) - logits[row[k]];
        scored++;
    }
    return scored ? sum / scored : INFINITY;
}

EvalResult evaluate_multiple_choice(TrainModel& model, const std::vector<EvalExample>& examples,
                                    int T, int rank, int num_ranks) {
    std::vector<float> logits(model_vocab_size(model.model_config()));
    EvalResult result;
    for (size_t i = (size_t)rank; i < examples.size(); i += (size_t)num_ranks) {
        const EvalExample& e = examples[i];
        int best = 0;
        double best_loss = INFINITY;
        for (size_t c = 0; c < e.completions.size(); c++) {
            const double loss = completion_loss(model, e.context, e.completions[c], T, logits);
            if (loss < best_loss) best = (int)c, best_loss = loss;
        }
        result.correct += best == e.label;
        result.total++;
    }
    return result;
}

HellaSwagEval::HellaSwagEval(const TrainOptions& opt, int vocab_size, bool gpt2_tokens) {
    if (!opt.hellaswag) return;
    if (!gpt2_tokens) {
        note_ = "note: -h 1: HellaSwag is skipped: llm.c's eval file holds GPT-2 tokens, and this model reads "
                "Llama 3's";
        return;
    }
    if (opt.val_every == 0) {
        note_ = "note: -h 1: HellaSwag is skipped: it runs with each validation, and -v 0 turns "
                "validation off";
        return;
    }
    if (!path_exists(opt.hellaswag_file)) {
        note_ = strprintf("note: -h 1: HellaSwag is skipped: no eval file at '%s' (llm.c's "
                          "dev/data/hellaswag.py writes it; --hellaswag-file names another)",
                          opt.hellaswag_file.c_str());
        return;
    }
    examples_ = with_flag("-h (--hellaswag)",
                          [&] { return read_eval_file(opt.hellaswag_file, vocab_size); });
    note_ = strprintf("hellaswag: %zu examples from '%s', at every validation",
                      examples_.size(), opt.hellaswag_file.c_str());
}

// RankGroup offers the mean; counts are integers far below 2^53, so mean times ranks, rounded, is
// their exact sum.
EvalResult sum_over_ranks(const EvalResult& mine, RankGroup& ranks) {
    EvalResult all;
    all.correct = (int)std::llround(ranks.mean(mine.correct) * ranks.num_ranks);
    all.total = (int)std::llround(ranks.mean(mine.total) * ranks.num_ranks);
    return all;
}

std::string describe_eval_result(const EvalResult& r) {
    return strprintf("HellaSwag: %d/%d correct = %.4f (acc_norm)", r.correct, r.total, r.accuracy());
}

EvalResult HellaSwagEval::run(TrainModel& model, int T, RankGroup& ranks) const {
    // Where forward() is a collective (ZeRO-3 gathers each layer's weights from every rank), every
    // rank must run the same forwards: then each evaluates every example, as one rank would.
    if (model.forward_is_collective()) return evaluate_multiple_choice(model, examples_, T);
    return sum_over_ranks(
        evaluate_multiple_choice(model, examples_, T, ranks.rank, ranks.num_ranks), ranks);
}
