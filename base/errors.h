// How host code reports bad input: fail("fmt", ...) throws an InputError carrying one line that
// names the file or flag and the problem (control characters copied from the input, such as a
// newline in a tensor name, are escaped). main() catches it, prints "error: <line>" and exits
// non-zero; destructors on the way out remove any temporary files, so no partial output is left
// behind.
#pragma once
#include <stdexcept>
#include <string>

struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Runs fn and returns what it returns; an InputError on the way is rethrown with the flag in front
// ("-e (--model): x.bin: is a token shard, not a model file"), so the message says which flag
// named the file.
template <typename Fn>
auto with_flag(const char* flag, Fn&& fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const InputError& e) { fail("%s: %s", flag, e.what()); }
}

// printf into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
