// The output folder as one run's own place (see run_folder.h).
#include "train/run_folder.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/model_descriptor.h"
#include "base/repository.h"
#include "train/checkpoint.h"
#include "train/metrics_log.h"

// ---- what a folder holds

// "model_00000020.bin", "state_00000020_00000.bin", "DONE_00000020" -> 20; -1 for other names.
static long long checkpoint_file_step(const std::string& name) {
    for (const char* prefix : {"model_", "state_", "DONE_"}) {
        const size_t n = strlen(prefix);
        if (name.compare(0, n, prefix) != 0 || name.size() < n + 8) continue;
        const std::string digits = name.substr(n, 8);
        if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string rest = name.substr(n + 8);
        const bool done = prefix[0] == 'D' && rest.empty();
        const bool model = prefix[0] == 'm' && rest == ".bin";
        const bool state = prefix[0] == 's' && rest.size() == 10 && rest[0] == '_' &&
                           rest.compare(6, 4, ".bin") == 0;
        if (done || model || state) return atoll(digits.c_str());
    }
    return -1;
}

// "name.tmp.PID" -> PID; 0 when the name is not the AtomicFile temporary (base/file_io.h) of a file
// the trainer writes into its output folder: only those are ever removed (a "notes.tmp.12" of
// yours is not the trainer's).
static long temporary_file_pid(const std::string& name) {
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 >= name.size()) return 0;
    const std::string digits = name.substr(at + 5), written = name.substr(0, at);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) return 0;
    static const std::set<std::string> trainer_files = {"run.json",   "metrics.jsonl", "snapshots.path",
                                                        "trace.json", "run.lock",      "matmul_algorithms.txt"};
    if (checkpoint_file_step(written) < 0 && !trainer_files.count(written)) return 0;
    return atol(digits.c_str());
}

FolderContents inspect_output_folder(const std::string& dir) {
    FolderContents contents;
    DIR* d = opendir(dir.c_str());
    if (!d) return contents;
    std::set<long long> steps;
    while (dirent* entry = readdir(d)) {
        const std::string name = entry->d_name;
        if (temporary_file_pid(name) > 0) contents.temporaries.push_back(name);
        const long long step = checkpoint_file_step(name);
        if (step >= 0) steps.insert(step);
        if (name == "metrics.jsonl") contents.metrics = true;
        if (name == "run.json") contents.run_record = true;
    }
    closedir(d);
    std::sort(contents.temporaries.begin(), contents.temporaries.end());
    contents.checkpoint_steps.assign(steps.begin(), steps.end());
    return contents;
}

bool FolderContents::holds_a_run() const {
    return !checkpoint_steps.empty() || metrics || run_record || !temporaries.empty();
}

std::string FolderContents::describe() const {
    std::vector<std::string> parts;
    if (!checkpoint_steps.empty()) {
        std::string steps;
        const size_t n = checkpoint_steps.size();
        for (size_t i = 0; i < n; i++) {
            if (n > 4 && i == 2) {  // the first two, "...", the last one
                steps += ", ...";
                i = n - 1;
            }
            const char* separator = i == 0 ? "" : i + 1 == n ? " and " : ", ";
            steps += separator + std::to_string(checkpoint_steps[i]);
        }
        parts.push_back(strprintf("checkpoint files of step%s %s", n == 1 ? "" : "s", steps.c_str()));
    }
    if (metrics) parts.push_back("metrics.jsonl");
    if (run_record) parts.push_back("run.json");
    if (!temporaries.empty())
        parts.push_back(strprintf("%zu temporary file(s) of an interrupted write",
                                  temporaries.size()));
    std::string text;
    for (size_t i = 0; i < parts.size(); i++) text += (i ? ", " : "") + parts[i];
    return text;
}

// ---- run.json

std::string run_record_path(const std::string& dir) { return dir + "/run.json"; }

static std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (unsigned char c : text) {
        if (c == '"' || c == '\\') out += '\\', out += (char)c;
        else if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20) out += strprintf("\\u%04x", c);
        else out += (char)c;
    }
    return out + "\"";
}

static std::string json_list(const std::vector<std::string>& items, const char* indent) {
    if (items.empty()) return "[]";
    std::string out = "[";
    for (size_t i = 0; i < items.size(); i++)
        out += std::string(i ? "," : "") + "\n" + indent + "  " + json_string(items[i]);
    return out + "\n" + indent + "]";
}

std::string utc_now() {
    char text[32];
    const time_t now = time(nullptr);
    struct tm parts;
    gmtime_r(&now, &parts);
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &parts);
    return text;
}

