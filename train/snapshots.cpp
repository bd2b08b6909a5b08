// In-memory snapshots and their recovery (snapshots.h).
#include "train/snapshots.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/host_arrays.h"
#include "train/checkpoint.h"
#include "train/training_state.h"

namespace fs = std::filesystem;

std::string snapshot_root(const TrainOptions& opt) {
    if (opt.output_dir.empty()) return "";
    const std::string folder = fs::absolute(opt.output_dir).lexically_normal().string();
    const std::string parent = opt.snapshot_dir.empty() ? "/dev/shm" : opt.snapshot_dir;
    return strprintf("%s/gpt_snapshots_%016llx", parent.c_str(),
                     (unsigned long long)fnv1a64(folder.c_str(), folder.size(), FNV_OFFSET));
}

// A path made absolute with its links resolved as far as it exists ("a/../b" and a link to b agree).
static fs::path resolved(const std::string& path) {
    std::error_code error;
    const fs::path p = fs::weakly_canonical(fs::absolute(path), error);
    return error ? fs::absolute(path).lexically_normal() : p;
}

// Whether `inner` is `outer` or lies below it.
static bool lies_within(const fs::path& inner, const fs::path& outer) {
    auto o = outer.begin(), i = inner.begin();
    for (; o != outer.end() && !o->empty(); ++o, ++i)
        if (i == inner.end() || *i != *o) return false;
    return true;
}

void check_snapshot_dir(const TrainOptions& opt) {
    if (opt.snapshot_dir.empty() || opt.snapshot_every <= 0) return;
    const std::string& dir = opt.snapshot_dir;
    std::error_code error;
    if (fs::exists(dir, error) && !fs::is_directory(dir, error))
        fail("--snapshot-dir: %s is not a folder (the snapshots go into a folder the run makes inside it)",
             dir.c_str());
    const fs::path snapshots = resolved(dir), output = resolved(opt.output_dir);
    if (snapshots == output)
        fail("--snapshot-dir: %s is the output folder (-o); give a folder of node memory apart from it, such as "
             "/dev/shm", dir.c_str());
    if (lies_within(output, snapshots))
        fail("--snapshot-dir: %s holds the output folder %s; give a folder apart from it, such as /dev/shm",
             dir.c_str(), opt.output_dir.c_str());
}

std::vector<FileImage> checkpoint_files(const std::string& dir, const CheckpointPart& part) {
    std::vector<FileImage> files;
    if (part.rank == 0)
        files.push_back({checkpoint_model_path(dir, part.step),
                         any_model_file_image(part.config, part.weights.data(), part.weight_type)});
    files.push_back({checkpoint_state_path(dir, part.step, part.rank), training_state_image(part.state)});
    return files;
}

void write_checkpoint_files(const std::string& dir, const CheckpointPart& part) {
    if (part.rank == 0)
        write_any_model_file(checkpoint_model_path(dir, part.step), part.config, part.weights.data(), part.weight_type);
    write_training_state(checkpoint_state_path(dir, part.step, part.rank), part.state);
}

void reuse_part_arrays(CheckpointPart& part) {
    for (std::vector<float>* array : {&part.weights, &part.state.params, &part.state.adam_m, &part.state.adam_v})
        reuse_host_array(std::move(*array));
}

// The names this file gives what it makes: "held_by_RRRRR", "SSSSSSSS_of_NNNNN", and in those the
// checkpoint files "model_SSSSSSSS.bin" and "state_SSSSSSSS_RRRRR.bin" (with an AtomicFile's
// ".tmp.PID" while one is written). Removals take only names of these shapes.
static bool all_digits(const std::string& text, size_t from, size_t count) {
    if (text.size() < from + count) return false;
    for (size_t i = from; i < from + count; i++)
        if (text[i] < '0' || text[i] > '9') return false;
    return true;
}
static bool is_holder_name(const std::string& n) {
    return n.size() == 13 && n.compare(0, 8, "held_by_") == 0 && all_digits(n, 8, 5);
}
static bool is_snapshot_folder_name(const std::string& n) {
    return n.size() == 17 && all_digits(n, 0, 8) && n.compare(8, 4, "_of_") == 0 && all_digits(n, 12, 5);
}
static bool is_snapshot_file_name(const std::string& name) {
    const size_t temporary = name.find(".bin.tmp.");
    const std::string n = temporary == std::string::npos ? name : name.substr(0, temporary + 4);
    if (temporary != std::string::npos && !all_digits(name, temporary + 9, name.size() - temporary - 9)) return false;
    const bool model = n.size() == 18 && n.compare(0, 6, "model_") == 0 && all_digits(n, 6, 8) &&
                       n.compare(14, 4, ".bin") == 0;
    const bool state = n.size() == 24 && n.compare(0, 6, "state_") == 0 && all_digits(n, 6, 8) && n[14] == '_' &&
                       all_digits(n, 15, 5) && n.compare(20, 4, ".bin") == 0;
    return model || state;
}

