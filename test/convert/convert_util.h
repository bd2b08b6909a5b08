// What the ./convert tests share: the programs' folder, running ./convert, and checking that it
// fails cleanly.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "test/train/host_test_util.h"

// A program of the build ($BIN, else the current folder).
inline std::string bin(const char* program) {
    const char* dir = getenv("BIN");
    return std::string(dir && *dir ? dir : ".") + "/" + program;
}

// ./convert with the arguments; its exit status, its output (stdout and stderr) into out.
inline int convert(const std::string& args, std::string* out) {
    return tst::run_command(bin("convert") + " " + args, out);
}

// ./convert exits 1 with one "error: " line holding every word, and writes nothing at `output`.
inline void convert_fails(const std::string& args, const std::string& output,
                          const std::vector<std::string>& words) {
    std::string out;
    CHECK_MSG(convert(args, &out) == 1, "exit status for %s: %s", args.c_str(), out.c_str());
    CHECK_MSG(out.rfind("error: ", 0) == 0 && out.find('\n') == out.size() - 1, "%s", out.c_str());
    for (const std::string& w : words)
        CHECK_MSG(out.find(w) != std::string::npos, "'%s' lacks '%s'", out.c_str(), w.c_str());
    if (output.empty()) return;
    CHECK_MSG(!std::filesystem::exists(output), "%s was left", output.c_str());
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(output).parent_path()))
        CHECK_MSG(e.path().string().find(".tmp.") == std::string::npos, "%s left",
                  e.path().string().c_str());
}