std::string run_record_json(const RunRecord& r) {
    std::string json = "{\n";
    json += "  \"format\": \"gpt-trainer run record 1\",\n";
    json += "  \"program\": " + json_string(r.program) + ",\n";
    json += "  \"commit\": " + json_string(r.commit) + ",\n";
    json += "  \"written_at\": " + json_string(utc_now()) + ",\n";
    json += "  \"command\": " + json_list(r.command, "  ") + ",\n";
    json += strprintf("  \"ranks\": %d,\n", r.num_ranks);
    json += strprintf("  \"resumed_from_step\": %lld,\n", r.resumed_from_step);
    json += "  \"model_config\": " + json_string(r.model_config) + ",\n";
    json += strprintf("  \"parameters\": %zu,\n", r.parameters);
    json += "  \"train_files\": " + json_list(r.train_files, "  ") + ",\n";
    json += "  \"val_files\": " + json_list(r.val_files, "  ") + ",\n";
    json += "  \"settings\": {";
    for (size_t i = 0; i < r.settings.size(); i++)
        json += std::string(i ? "," : "") + "\n    " + json_string(r.settings[i].long_name) + ": " +
                json_string(r.settings[i].value);
    return json + "\n  }\n}\n";
}

// Reads one JSON string at text[at] (the opening quote); at moves past the closing quote.
static bool parse_json_string(const std::string& text, size_t& at, std::string* out) {
    if (at >= text.size() || text[at] != '"') return false;
    out->clear();
    for (at++; at < text.size(); at++) {
        char c = text[at];
        if (c == '"') {
            at++;
            return true;
        }
        if (c != '\\') {
            *out += c;
            continue;
        }
        if (++at >= text.size()) return false;
        c = text[at];
        if (c == 'n') *out += '\n';
        else if (c == 't') *out += '\t';
        else if (c == 'u' && at + 4 < text.size()) {
            *out += (char)strtol(text.substr(at + 1, 4).c_str(), nullptr, 16);
            at += 4;
        } else *out += c;
    }
    return false;
}

static void skip_space(const std::string& text, size_t& at) {
    while (at < text.size() && isspace((unsigned char)text[at])) at++;
}

