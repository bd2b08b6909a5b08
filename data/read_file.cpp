// Whole-file reading and path comparison (see read_file.h).
#include "data/read_file.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sys/stat.h>

#include "base/errors.h"
#include "base/file_io.h"

namespace fs = std::filesystem;

// The first number in a small file such as /proc/meminfo's line `key` ("MemAvailable:  123 kB",
// with key "MemAvailable:") or a cgroup file holding one number (key ""); false when absent.
static bool read_number(const char* path, const char* key, uint64_t* value) {
    FILE* f = fopen(path, "r");
    if (!f) return false;
    char line[256];
    bool found = false;
    const size_t key_length = strlen(key);
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, key, key_length) == 0)
            found = sscanf(line + key_length, "%" SCNu64, value) == 1;
    fclose(f);
    return found;
}

uint64_t available_memory_bytes(std::string* source) {
    uint64_t available = 0, limit = 0, used = 0;
    if (read_number("/proc/meminfo", "MemAvailable:", &available)) {
        available *= 1024;  // the file counts kB
        if (source) *source = "MemAvailable";
    }
    // A container's limit ("max" when there is none, which reads as no number).
    if (read_number("/sys/fs/cgroup/memory.max", "", &limit) &&
        read_number("/sys/fs/cgroup/memory.current", "", &used)) {
        const uint64_t room = limit > used ? limit - used : 0;
        if (available == 0 || room < available) {
            available = room;
            if (source) *source = "the room under the cgroup memory limit";
        }
    }
    return available;
}

// "64.0 TiB", "12.3 GiB", "512.0 KiB", "100 bytes".
static std::string size_text(uint64_t bytes) {
    const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = (double)bytes;
    int unit = 0;
    while (value >= 1024 && unit < 6) value /= 1024, unit++;
    return unit == 0 ? strprintf("%" PRIu64 " bytes", bytes) : strprintf("%.1f %s", value, units[unit]);
}

// Refuses, before anything is read, a file that could not be held in memory: reading it would end
// in std::bad_alloc, or in the kernel killing the process, after a long wait.
static void check_fits_in_memory(const std::string& path, uint64_t bytes) {
    std::string source;
    const uint64_t available = available_memory_bytes(&source);
    if (available == 0 || bytes <= available) return;
    fail("%s: %" PRIu64 " bytes (%s) is more than the %s of memory available (%s); it is read "
         "whole, so split it into smaller files",
         path.c_str(), bytes, size_text(bytes).c_str(), size_text(available).c_str(), source.c_str());
}

std::string read_file(const std::string& path) {
    // A FIFO or a device is refused (base/file_io.h); the file is closed however this ends.
    const std::unique_ptr<FILE, int (*)(FILE*)> file(open_regular_file(path), fclose);
    struct stat info;
    if (fstat(fileno(file.get()), &info) != 0)
        fail("%s: cannot read its size (%s)", path.c_str(), strerror(errno));
    check_fits_in_memory(path, (uint64_t)info.st_size);
    std::string bytes;
    bytes.reserve((size_t)info.st_size);
    char buffer[1 << 16];
    size_t got;
    while ((got = fread(buffer, 1, sizeof buffer, file.get())) > 0) bytes.append(buffer, got);
    if (ferror(file.get())) fail("%s: read failed", path.c_str());
    return bytes;
}

bool same_file(const std::string& a, const std::string& b) {
    std::error_code error_a, error_b;
    const fs::path canonical_a = fs::weakly_canonical(a, error_a);
    const fs::path canonical_b = fs::weakly_canonical(b, error_b);
    if (!error_a && !error_b && canonical_a == canonical_b) return true;
    std::error_code error;
    return fs::exists(a, error) && fs::exists(b, error) && fs::equivalent(a, b, error);
}

std::string input_at(const std::string& output, const std::vector<std::string>& inputs) {
    for (const std::string& input : inputs)
        if (same_file(output, input)) return input;
    return "";
}
