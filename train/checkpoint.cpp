// The output folder's checkpoints (see checkpoint.h).
#include "train/checkpoint.h"

#include <algorithm>
#include <dirent.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/errors.h"
#include "base/file_io.h"

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

// Steps that have a DONE marker (exactly "DONE_" and 8 digits), unsorted.
static std::vector<long long> marked_steps(const std::string& dir) {
    std::vector<long long> steps;
    DIR* d = opendir(dir.c_str());
    if (!d) return steps;
    while (dirent* entry = readdir(d)) {
        const char* name = entry->d_name;
        if (strncmp(name, "DONE_", 5) != 0 || strlen(name) != 13) continue;
        if (strspn(name + 5, "0123456789") != 8) continue;
        steps.push_back(atoll(name + 5));
    }
    closedir(d);
    return steps;
}

std::vector<long long> complete_checkpoints(const std::string& dir, int num_ranks) {
    std::vector<long long> complete;
    for (long long step : marked_steps(dir)) {
        bool all = path_exists(checkpoint_model_path(dir, step));
        for (int r = 0; r < num_ranks && all; r++)
            all = path_exists(checkpoint_state_path(dir, step, r));
        if (all) complete.push_back(step);
    }
    std::sort(complete.begin(), complete.end());
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