std::vector<FlagValue> read_run_settings(const std::string& path) {
    std::ifstream in(path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    size_t at = text.find("\"settings\":");
    if (!in || at == std::string::npos) fail("%s: not a run record (no \"settings\")", path.c_str());
    at = text.find('{', at);
    std::vector<FlagValue> settings;
    for (at++;;) {
        skip_space(text, at);
        if (at < text.size() && text[at] == '}') return settings;
        FlagValue v;
        bool ok = parse_json_string(text, at, &v.long_name);
        skip_space(text, at);
        ok = ok && at < text.size() && text[at++] == ':';
        skip_space(text, at);
        ok = ok && parse_json_string(text, at, &v.value);
        skip_space(text, at);
        if (!ok) fail("%s: malformed \"settings\" at byte %zu", path.c_str(), at);
        settings.push_back(v);
        if (at < text.size() && text[at] == ',') at++;
    }
}

RunRecord make_run_record(int argc, char** argv, const TrainOptions& opt, int max_steps,
                          const ModelConfig& config, const std::vector<std::string>& train_files,
                          const std::vector<std::string>& val_files, int num_ranks,
                          long long resumed_from_step) {
    RunRecord r;
    r.command.assign(argv, argv + argc);
    r.program = std::filesystem::path(argv[0]).filename().string();
    r.commit = repository_commit();
    r.num_ranks = num_ranks;
    r.resumed_from_step = resumed_from_step;
    r.model_config = describe_model(config);
    r.parameters = parameter_count(config);
    for (const std::string& f : train_files)
        r.train_files.push_back(std::filesystem::absolute(f).lexically_normal().string());
    for (const std::string& f : val_files)
        r.val_files.push_back(std::filesystem::absolute(f).lexically_normal().string());
    r.settings = run_settings(opt, max_steps);
    return r;
}

std::string model_source_text(const TrainOptions& opt, bool resuming, long long step) {
    if (!resuming) return opt.model;
    return strprintf("%s (resumed checkpoint; -e '%s' %s)",
                     checkpoint_model_path(opt.output_dir, step).c_str(), opt.model.c_str(),
                     is_model_descriptor(opt.model) ? "gave only the shape" : "not loaded");
}

std::vector<FlagValue> run_settings(const TrainOptions& opt, int max_steps) {
    std::vector<FlagValue> settings = train_flag_values(opt);
    for (FlagValue& v : settings) {
        if (v.long_name == "--max-steps") v.value = std::to_string(max_steps);
        const bool path = v.long_name == "--train-data" || v.long_name == "--val-data" ||
                          v.long_name == "--output-dir" || v.long_name == "--tokenizer" ||
                          v.long_name == "--hellaswag-file" ||
                          (v.long_name == "--model" && !is_model_descriptor(v.value));
        if (path && !v.value.empty())
            v.value = std::filesystem::absolute(v.value).lexically_normal().string();
    }
    return settings;
}

bool setting_bends_the_run(const std::string& name) {
    static const std::set<std::string> bending = {
        "--max-steps",    "--learning-rate", "--lr-schedule", "--warmup-steps",
        "--final-lr-fraction", "--weight-decay", "--skip-loss-z", "--skip-norm-z",
        "--train-data",   "--overfit-single-batch", "--tf32", "--fp32-master",
        "--total-batch",  "--beta1", "--beta2", "--eps", "--momentum", "--trust-coefficient",
        "--layer-adaptation", "--lr-scaling", "--base-batch", "--muon-lr", "--muon-momentum",
        "--muon-nesterov", "--ns-steps"};
    return bending.count(name) > 0;
}

// Settings about this invocation rather than the run, never compared.
static bool setting_is_per_invocation(const std::string& name) {
    return name == "--resume" || name == "--accept-changes" || name == "--stop-at";
}

// "-x (--max-steps) 600 -> 800" for each setting that differs, bending ones in *bending too.
static std::vector<std::string> setting_changes(const std::vector<FlagValue>& saved,
                                                const std::vector<FlagValue>& now,
                                                std::vector<std::string>* bending) {
    std::vector<std::string> changes;
    for (const FlagValue& current : now) {
        if (setting_is_per_invocation(current.long_name)) continue;
        for (const FlagValue& old : saved) {
            if (old.long_name != current.long_name || old.value == current.value) continue;
            const std::string name = current.short_name.empty()
                                         ? current.long_name
                                         : current.short_name + " (" + current.long_name + ")";
            const std::string change = strprintf("%s '%s' -> '%s'", name.c_str(),
                                                 old.value.c_str(), current.value.c_str());
            changes.push_back(change);
            if (setting_bends_the_run(current.long_name)) bending->push_back(change);
        }
    }
    return changes;
}

static std::string joined(const std::vector<std::string>& items) {
    std::string text;
    for (size_t i = 0; i < items.size(); i++) text += (i ? ", " : "") + items[i];
    return text;
}

void check_output_folder(const TrainOptions& opt, bool resuming, long long resumed_step,
                         int last_step, const std::vector<FlagValue>& settings, bool print) {
    if (opt.output_dir.empty()) return;
    const std::string& dir = opt.output_dir;
    if (!opt.resume) {
        const FolderContents contents = inspect_output_folder(dir);
        if (contents.holds_a_run())
            fail("-o (--output-dir): '%s' already holds a run (%s); to continue that run add -y 1, "
                 "or give another folder with -o", dir.c_str(), contents.describe().c_str());
        return;
    }
    if (!resuming) return;
    if (resumed_step > last_step)
        fail("-x (--max-steps): the run in '%s' is already at step %lld, past step %d: nothing to "
             "train; give a larger -x to continue it, or another folder with -o",
             dir.c_str(), resumed_step, last_step);
    const std::string record = run_record_path(dir);
    if (!path_exists(record)) {
        if (print)
            printf("note: %s has no run.json (written by an older trainer, or by llm.c), so this "
                   "run's settings cannot be compared with the saved run's\n", dir.c_str());
        return;
    }
    std::vector<std::string> bending;
    const std::vector<std::string> changes =
        setting_changes(read_run_settings(record), settings, &bending);
    if (!bending.empty() && !opt.accept_changes)
        fail("-y (--resume): %s differ%s from the run saved in '%s' and would bend it (schedule, "
             "steps, data or numerics); add --accept-changes 1 to resume with the change, or keep "
             "the saved value", joined(bending).c_str(), bending.size() == 1 ? "s" : "",
             dir.c_str());
    if (print && !changes.empty())
        printf("resume: changed since the saved run: %s%s\n", joined(changes).c_str(),
               bending.empty() ? "" : " (accepted with --accept-changes 1)");
}

// ---- preparing the folder

// Removes the temporary files whose writer is no longer running, and says so.
static void remove_stale_temporaries(const std::string& dir, const FolderContents& contents) {
    std::vector<std::string> removed;
    for (const std::string& name : contents.temporaries) {
        const long pid = temporary_file_pid(name);
        const bool alive = kill((pid_t)pid, 0) == 0 || errno == EPERM;
        if (alive && pid != (long)getpid()) continue;  // another live process is writing it
        if (remove((dir + "/" + name).c_str()) == 0) removed.push_back(name);
    }
    if (!removed.empty())
        printf("removed %zu temporary file(s) left in %s by an interrupted run: %s\n",
               removed.size(), dir.c_str(), joined(removed).c_str());
}

void prepare_output_folder(const TrainOptions& opt, bool resuming, const RunRecord& record) {
    const std::string& dir = opt.output_dir;
    with_flag("-o (--output-dir)", [&] { make_directory(dir); });
    remove_stale_temporaries(dir, inspect_output_folder(dir));
    // -y 1 with no complete checkpoint: training starts over, so drop what the run that never
    // reached its first checkpoint logged (otherwise steps would appear twice).
    if (opt.resume && !resuming) truncate_metrics_log(metrics_log_path(dir), -1);
    AtomicFile file(run_record_path(dir));
    const std::string json = run_record_json(record);
    file.write(json.data(), json.size());
    file.commit();
}

void announce_checkpoint(const std::string& dir, long long step, int num_ranks) {
    printf("checkpoint: step %lld saved in %s (%s, %s%s, %s)\n", step, dir.c_str(),
           checkpoint_model_path("", step).substr(1).c_str(),
           checkpoint_state_path("", step, 0).substr(1).c_str(),
           num_ranks > 1 ? strprintf(" .. rank %d", num_ranks - 1).c_str() : "",
           checkpoint_done_path("", step).substr(1).c_str());
    fflush(stdout);
}