// The entries of a folder that are themselves folders (not links) with names `is_ours` accepts, or
// files (not links) with such names: what a removal may take.
static std::vector<fs::path> our_entries(const fs::path& dir, bool (*is_ours)(const std::string&), bool folders) {
    std::vector<fs::path> found;
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
        const fs::file_status status = entry.symlink_status(error);
        const bool kind = folders ? fs::is_directory(status) : fs::is_regular_file(status);
        if (!error && kind && is_ours(entry.path().filename().string())) found.push_back(entry.path());
    }
    return found;
}

// Removes a snapshot folder's files and then the folder, which goes only when nothing else is in it.
static void remove_snapshot_folder(const fs::path& folder) {
    std::error_code ignored;  // a file already gone is no error
    for (const fs::path& file : our_entries(folder, is_snapshot_file_name, false)) fs::remove(file, ignored);
    fs::remove(folder, ignored);  // an empty folder only
}

void remove_snapshot_tree(const std::string& root) {
    std::error_code error, ignored;
    if (fs::is_symlink(root, error) || !fs::is_directory(root, error)) return;
    for (const fs::path& holder : our_entries(root, is_holder_name, true)) {
        for (const fs::path& folder : our_entries(holder, is_snapshot_folder_name, true)) remove_snapshot_folder(folder);
        fs::remove(holder, ignored);
    }
    fs::remove(root, ignored);
}

// The folder of what rank `holder` of a run on `ranks` ranks keeps of step `step`.
static std::string held_by_path(const std::string& root, int holder) {
    return strprintf("%s/held_by_%05d", root.c_str(), holder);
}
static std::string snapshot_path(const std::string& root, int holder, long long step, int ranks) {
    return strprintf("%s/%08lld_of_%05d", held_by_path(root, holder).c_str(), step, ranks);
}

// Files as bytes for the ring, and back: a count, then each file's name and bytes with their sizes.
static std::vector<char> files_bytes(const std::vector<FileImage>& files) {
    size_t total = sizeof(uint64_t), at = 0;
    for (const FileImage& f : files)
        total += 2 * sizeof(uint64_t) + fs::path(f.path).filename().string().size() + f.bytes.size();
    std::vector<char> bytes = reusable_host_bytes(total);  // every byte written (base/host_arrays.h)
    auto append = [&](const void* data, size_t n) {
        if (n) memcpy(bytes.data() + at, data, n);
        at += n;
    };
    const uint64_t count = files.size();
    append(&count, sizeof count);
    for (const FileImage& f : files) {
        const std::string name = fs::path(f.path).filename().string();
        const uint64_t sizes[2] = {name.size(), f.bytes.size()};
        append(sizes, sizeof sizes);
        append(name.data(), name.size());
        append(f.bytes.data(), f.bytes.size());
    }
    return bytes;
}
static std::vector<FileImage> files_from_bytes(const std::vector<char>& bytes, const std::string& dir) {
    std::vector<FileImage> files;
    size_t at = 0;
    auto take = [&](void* out, size_t n) {
        if (bytes.size() - at < n) fail("internal error: a snapshot part from the previous rank is cut short");
        memcpy(out, bytes.data() + at, n);
        at += n;
    };
    uint64_t count = 0;
    take(&count, sizeof count);
    for (uint64_t i = 0; i < count; i++) {
        uint64_t sizes[2];
        take(sizes, sizeof sizes);
        std::string name(sizes[0], '\0');
        take(name.data(), name.size());
        FileImage f{dir + "/" + name, reusable_host_bytes(sizes[1])};
        take(f.bytes.data(), f.bytes.size());
        files.push_back(std::move(f));
    }
    return files;
}

