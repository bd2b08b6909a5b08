// What every fuzz target (test/fuzz/fuzz_*.cpp) shares. The parsers under test read files, so each
// input is first written to a scratch file; a parser may then refuse it only by throwing InputError
// with a one-line message. Anything else (another exception, a message spanning lines, and what the
// sanitizers and libFuzzer catch themselves: a crash, a leak, a hang, a huge allocation) is a
// finding. FUZZ_SHOW_ERRORS=1 prints each refusal, to see what a seed exercises.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "base/errors.h"

// A file of this process's scratch folder under $FUZZ_SCRATCH (default /tmp; scripts/fuzz.sh gives a
// temporary folder it removes at exit).
inline std::string scratch_file(const std::string& name) {
    static const std::string dir = [] {
        const char* base = getenv("FUZZ_SCRATCH");
        std::string d =
            std::string(base && *base ? base : "/tmp") + "/fuzz." + std::to_string(getpid());
        mkdir(d.c_str(), 0700);
        return d;
    }();
    return dir + "/" + name;
}

// Writes bytes to the scratch file `name` and returns its path.
inline std::string write_scratch(const std::string& name, const void* data, size_t size) {
    const std::string path = scratch_file(name);
    FILE* f = fopen(path.c_str(), "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path.c_str());
        abort();
    }
    return path;
}

// Runs fn: returning or throwing a one-line InputError is clean; anything else aborts (a finding).
template <typename Fn>
void expect_clean(Fn&& fn) {
    try {
        fn();
    } catch (const InputError& e) {
        const std::string line = e.what();
        if (getenv("FUZZ_SHOW_ERRORS")) fprintf(stderr, "error: %s\n", line.c_str());
        if (line.empty() || line.find('\n') != std::string::npos) {
            fprintf(stderr, "fuzz: InputError message is not one line: [%s]\n", line.c_str());
            abort();
        }
    } catch (const std::exception& e) {
        fprintf(stderr, "fuzz: exception other than InputError: %s\n", e.what());
        abort();
    }
}
