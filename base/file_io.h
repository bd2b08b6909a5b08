// File helpers every writer and reader in base/ and train/ uses.
// AtomicFile writes to "<path>.tmp.<pid>", and commit() flushes, fsyncs and renames it over <path>;
// if it is destroyed before commit() (an error, an exception) the temporary file is removed. So a
// file either appears complete under its real name or not at all.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

class AtomicFile {
public:
    explicit AtomicFile(const std::string& path);  // throws InputError if the temp file can't open
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    void write(const void* data, size_t bytes);  // throws InputError naming the file on failure
    void commit();                               // flush, fsync, close, rename; throws on failure

private:
    std::string path_, temp_path_;
    FILE* file_ = nullptr;
    int slot_ = -1;  // where remove_temporary_files_now() finds temp_path_ (-1: not registered)
};

// Removes the temporary files of the AtomicFiles now open. Async-signal-safe: for a signal handler
// about to end the process at once (train/interrupts.h), so that no half-written file stays behind.
void remove_temporary_files_now();

// Opens a file for reading after checking, without blocking, that it is a regular file: a FIFO, a
// device, a socket or a directory is refused with an InputError naming the path and what it is
// ("x: is a FIFO (named pipe), not a regular file"), so that no input can leave a program waiting.
// Every reader of the project's files opens them through it (or check_regular_file first).
FILE* open_regular_file(const std::string& path);
void check_regular_file(const std::string& path);

// Size of a file in bytes; throws InputError naming it if it cannot be opened.
uint64_t file_size(const std::string& path);

// Reads bytes [offset, offset + bytes) of a file; throws InputError naming it if that is not
// possible.
void read_bytes(const std::string& path, uint64_t offset, void* out, size_t bytes);

// A file held open for reading pieces of it at any offset, e.g. the slices of a checkpoint one rank
// keeps (one open for many reads); closed when destroyed.
class FileReader {
public:
    explicit FileReader(const std::string& path);  // throws InputError naming it if it cannot open
    ~FileReader();
    FileReader(FileReader&& other) noexcept
        : path_(std::move(other.path_)), file_(other.file_), size_(other.size_) {
        other.file_ = nullptr;
    }
    FileReader(const FileReader&) = delete;
    FileReader& operator=(const FileReader&) = delete;

    const std::string& path() const { return path_; }
    uint64_t size() const { return size_; }
    // Reads bytes [offset, offset + bytes); throws InputError naming the file if that is not possible.
    void read(uint64_t offset, void* out, size_t bytes);

private:
    std::string path_;
    FILE* file_ = nullptr;
    uint64_t size_ = 0;
};

// Reads the 256-int32 header at the start of a file; throws InputError if the file is shorter.
std::vector<int32_t> read_header(const std::string& path);

bool path_exists(const std::string& path);

// Creates a directory (and parents) if missing; throws InputError naming it on failure.
void make_directory(const std::string& path);