// The steps of the snapshot folders ("SSSSSSSS_of_NNNNN") in a held_by folder, with their paths.
static std::vector<std::pair<long long, std::string>> snapshot_folders(const std::string& held_by) {
    std::vector<std::pair<long long, std::string>> found;
    std::error_code error;
    if (!fs::is_directory(held_by, error)) return found;
    for (const fs::directory_entry& entry : fs::directory_iterator(held_by, error)) {
        const std::string name = entry.path().filename().string();
        long long step = 0;
        int ranks = 0;
        char tail = 0;
        if (sscanf(name.c_str(), "%8lld_of_%5d%c", &step, &ranks, &tail) == 2 && name.size() == 17)
            found.push_back({step, entry.path().string()});
    }
    std::sort(found.begin(), found.end());
    return found;
}

SnapshotWrite prepare_snapshot(const std::string& root, const CheckpointPart& mine, RankGroup& ranks) {
    SnapshotWrite write;
    const std::string dir = snapshot_path(root, ranks.rank, mine.step, ranks.num_ranks);
    std::error_code error;
    fs::create_directories(dir, error);
    if (error) fail("--snapshot-every: cannot create %s (%s)", dir.c_str(), error.message().c_str());
    // The older snapshots but the newest, removed before this one is written. The newest is complete
    // on every rank (the loop waited for all of them before it logged this step) and stays until
    // this one is: a failure meanwhile resumes from it, losing one step, not all since the last
    // checkpoint. (This step's folder, just created, is not an older one.)
    std::vector<std::pair<long long, std::string>> older;
    for (const auto& folder : snapshot_folders(held_by_path(root, ranks.rank)))
        if (folder.first != mine.step) older.push_back(folder);
    std::vector<std::string> remove;
    for (size_t i = 0; i + 1 < older.size(); i++) remove.push_back(older[i].second);
    write.remove = [remove]() {
        for (const std::string& folder : remove) remove_snapshot_folder(folder);
    };
    write.files = checkpoint_files(dir, mine);
    if (ranks.num_ranks > 1) {  // the previous rank's part, kept here too
        std::vector<char> sent = files_bytes(write.files), received = ranks.pass_to_next_rank(sent);
        for (FileImage& f : files_from_bytes(received, dir)) write.files.push_back(std::move(f));
        reuse_host_bytes(std::move(sent));
        reuse_host_bytes(std::move(received));
    }
    for (const FileImage& f : write.files) write.bytes += f.bytes.size();
    return write;
}

// One snapshot file a rank can see: its step, the run's ranks, the part (-1: the model file, else
// the rank of the state file) and where it is.
struct SeenFile {
    long long step;
    int ranks, part;
    std::string path;
};

static std::vector<SeenFile> files_seen(const std::string& root) {
    std::vector<SeenFile> seen;
    std::error_code error;
    if (!fs::is_directory(root, error)) return seen;
    for (const fs::directory_entry& holder : fs::directory_iterator(root, error)) {
        if (holder.path().filename().string().rfind("held_by_", 0) != 0) continue;
        for (const auto& [step, folder] : snapshot_folders(holder.path().string())) {
            const int ranks = atoi(folder.c_str() + folder.size() - 5);
            for (const fs::directory_entry& file : fs::directory_iterator(folder, error)) {
                const std::string name = file.path().filename().string();
                long long file_step = -1;
                int rank = -1;
                char tail[8] = {0};
                if (sscanf(name.c_str(), "model_%8lld%7s", &file_step, tail) == 2 && strcmp(tail, ".bin") == 0 &&
                    name.size() == 18)
                    seen.push_back({step, ranks, -1, file.path().string()});
                else if (sscanf(name.c_str(), "state_%8lld_%5d%7s", &file_step, &rank, tail) == 3 &&
                         strcmp(tail, ".bin") == 0 && name.size() == 24 && rank < ranks)
                    seen.push_back({step, ranks, rank, file.path().string()});
            }
        }
    }
    return seen;
}

