// Command-line flags shared by every trainer (the settings they fill: base/train_options.h): llm.c's short flags, a readable long name
// for each (--name VALUE or --name=VALUE), and --help (-h alone; -h VALUE is llm.c's HellaSwag flag). Every value is checked: a malformed
// number, a value out of range, an unknown flag, a flag given twice or an impossible combination is an
// InputError whose one line names the flag and the problem. A wrapper script that passes defaults of
// its own (scripts/run_gpt2_*.sh) separates them from its caller's flags by OVERRIDE_MARKER: a flag
// after it replaces the same flag before it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/model_config.h"
#include "base/train_options.h"


constexpr const char* OVERRIDE_MARKER = "--override";

enum class FlagsResult { RUN, HELP_SHOWN };

// Parses argv over the defaults already in *options. Prints the help to stdout and returns
// HELP_SHOWN for -h/--help; throws InputError for anything invalid in a single flag.
FlagsResult parse_train_flags(int argc, const char* const* argv, TrainOptions* options);

// Whether argv gives the flag whose long name is `long_name` ("--train-data"), by either of its names.
bool train_flag_given(int argc, const char* const* argv, const std::string& long_name);
// The value argv gives that flag (the one after the last OVERRIDE_MARKER that gives it); "" where it is not given.
std::string train_flag_value(int argc, const char* const* argv, const std::string& long_name);

// Every flag's value in *options, in the help's order: for the run's record (run.json) and for
// comparing a resumed run's settings with the saved ones.
struct FlagValue {
    std::string short_name;  // "-b", or "" for long-only flags
    std::string long_name;   // "--batch-size"
    std::string value;       // "8" (numbers as parsing reads them back)
};
std::vector<FlagValue> train_flag_values(const TrainOptions& options);

// The help text (flags, long names, meaning, current defaults).
std::string train_flags_help(const char* program, const TrainOptions& defaults);

// Checks combinations once the model is known and fills in derived values (total_batch = B·T·data
// ranks when -1; sequence_parallel when -1). Throws InputError naming the flags, e.g. "-d 1000 is not
// a multiple of B·T·data ranks = 256", or "-tp 3 does not divide the 4 heads".
void validate_train_options(TrainOptions* options, const ModelConfig& config, int num_ranks);
inline void validate_train_options(TrainOptions* options, const GPTConfig& config, int num_ranks) {
    validate_train_options(options, gpt2_model(config), num_ranks);
}
// --profile-steps A:B as its first and last step; false when not given (InputError when malformed).
bool profile_step_range(const TrainOptions& options, int* first, int* last);

// Refuses llm.c's multi-node flags where they disagree with how the ranks were started, or ask for a
// start-up this trainer does not have (-pi tcp/fs); called by validate_train_options.
void check_llmc_launch_flags(const TrainOptions& options, int num_ranks);

// One-line notes for the start-up report about llm.c flags that were given but change nothing here
// (-ge, -pg), each saying why or what to do instead.
std::vector<std::string> llmc_flag_notes(const TrainOptions& options);
