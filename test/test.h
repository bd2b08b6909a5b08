// A small test harness: TEST(name) { CHECK(...); } registers a test; test_main.cpp runs them all and
// prints one line per test, "PASS name", "FAIL name: why" or "SKIPPED name (why)", which
// test/run_tests.sh counts. A failed CHECK stops its test (it throws) and the next test runs.
#pragma once
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace tst {

struct TestCase {
    const char* name;
    void (*fn)();
};
std::vector<TestCase>& registry();
struct Registrar {
    Registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
struct Skipped : std::runtime_error {
    using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const char* file, int line, const std::string& what);
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// ||out - ref|| / ||ref|| in double precision (||out|| when ref is all zero).
double rel_l2_error(const float* out, const float* ref, size_t n);
double rel_l2_error(const double* out, const double* ref, size_t n);

// Runs a shell command with stderr folded into stdout; returns its exit status (-1 if it could not run).
int run_command(const std::string& command, std::string* output = nullptr);

// A fresh empty directory under $TMPDIR (or /tmp), removed when the program exits.
std::string make_temp_dir();

bool file_exists(const std::string& path);

}  // namespace tst

#define TEST(name)                                                        \
    static void name();                                                   \
    static ::tst::Registrar name##_registrar_(#name, name);               \
    static void name()

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) ::tst::fail(__FILE__, __LINE__, "CHECK(" #cond ")"); \
    } while (0)

// CHECK_MSG(cond, "printf format", args...): the message says what was being checked.
#define CHECK_MSG(cond, ...)                                              \
    do {                                                                  \
        if (!(cond)) ::tst::fail(__FILE__, __LINE__, ::tst::format(__VA_ARGS__)); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                   \
    do {                                                                                        \
        double a_ = (a), b_ = (b);                                                              \
        if (!(std::fabs(a_ - b_) <= (tol)))                                                     \
            ::tst::fail(__FILE__, __LINE__,                                                     \
                        ::tst::format("CHECK_NEAR(%s, %s): %.9g vs %.9g (tolerance %g)", #a, #b, \
                                      a_, b_, (double)(tol)));                                  \
    } while (0)

#define SKIP(why) throw ::tst::Skipped(why)
