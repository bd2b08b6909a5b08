// Whole-file reading for the data tools, with one-line errors that name the file, and the path
// comparison that keeps a program's output off its own inputs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

// The bytes of a file; throws InputError if it is missing, not a regular file (a FIFO, a device, a
// directory: base/file_io.h), unreadable, or larger than the memory this process can still take
// (available_memory_bytes), which is checked before anything is read.
std::string read_file(const std::string& path);

// Bytes of memory this process can still take: /proc/meminfo's MemAvailable, or the room under a
// cgroup v2 memory limit when that is lower; 0 when neither is known. `source` (may be null)
// receives where the figure came from ("MemAvailable").
uint64_t available_memory_bytes(std::string* source = nullptr);

// Whether two paths name one file: equal once absolute and free of ".", ".." and symbolic links
// (std::filesystem::weakly_canonical), so "./t.txt" is "t.txt"; or two names of one existing file
// (a hard link).
bool same_file(const std::string& a, const std::string& b);

// The first of `inputs` that names the same file as `output` (same_file), or "" when none does.
std::string input_at(const std::string& output, const std::vector<std::string>& inputs);
