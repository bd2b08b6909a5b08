// Files written by a thread while training goes on. A checkpoint's (or snapshot's) bytes are taken in
// host memory at a step boundary; a BackgroundWriter then writes them, each file through AtomicFile
// (temporary name, fsync, rename: a file exists whole or not at all), while the next steps run.
// The writer runs jobs one after another, in the order they were queued, on one thread of its own:
// so a checkpoint's DONE marker, queued once its files are written, goes to disk before the files of
// the checkpoint queued after it, and the training thread never waits for the marker's fsync. When
// to wait is the caller's choice (finished, wait). A job that fails (a full disk) drops the jobs
// queued behind it, and its error is reported by the next wait() on the training thread, as the
// one-line error it would have been there.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
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
    ~BackgroundWriter();  // runs the jobs queued, then ends the thread (an error is printed, not thrown)
    BackgroundWriter(const BackgroundWriter&) = delete;
    BackgroundWriter& operator=(const BackgroundWriter&) = delete;

    // Queues a job that first runs `first` where given (the removal of older snapshots no longer
    // needed, so that they free their memory before the new one takes it), then writes `files` (in
    // order).
    void queue(std::vector<FileImage> files, std::function<void()> first = nullptr);
    // Queues a job that writes its files itself (a checkpoint's files, serialised, checksummed and
    // written piece by piece on the writer's thread, off the training thread), or any other work on
    // the files, such as a DONE marker.
    void queue(std::function<void()> job);
    // Whether every job queued so far has run (true when there was none). Does not wait.
    bool finished();
    // Waits until every job queued so far has run; throws the first error as an InputError.
    void wait();
    // The time the last job that ran took, in ms.
    double last_job_ms();

private:
    void run_jobs();  // the thread: runs jobs as they come until the writer is destroyed
    std::mutex mutex_;
    std::condition_variable changed_;  // a job queued or done, or the end
    std::deque<std::function<void()>> jobs_;
    bool running_ = false;  // a job taken from the queue is running
    bool ending_ = false;   // the destructor asks the thread to end once the queue is empty
    std::string error_;     // the first failed job's, until wait() reports it
    double last_job_ms_ = 0;
    std::thread thread_;  // started by the first job
};
