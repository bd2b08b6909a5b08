// Files written by a thread while training goes on. A checkpoint's (or snapshot's) bytes are taken in
// host memory at a step boundary (FileImage); a BackgroundWriter then writes them to their paths, each
// through AtomicFile (temporary name, fsync, rename: a file exists whole or not at all), while the next
// steps run. One batch at a time: starting a batch first waits for the one before, so a checkpoint
// that comes before the previous one is written waits for it. A write that fails (a full disk) is
// reported by the next wait() or start() on the training thread, as the one-line error it would have
// been there.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

struct FileImage {
    std::string path;
    std::vector<char> bytes;
};

class BackgroundWriter {
public:
    BackgroundWriter() = default;
    ~BackgroundWriter();  // waits for the batch being written (an error then is printed, not thrown)
    BackgroundWriter(const BackgroundWriter&) = delete;
    BackgroundWriter& operator=(const BackgroundWriter&) = delete;

    // After waiting for the previous batch: in the background, removes the files and folders
    // `remove_first` names (older snapshots no longer needed, so that they free their memory before
    // the new one takes it), then writes `files` (in order).
    void start(std::vector<FileImage> files, std::vector<std::string> remove_first = {});
    // The same with a job that writes its files itself (a checkpoint's files, serialised, checksummed
    // and written piece by piece on the writer's thread, off the training thread).
    void start(std::function<void()> write_files);
    // Whether the last batch is completely written (true when there was none). Does not wait.
    bool finished() const { return !thread_.joinable() || done_.load(); }
    // Waits for the last batch; throws its write error as an InputError.
    void wait();
    // The time the last finished batch took to write, in ms.
    double last_write_ms() const { return last_write_ms_; }

private:
    void run(std::function<void()> write_files, std::vector<std::string> remove_first);
    std::thread thread_;
    std::atomic<bool> done_{true};
    std::string error_;
    double last_write_ms_ = 0;
};
