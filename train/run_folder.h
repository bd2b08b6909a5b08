// The output folder (-o DIR) as one run's own place:
//   - a run never writes into a folder that holds another run's checkpoints or metrics unless it
//     resumes that run (-y 1): otherwise one error says what is there and the two ways on;
//   - run.json records the run's whole configuration (every flag's value, the model, the data
//     files, the commit, the command line); on resume, what changed since is printed, and changes
//     that bend the run (schedule, steps, data, numerics) are refused unless --accept-changes 1;
//   - temporary files left by a process that died while writing (*.tmp.PID) are removed at start;
//   - each saved checkpoint is announced in one line.
// Only rank 0 prints and writes here; every rank makes the same checks (they read the same files)
// so that all of them take the same decision.
#pragma once
#include <string>
#include <vector>

#include "base/model_config.h"
#include "train/train_flags.h"

// What a folder holds from earlier runs.
struct FolderContents {
    std::vector<long long> checkpoint_steps;  // steps with any checkpoint file (model, state, DONE)
    bool metrics = false;                     // metrics.jsonl
    bool run_record = false;                  // run.json
    std::vector<std::string> temporaries;     // *.tmp.PID files
    bool holds_a_run() const;
    std::string describe() const;  // "checkpoint files of steps 20 and 600, metrics.jsonl, run.json"
};
FolderContents inspect_output_folder(const std::string& dir);

// The time now in UTC, ISO 8601 ("2026-12-02T07:50:11Z"): run.json's, and the folder lock's.
std::string utc_now();

// The run's configuration as run.json records it.
struct RunRecord {
    std::string program;                   // argv[0]'s file name
    std::vector<std::string> command;      // argv
    std::string commit;                    // repository_commit()
    int num_ranks = 1;
    long long resumed_from_step = 0;       // 0 for a fresh run
    std::string model_config;              // describe_model()
    size_t parameters = 0;
    std::vector<std::string> train_files, val_files;
    std::vector<FlagValue> settings;       // every flag, with -x and -d resolved
};
RunRecord make_run_record(int argc, char** argv, const TrainOptions& opt, int max_steps,
                          const ModelConfig& config, const std::vector<std::string>& train_files,
                          const std::vector<std::string>& val_files, int num_ranks,
                          long long resumed_from_step);
std::string run_record_path(const std::string& dir);
std::string run_record_json(const RunRecord& record);
// The "settings" of a run.json (long flag name -> value); throws InputError naming the file when
// it is not one this code wrote.
std::vector<FlagValue> read_run_settings(const std::string& path);

// This run's settings as run.json records them: every flag's value, -x resolved to the run's
// steps, paths made absolute (so that a run resumed from another working directory compares
// equal).
std::vector<FlagValue> run_settings(const TrainOptions& opt, int max_steps);

// Settings that bend a resumed run (its schedule, the steps, the data, the numerics): changing them
// needs --accept-changes 1. Others (validation and sampling cadence, checkpoints, logging) may change
// freely and are only reported.
bool setting_bends_the_run(const std::string& long_name);

// Before anything is written, on every rank: refuses a fresh run (-y 0) in a folder that holds
// another run (with -y 1 the folder's run is continued, or started over when it never reached a
// complete checkpoint); on resume,
// compares this run's settings with run.json's, prints the differences (when `print`), and refuses
// those that bend the run unless --accept-changes 1, and a -x that the checkpoint has already passed.
// `settings` are this run's (run_settings).
void check_output_folder(const TrainOptions& opt, bool resuming, long long resumed_step,
                         int last_step, const std::vector<FlagValue>& settings, bool print);

// On rank 0, once the run is set up: creates the folder, removes temporary files of dead
// processes (saying so), clears the metrics of a run that had not reached its first checkpoint
// (-y 1 starting from step 0), and writes run.json.
void prepare_output_folder(const TrainOptions& opt, bool resuming, const RunRecord& record);

// The start-up report's model source: -e, or when resuming the checkpoint's model file, saying
// that -e only gave the shape ("out/model_00000020.bin (resumed checkpoint; -e 'a.bin' not loaded)").
std::string model_source_text(const TrainOptions& opt, bool resuming, long long step);

// One line per saved checkpoint: "checkpoint: step 20 saved in out/run (model_00000020.bin, ...)".
void announce_checkpoint(const std::string& dir, long long step, int num_ranks);
