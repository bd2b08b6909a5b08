// Checkpoint and snapshot files written by a thread (background_writer.h).
#include "train/background_writer.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/host_arrays.h"

BackgroundWriter::~BackgroundWriter() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ending_ = true;
    }
    changed_.notify_all();
    thread_.join();
    if (!error_.empty()) fprintf(stderr, "error: %s\n", error_.c_str());
}

void BackgroundWriter::queue(std::vector<FileImage> files, std::function<void()> first) {
    auto shared = std::make_shared<std::vector<FileImage>>(std::move(files));
    queue([shared, first = std::move(first)]() {
        if (first) first();
        for (FileImage& f : *shared) {
            AtomicFile file(f.path);
            file.write(f.bytes.data(), f.bytes.size());
            file.commit();
            reuse_host_bytes(std::move(f.bytes));  // for the next snapshot's images (base/host_arrays.h)
        }
    });
}

void BackgroundWriter::queue(std::function<void()> job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_.push_back(std::move(job));
    }
    changed_.notify_all();
    if (!thread_.joinable()) thread_ = std::thread([this] { run_jobs(); });
}

bool BackgroundWriter::finished() {
    std::lock_guard<std::mutex> lock(mutex_);
    return jobs_.empty() && !running_;
}

void BackgroundWriter::wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return jobs_.empty() && !running_; });
    if (error_.empty()) return;
    const std::string error = error_;
    error_.clear();
    lock.unlock();
    fail("%s", error.c_str());
}

double BackgroundWriter::last_job_ms() {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_job_ms_;
}

void BackgroundWriter::run_jobs() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        changed_.wait(lock, [this] { return !jobs_.empty() || ending_; });
        if (jobs_.empty()) return;  // ending, and nothing left to write
        std::function<void()> job = std::move(jobs_.front());
        jobs_.pop_front();
        running_ = true;
        lock.unlock();
        const auto start = std::chrono::steady_clock::now();
        std::string error;
        try {
            job();
        } catch (const InputError& e) {
            error = e.what();
        }
        job = nullptr;  // what it held (a checkpoint's host copy) is freed here, off the training thread
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        lock.lock();
        running_ = false;
        last_job_ms_ = ms;
        if (!error.empty()) {
            if (error_.empty()) error_ = error;
            jobs_.clear();  // nothing queued behind a failed write may go on as if it had succeeded
        }
        changed_.notify_all();
    }
}
