// The output folder's checkpoints (see checkpoint.h).
#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <map>
#include <set>
#include <sys/stat.h>

#include "base/errors.h"
#include "base/file_io.h"
#include "train/training_state.h"

std::string checkpoint_model_path(const std::string& dir, long long step) {
    return strprintf("%s/model_%08lld.bin", dir.c_str(), step);
}
std::string checkpoint_state_path(const std::string& dir, long long step, int rank) {
    return strprintf("%s/state_%08lld_%05d.bin", dir.c_str(), step, rank);
}
std::string checkpoint_done_path(const std::string& dir, long long step) {
    return strprintf("%s/DONE_%08lld", dir.c_str(), step);
}
std::string metrics_log_path(const std::string& dir) { return dir + "/metrics.jsonl"; }

void mark_checkpoint_done(const std::string& dir, long long step) {
    AtomicFile done(checkpoint_done_path(dir, step));
    done.commit();
}

// ---- the folder's checkpoint files, by step

// What a folder holds of one step's checkpoint: only names of exactly the checkpoint patterns count
// (DONE_ and 8 digits, model_ and 8 digits .bin, state_ and 8 digits _ 5 digits .bin).
struct StepFiles {
    bool done = false, model = false;
    std::set<int> state_ranks;       // the ranks whose state file is there
    std::vector<std::string> names;  // every file of the step, sorted
};

// Whether name[at, at + count) are all digits.
static bool digits_at(const std::string& name, size_t at, size_t count) {
    return name.size() >= at + count && strspn(name.c_str() + at, "0123456789") >= count;
}

// Files one name adds to its step's StepFiles (false: not a checkpoint file).
static bool add_checkpoint_name(const std::string& name, std::map<long long, StepFiles>* steps) {
    const bool done = name.size() == 13 && name.compare(0, 5, "DONE_") == 0 && digits_at(name, 5, 8);
    const bool model = name.size() == 18 && name.compare(0, 6, "model_") == 0 && digits_at(name, 6, 8) &&
                       name.compare(14, 4, ".bin") == 0;
    const bool state = name.size() == 24 && name.compare(0, 6, "state_") == 0 && digits_at(name, 6, 8) &&
                       name[14] == '_' && digits_at(name, 15, 5) && name.compare(20, 4, ".bin") == 0;
    if (!done && !model && !state) return false;
    StepFiles& files = (*steps)[atoll(name.c_str() + (done ? 5 : 6))];
    files.done |= done, files.model |= model;
    if (state) files.state_ranks.insert(atoi(name.c_str() + 15));
    files.names.push_back(name);
    return true;
}

// Every step with a checkpoint file in dir (none if dir does not exist).
static std::map<long long, StepFiles> checkpoint_files_by_step(const std::string& dir) {
    std::map<long long, StepFiles> steps;
    DIR* d = opendir(dir.c_str());
    if (!d) return steps;
    while (dirent* entry = readdir(d)) add_checkpoint_name(entry->d_name, &steps);
    closedir(d);
    for (auto& [step, files] : steps) std::sort(files.names.begin(), files.names.end());
    return steps;
}

// "a, b and c".
static std::string joined(const std::vector<std::string>& items) {
    std::string text;
    for (size_t i = 0; i < items.size(); i++)
        text += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
    return text;
}

static std::string file_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// ---- complete checkpoints and pruning

std::vector<long long> complete_checkpoints(const std::string& dir, int num_ranks) {
    std::vector<long long> complete;
    for (const auto& [step, files] : checkpoint_files_by_step(dir)) {
        bool all = files.done && files.model;
        for (int r = 0; r < num_ranks && all; r++) all = files.state_ranks.count(r) > 0;
        if (all) complete.push_back(step);
    }
    return complete;
}

void prune_checkpoints(const std::string& dir, int keep, int num_ranks, int major_every) {
    if (keep <= 0) return;
    std::vector<long long> steps = complete_checkpoints(dir, num_ranks);
    for (size_t i = 0; i + keep < steps.size(); i++) {
        if (major_every > 0 && steps[i] % major_every == 0) continue;  // a major checkpoint (-nm)
        remove(checkpoint_done_path(dir, steps[i]).c_str());
        remove(checkpoint_model_path(dir, steps[i]).c_str());
        // Every rank's state file, also those of a run that had more ranks before it resumed.
        for (int r = 0; r < num_ranks || path_exists(checkpoint_state_path(dir, steps[i], r)); r++)
            remove(checkpoint_state_path(dir, steps[i], r).c_str());
    }
}

// ---- a failed write

void write_checkpoint_or_remove_it(const std::string& dir, long long step, int rank,
                                   const std::function<void()>& write) {
    try {
        write();
    } catch (...) {
        if (rank == 0) remove(checkpoint_model_path(dir, step).c_str());
        remove(checkpoint_state_path(dir, step, rank).c_str());
        throw;
    }
}

// ---- tidying the folder before a resume

