// Progress lines on stderr (see progress.h).
#include "data/progress.h"

#include <cstdio>

Progress::Progress(std::string what, size_t total_bytes)
    : what_(std::move(what)), total_(total_bytes), start_(Clock::now()), last_print_(start_) {}

void Progress::add(size_t bytes) {
    size_t done = done_ += bytes;
    Clock::time_point now = Clock::now();
    if (now - start_ < std::chrono::seconds(1)) return;
    std::unique_lock<std::mutex> lock(print_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || now - last_print_ < std::chrono::milliseconds(500)) return;
    last_print_ = now;
    printed_ = true;
    double seconds = std::chrono::duration<double>(now - start_).count();
    fprintf(stderr, "\r%s: %.1f / %.1f MB (%.0f%%), %.1f MB/s   ", what_.c_str(), done / 1e6,
            total_ / 1e6, total_ ? 100.0 * done / total_ : 100.0, done / 1e6 / seconds);
    fflush(stderr);
}

void Progress::finish() {
    if (printed_) fprintf(stderr, "\n");
}
