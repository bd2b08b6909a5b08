// What a run says about its data and its progress:
//   - where the data comes from: default paths found inside the repository when the working
//     directory is elsewhere, and where validation comes from, never another dataset than -i's
//     without saying so (-i without -j validates on the matching *val* shards beside -i, or on
//     nothing, and says which);
//   - how much of the data the run covers (epochs);
//   - an ETA that counts the validations, samples and checkpoints still to come, not only steps;
//   - which steps print their line (--log-every).
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "train/dataloader.h"
#include "train/train_flags.h"

// The data paths a run uses once defaults are located and validation is chosen.
struct DataChoice {
    std::string validation_note;       // one line for the start-up report ("validation: ...")
    std::vector<std::string> located;  // notes on defaults found inside the repository
};

// Locates the default paths left unchanged in *opt (-i, -j, --tokenizer, --hellaswag-file) and
// picks the validation data: -j when given; with -i given and -j not, the shards whose names are
// -i's with its last "train" turned into "val", when they exist, and none otherwise (val_data
// becomes ""). `defaults` are the trainer's defaults, before flags.
DataChoice choose_data_paths(TrainOptions* opt, const TrainOptions& defaults);

// The start-up report's data lines: the training shards, their tokens and the epochs the run's
// steps cover; then where validation comes from.
void print_data_report(const DataChoice& choice, const TrainOptions& opt, const DataLoader& train,
                       int max_steps, int accum_steps, int num_ranks);

// The time a run still needs: the remaining steps at the mean step time so far, plus each
// periodic task still to come (validation, sampling, checkpoints) at its own mean time so far.
class RunClock {
public:
    // A task that runs at every multiple of `every` (0: never by period) and at `also_at` (0: no
    // extra step), up to the run's last step.
    struct Task {
        int every = 0, also_at = 0;
        double total_ms = 0;
        int count = 0;
        void add(double ms) { total_ms += ms, count++; }
    };
    Task validation, sampling, checkpoint;

    explicit RunClock(int last_step) : last_step_(last_step) {}
    void add_step(double ms) { step_ms_ += ms, steps_++; }
    double mean_step_ms() const { return steps_ ? step_ms_ / steps_ : 0; }
    // Seconds left after step `step` has trained; its own validation, sample and checkpoint (still
    // to come when its line is printed) count as remaining.
    double eta_seconds(int step) const;

    // How many of the steps in [first, last] a task runs at.
    static int occurrences(const Task& task, int first, int last);

private:
    int last_step_;
    double step_ms_ = 0;
    int steps_ = 0;
};

// The clock of a run that trains steps first_step..last_step of max_steps: validation (and
// HellaSwag) at every -v and at the last step, samples at every -s and at max_steps, checkpoints
// at every -n and at the last step when -o is set.
RunClock make_run_clock(const TrainOptions& opt, int max_steps, int last_step);

// Whether step `step` validates (and runs HellaSwag): every -v steps and at the run's last step.
bool validates_at(const TrainOptions& opt, int step, int last_step);

// Milliseconds since `start`.
double ms_since(std::chrono::steady_clock::time_point start);

// "1h02m" / "3m20s".
std::string duration_text(double seconds);

// Whether step `step` prints its line: every --log-every steps, and always the run's first and
// last steps and steps that validate.
bool step_is_logged(const TrainOptions& opt, int step, int first_step, int last_step);