std::vector<std::string> remove_incomplete_checkpoints(const std::string& dir) {
    std::vector<std::string> lines;
    for (const auto& [step, files] : checkpoint_files_by_step(dir)) {
        if (files.done) continue;
        for (const std::string& name : files.names) {
            const std::string path = dir + "/" + name;
            if (remove(path.c_str()) != 0)
                fail("%s: cannot remove this file of a checkpoint that never completed (%s)", path.c_str(),
                     strerror(errno));
        }
        lines.push_back(strprintf("removed the incomplete checkpoint of step %lld (%s): it never completed", step,
                                  joined(files.names).c_str()));
    }
    return lines;
}

// Whether a state file passes every check of a resume's reading (its checksum streamed).
static bool state_file_is_sound(const std::string& path) {
    try {
        open_training_state(path);
        return true;
    } catch (const InputError&) { return false; }
}

// The state files of ranks 1 and up that checkpoint `step` lacks, by the rank count in rank 0's
// file: a quick look, trusted only once that file proves sound when it says some are missing.
static std::vector<std::string> missing_state_files(const std::string& dir, long long step, const StepFiles& files) {
    const std::string first = checkpoint_state_path(dir, step, 0);
    const int ranks = state_file_rank_count(first);
    const long present = std::count_if(files.state_ranks.begin(), files.state_ranks.end(),
                                       [ranks](int r) { return r < ranks; });
    if (present >= ranks || !state_file_is_sound(first)) return {};
    std::vector<std::string> missing;
    for (int r = 1; r < ranks; r++)
        if (!files.state_ranks.count(r)) missing.push_back(file_name(checkpoint_state_path(dir, step, r)));
    return missing;
}

static std::vector<std::string> missing_files(const std::string& dir, long long step, const StepFiles& files) {
    std::vector<std::string> missing;
    if (!files.model) missing.push_back(file_name(checkpoint_model_path(dir, step)));
    if (!files.state_ranks.count(0)) {
        missing.push_back(file_name(checkpoint_state_path(dir, step, 0)));
        return missing;  // without rank 0's file, the count of the others is unknown
    }
    for (const std::string& name : missing_state_files(dir, step, files)) missing.push_back(name);
    return missing;
}

std::vector<std::string> missing_checkpoint_files(const std::string& dir, long long step) {
    const std::map<long long, StepFiles> steps = checkpoint_files_by_step(dir);
    const auto found = steps.find(step);
    return missing_files(dir, step, found == steps.end() ? StepFiles() : found->second);
}

// A new folder for a damaged checkpoint's files: DIR/damaged_NNNNNNNN, or with _2, _3, ... after it
// where that one exists already (an earlier checkpoint of the same step, damaged too).
static std::string new_damaged_folder(const std::string& dir, long long step) {
    const std::string base = strprintf("%s/damaged_%08lld", dir.c_str(), step);
    for (int n = 1;; n++) {
        const std::string folder = n == 1 ? base : strprintf("%s_%d", base.c_str(), n);
        if (mkdir(folder.c_str(), 0777) == 0) return folder;
        if (errno != EEXIST) fail("%s: cannot create this folder (%s)", folder.c_str(), strerror(errno));
    }
}

static void move_file(const std::string& dir, const std::string& name, const std::string& folder) {
    const std::string from = dir + "/" + name, to = folder + "/" + name;
    if (rename(from.c_str(), to.c_str()) != 0)
        fail("%s: cannot move it into %s (%s)", from.c_str(), folder.c_str(), strerror(errno));
}

std::vector<DamagedCheckpoint> set_aside_damaged_checkpoints(const std::string& dir) {
    std::vector<DamagedCheckpoint> damaged;
    for (const auto& [step, files] : checkpoint_files_by_step(dir)) {
        if (!files.done) continue;
        DamagedCheckpoint d;
        d.step = step;
        d.missing = missing_files(dir, step, files);
        if (d.missing.empty()) continue;
        d.folder = new_damaged_folder(dir, step);
        const std::string done = file_name(checkpoint_done_path(dir, step));
        for (const std::string& name : files.names)
            if (name != done) d.moved.push_back(name);
        d.moved.push_back(done);
        for (const std::string& name : d.moved) move_file(dir, name, d.folder);
        damaged.push_back(d);
    }
    return damaged;
}

std::string describe_damaged_checkpoint(const DamagedCheckpoint& d) {
    return strprintf("damaged checkpoint of step %lld: %s %s missing; its other files (%s) were moved to %s, where "
                     "nothing overwrites them",
                     d.step, joined(d.missing).c_str(), d.missing.size() == 1 ? "is" : "are",
                     joined(d.moved).c_str(), d.folder.c_str());
}

std::string tidy_checkpoints_for_resume(const TrainOptions& opt, RankGroup& ranks) {
    if (!opt.resume || opt.output_dir.empty()) return "";
    std::string report;
    if (ranks.rank == 0) {
        for (const std::string& line : remove_incomplete_checkpoints(opt.output_dir)) report += line + "\n";
        for (const DamagedCheckpoint& d : set_aside_damaged_checkpoints(opt.output_dir))
            report += describe_damaged_checkpoint(d) + "\n";
    }
    ranks.barrier();  // the other ranks choose the resume point only from the tidied folder
    return report;
}