// Rank 0's choice: "STEP RANKS" then one "PART HOLDER PATH" line per part, or "" for none.
static std::string choose_snapshot(const std::vector<std::vector<char>>& listings, long long newest_checkpoint,
                                   int* from_neighbours) {
    struct Holder {
        int rank = -1;
        std::string path;
        bool own = false;  // the part's own rank's copy (rank 0's for the model file)
    };
    // (step, ranks) -> part -> its holders, the owner's own copy first where it is there
    std::map<std::pair<long long, int>, std::map<int, Holder>> parts;
    for (size_t r = 0; r < listings.size(); r++) {
        std::istringstream lines(std::string(listings[r].begin(), listings[r].end()));
        long long step;
        int ranks, part;
        std::string path;
        while (lines >> step >> ranks >> part >> path) {
            const bool own = path.find(strprintf("/held_by_%05d/", part < 0 ? 0 : part)) != std::string::npos;
            Holder& holder = parts[{step, ranks}][part];
            if (holder.path.empty() || (own && !holder.own)) holder = Holder{(int)r, path, own};
        }
    }
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        const auto [step, ranks] = it->first;
        if (step <= newest_checkpoint) break;
        bool complete = it->second.count(-1) > 0;
        for (int r = 0; r < ranks && complete; r++) complete = it->second.count(r) > 0;
        if (!complete) continue;
        std::string choice = strprintf("%lld %d\n", step, ranks);
        *from_neighbours = 0;
        for (const auto& [part, holder] : it->second) {
            if (part >= ranks) continue;
            choice += strprintf("%d %d %s\n", part, holder.rank, holder.path.c_str());
            if (!holder.own) (*from_neighbours)++;  // only the next rank's copy was left
        }
        return choice;
    }
    return "";
}

static void copy_file(const std::string& from, const std::string& to) {
    std::vector<char> bytes(file_size(from));
    read_bytes(from, 0, bytes.data(), bytes.size());
    AtomicFile file(to);
    file.write(bytes.data(), bytes.size());
    file.commit();
}

long long recover_snapshot(const TrainOptions& opt, RankGroup& ranks) {
    const std::string root = snapshot_root(opt);
    if (root.empty() || !opt.resume) return 0;
    std::string listing;
    for (const SeenFile& f : files_seen(root))
        listing += strprintf("%lld %d %d %s\n", f.step, f.ranks, f.part, f.path.c_str());
    const std::vector<std::vector<char>> listings = ranks.gather_on_rank0(std::vector<char>(listing.begin(), listing.end()));
    std::string choice;
    int from_neighbours = 0;
    if (ranks.rank == 0) {
        const std::vector<long long> checkpoints = complete_checkpoints(opt.output_dir, 1);
        choice = choose_snapshot(listings, checkpoints.empty() ? 0 : checkpoints.back(), &from_neighbours);
    }
    const std::vector<char> shared = ranks.broadcast_from_rank0(std::vector<char>(choice.begin(), choice.end()));
    std::istringstream lines(std::string(shared.begin(), shared.end()));
    long long step = 0;
    int snapshot_ranks = 0;
    if (lines >> step >> snapshot_ranks) {
        int part, holder;
        std::string path;
        std::error_code error;
        while (lines >> part >> holder >> path) {
            if (holder != ranks.rank) continue;
            fs::create_directories(opt.output_dir, error);
            copy_file(path, part < 0 ? checkpoint_model_path(opt.output_dir, step)
                                     : checkpoint_state_path(opt.output_dir, step, part));
        }
    }
    ranks.barrier();
    if (step > 0 && ranks.rank == 0) {
        mark_checkpoint_done(opt.output_dir, step);
        printf("snapshot: step %lld brought from node memory into %s (the parts of %d ranks, %d of them the next "
               "rank's copies)\n",
               step, opt.output_dir.c_str(), snapshot_ranks, from_neighbours);
    }
    remove_snapshots(root, ranks);
    return step;
}

void remove_snapshots(const std::string& root, RankGroup& ranks) {
    if (root.empty()) return;
    ranks.barrier();  // no rank still reads them
    if (ranks.local_rank == 0) remove_snapshot_tree(root);
    ranks.barrier();
}
