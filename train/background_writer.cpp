// Checkpoint and snapshot files written by a thread (background_writer.h).
#include "train/background_writer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "base/errors.h"
#include "base/file_io.h"

BackgroundWriter::~BackgroundWriter() {
    if (!thread_.joinable()) return;
    thread_.join();
    if (!error_.empty()) fprintf(stderr, "error: %s\n", error_.c_str());
}

void BackgroundWriter::start(std::vector<FileImage> files, std::vector<std::string> remove_first) {
    auto shared = std::make_shared<std::vector<FileImage>>(std::move(files));
    run(
        [shared]() {
            for (const FileImage& f : *shared) {
                AtomicFile file(f.path);
                file.write(f.bytes.data(), f.bytes.size());
                file.commit();
            }
        },
        std::move(remove_first));
}

void BackgroundWriter::start(std::function<void()> write_files) { run(std::move(write_files), {}); }

void BackgroundWriter::run(std::function<void()> write_files, std::vector<std::string> remove_first) {
    wait();
    done_ = false;
    thread_ = std::thread([this, write_files = std::move(write_files), remove_first = std::move(remove_first)]() {
        const auto start = std::chrono::steady_clock::now();
        try {
            std::error_code ignored;  // a folder already gone is no error
            for (const std::string& path : remove_first) std::filesystem::remove_all(path, ignored);
            write_files();
        } catch (const InputError& e) {
            error_ = e.what();
        }
        last_write_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
        done_ = true;
    });
}

void BackgroundWriter::wait() {
    if (!thread_.joinable()) return;
    thread_.join();
    if (!error_.empty()) {
        const std::string error = error_;
        error_.clear();
        fail("%s", error.c_str());
    }
}
