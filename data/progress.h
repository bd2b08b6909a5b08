// Progress of a long job on stderr: "encoding: 120.5 / 400.0 MB (30%)", redrawn at most twice a
// second, and only once the job has run for a second (short jobs print nothing). add() may be called
// from many threads; only one of them prints at a time.
#pragma once
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

class Progress {
public:
    Progress(std::string what, size_t total_bytes);
    void add(size_t bytes);
    void finish();  // ends the line if anything was printed

private:
    using Clock = std::chrono::steady_clock;
    std::string what_;
    size_t total_;
    std::atomic<size_t> done_{0};
    Clock::time_point start_, last_print_;
    bool printed_ = false;
    std::mutex print_mutex_;
};
