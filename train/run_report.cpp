// The run's data report, ETA and step-line cadence (see run_report.h).
#include "train/run_report.h"

#include <cmath>
#include <cstdio>

#include "base/errors.h"
#include "base/repository.h"

// 1234567 -> "1,234,567".
static std::string with_commas(long long n) {
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < digits.size(); i++) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

// -i's pattern with its last "train" (in the file name part) turned into "val": the llm.c naming of
// a dataset's two splits (fineweb_train_*.bin / fineweb_val_*.bin, mine_train.bin / mine_val.bin).
// "" when the name holds no "train".
static std::string matching_validation_pattern(const std::string& train) {
    const size_t name_start = train.rfind('/') == std::string::npos ? 0 : train.rfind('/') + 1;
    const size_t at = train.rfind("train");
    if (at == std::string::npos || at < name_start) return "";
    return train.substr(0, at) + "val" + train.substr(at + 5);
}

DataChoice choose_data_paths(TrainOptions* opt, const TrainOptions& defaults) {
    DataChoice choice;
    const bool train_given = opt->train_data != defaults.train_data;
    const bool val_given = opt->val_data != defaults.val_data;
    struct PathFlag {
        std::string* path;
        bool left_at_default;
    };
    for (PathFlag f : {PathFlag{&opt->train_data, !train_given}, PathFlag{&opt->val_data, !val_given},
                       PathFlag{&opt->tokenizer, opt->tokenizer == defaults.tokenizer},
                       PathFlag{&opt->hellaswag_file,
                                opt->hellaswag_file == defaults.hellaswag_file}}) {
        if (!f.left_at_default) continue;
        const std::string located = locate_default_path(*f.path);
        if (located != *f.path)
            choice.located.push_back(strprintf("'%s' is not in the working directory; using the "
                                               "repository's: %s", f.path->c_str(),
                                               located.c_str()));
        *f.path = located;
    }

    if (opt->val_every == 0) {
        choice.validation_note = "validation: off (-v 0)";
    } else if (!train_given || val_given) {
        choice.validation_note = strprintf("validation: '%s'%s", opt->val_data.c_str(),
                                           val_given ? " (-j)" : " (the default)");
    } else {
        const std::string candidate = matching_validation_pattern(opt->train_data);
        if (!candidate.empty() && candidate != opt->train_data && matches_something(candidate)) {
            opt->val_data = candidate;
            choice.validation_note = strprintf("validation: '%s', found beside -i (no -j given; "
                                               "-j chooses other shards)", candidate.c_str());
        } else {
            opt->val_data = "";
            choice.validation_note =
                candidate.empty()
                    ? "validation: none: -i was given without -j, and its name has no \"train\" "
                      "to find the matching validation shards by; -j names them"
                    : strprintf("validation: none: -i was given without -j, and there is no '%s' "
                                "beside it; -j names the validation shards", candidate.c_str());
        }
    }
    return choice;
}

void print_data_report(const DataChoice& choice, const TrainOptions& opt, const DataLoader& train,
                       int max_steps, int accum_steps, int num_ranks) {
    for (const std::string& note : choice.located) printf("note: %s\n", note.c_str());
    const long long batch_tokens = (long long)opt.batch_size * opt.seq_len * num_ranks;
    const long long epoch_tokens = train.chunks_per_epoch() * batch_tokens;
    const double epochs = (double)max_steps * accum_steps / (double)train.chunks_per_epoch();
    const size_t shards = train.files().size();
    printf("data: %zu training shard%s from '%s' (%s tokens, %s order); %d steps of %s tokens "
           "cover %.2f epochs\n",
           shards, shards == 1 ? "" : "s", opt.train_data.c_str(), with_commas(epoch_tokens).c_str(),
           opt.shuffle ? "shuffled" : "sequential", max_steps,
           with_commas(opt.total_batch).c_str(), epochs);
    printf("%s\n", choice.validation_note.c_str());
}

int RunClock::occurrences(const Task& task, int first, int last) {
    if (first > last) return 0;
    int n = task.every > 0 ? last / task.every - (first - 1) / task.every : 0;
    const bool extra = task.also_at >= first && task.also_at <= last &&
                       !(task.every > 0 && task.also_at % task.every == 0);
    return n + (extra ? 1 : 0);
}

double RunClock::eta_seconds(int step) const {
    double ms = (last_step_ - step) * mean_step_ms();
    for (const Task* task : {&validation, &sampling, &checkpoint})
        if (task->count > 0)
            ms += occurrences(*task, step, last_step_) * task->total_ms / task->count;
    return ms / 1000.0;
}

RunClock make_run_clock(const TrainOptions& opt, int max_steps, int last_step) {
    RunClock clock(last_step);
    clock.validation.every = opt.val_every;
    clock.validation.also_at = opt.val_every > 0 ? last_step : 0;
    clock.sampling.every = opt.sample_every;
    clock.sampling.also_at = opt.sample_every > 0 ? max_steps : 0;
    clock.checkpoint.every = opt.output_dir.empty() ? 0 : opt.checkpoint_every;
    clock.checkpoint.also_at = opt.output_dir.empty() ? 0 : last_step;
    return clock;
}

bool validates_at(const TrainOptions& opt, int step, int last_step) {
    return opt.val_every > 0 && (step % opt.val_every == 0 || step == last_step);
}

double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
}

std::string duration_text(double seconds) {
    long s = std::isfinite(seconds) && seconds > 0 ? (long)std::lround(seconds) : 0;
    if (s >= 3600) return strprintf("%ldh%02ldm", s / 3600, s / 60 % 60);
    return strprintf("%ldm%02lds", s / 60, s % 60);
}

bool step_is_logged(const TrainOptions& opt, int step, int first_step, int last_step) {
    const bool validates = opt.val_every > 0 && step % opt.val_every == 0;
    return step % opt.log_every == 0 || step == first_step || step == last_step || validates;
}
