// Runs every TEST registered in the program (or those whose name contains argv[1]) and prints a
// PASS / FAIL / SKIPPED line for each. Exit status 1 when any test failed.
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

#include "test/test.h"

namespace tst {

std::vector<TestCase>& registry() {
    static std::vector<TestCase> tests;
    return tests;
}

void fail(const char* file, int line, const std::string& what) {
    throw Failure(format("%s:%d: %s", file, line, what.c_str()));
}

std::string format(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    char small[512];
    int n = vsnprintf(small, sizeof small, fmt, args);
    va_end(args);
    if (n < (int)sizeof small) return std::string(small, n > 0 ? n : 0);
    std::string big(n + 1, '\0');
    va_start(args, fmt);
    vsnprintf(big.data(), big.size(), fmt, args);
    va_end(args);
    big.resize(n);
    return big;
}

template <typename Real>
static double rel_l2(const Real* out, const Real* ref, size_t n) {
    double diff = 0, norm = 0, out_norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - (double)ref[i];
        diff += d * d;
        norm += (double)ref[i] * ref[i];
        out_norm += (double)out[i] * out[i];
    }
    if (std::isnan(diff)) return INFINITY;
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(out_norm);
}
double rel_l2_error(const float* out, const float* ref, size_t n) { return rel_l2(out, ref, n); }
double rel_l2_error(const double* out, const double* ref, size_t n) { return rel_l2(out, ref, n); }

int run_command(const std::string& command, std::string* output) {
    std::string full = "(" + command + ") 2>&1";
    FILE* pipe = popen(full.c_str(), "r");
    if (!pipe) return -1;
    std::string text;
    char buffer[4096];
    size_t got;
    while ((got = fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, got);
    int status = pclose(pipe);
    if (output) *output = text;
    if (status == -1) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static std::vector<std::string>& temp_dirs() {
    static std::vector<std::string> dirs;
    return dirs;
}

std::string make_temp_dir() {
    const char* base = getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/gpt_test_XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) fail(__FILE__, __LINE__, "mkdtemp failed for " + pattern);
    temp_dirs().push_back(buf.data());
    return buf.data();
}

bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

}  // namespace tst

int main(int argc, char** argv) {
    const char* filter = argc > 1 ? argv[1] : nullptr;
    int failed = 0;
    for (const tst::TestCase& test : tst::registry()) {
        if (filter && !strstr(test.name, filter)) continue;
        try {
            test.fn();
            printf("PASS %s\n", test.name);
        } catch (const tst::Skipped& e) {
            printf("SKIPPED %s (%s)\n", test.name, e.what());
        } catch (const std::exception& e) {
            printf("FAIL %s: %s\n", test.name, e.what());
            failed++;
        }
        fflush(stdout);
    }
    if (!getenv("KEEP_TEST_DIRS"))
        for (const std::string& dir : tst::temp_dirs()) std::filesystem::remove_all(dir);
    return failed ? 1 : 0;
}
