// How host code reports bad input: fail("fmt", ...) throws an InputError carrying one line that
// names the file or flag and the problem. main() catches it, prints "error: <line>" and exits
// non-zero; destructors on the way out remove any temporary files, so no partial output is left
// behind.
#pragma once
#include <stdexcept>
#include <string>

struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
