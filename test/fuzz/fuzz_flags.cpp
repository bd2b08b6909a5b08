// Fuzz target: the trainers' command line. The input is the argument list, one argument per line;
// parse_train_flags reads it over the defaults, then validate_train_options checks the combination
// for the model the run would build (-e's descriptor, or GPT-2 124M where -e names a file) and a
// rank count taken from the input's first byte (1 to 8); then the accumulation steps and the
// learning-rate schedule the trainer derives from them.
#include <cmath>
#include <vector>

#include "base/model_descriptor.h"
#include "test/fuzz/fuzz_target.h"
#include "train/lr_schedule.h"
#include "train/train_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const int num_ranks = 1 + data[0] % 8;
    std::vector<std::string> args = {"train_gpt_cpu"};
    std::string current;
    for (size_t i = 1; i < size; i++) {
        if (data[i] == '\n')
            args.push_back(current), current.clear();
        else
            current += (char)data[i];
    }
    if (!current.empty()) args.push_back(current);
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    expect_clean([&] {
        TrainOptions opt;
        if (parse_train_flags((int)args.size(), argv.data(), &opt) == FlagsResult::HELP_SHOWN)
            return;
        const GPTConfig config =
            is_model_descriptor(opt.model) ? config_from_descriptor(opt.model) : GPTConfig{};
        validate_train_options(&opt, config, num_ranks);
        train_flag_values(opt);
        // What the trainer derives from valid options next: the accumulation and the schedule,
        // whose learning rate must be a number at every step.
        if (grad_accum_steps(opt, num_ranks) < 1) abort();
        const int max_steps = opt.max_steps > 0 ? opt.max_steps : 1000;
        const LRSchedule schedule = {opt.schedule, opt.learning_rate, opt.warmup_steps, max_steps,
                                     opt.final_lr_fraction};
        for (int step : {0, opt.warmup_steps - 1, opt.warmup_steps, max_steps / 2, max_steps - 1})
            if (step >= 0 && step < max_steps && !std::isfinite(learning_rate_at(schedule, step))) {
                fprintf(stderr, "fuzz: learning rate at step %d is not a number\n", step);
                abort();
            }
    });
    return 0;
}
