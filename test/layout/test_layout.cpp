// The repository's floor plan (test/layout/floor_plan.h) as a test: first the checks themselves on
// a small made-up tree holding one of each fault (so that a check that finds nothing is known to be
// able to find something), then each check on this repository.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "test/layout/floor_plan.h"
#include "test/layout/source_text.h"
#include "test/test.h"

namespace fs = std::filesystem;
using layout::Finding;
using layout::Report;

namespace {

void write_file(const std::string& root, const std::string& relative, const std::string& text) {
    const fs::path path = fs::path(root) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
}

// A function whose body spans `lines` lines, brace to brace.
std::string function_of(const std::string& signature, int lines) {
    std::string text = signature + " {\n";
    for (int i = 0; i < lines - 2; i++) text += "    x++;\n";
    return text + "}\n";
}

// The number of findings on `file` (and `line`, unless 0) whose text contains `words`.
int count_findings(const Report& report, const std::string& file, int line, const std::string& words) {
    int n = 0;
    for (const Finding& f : report.findings)
        if (f.file == file && (line == 0 || f.line == line) && f.what.find(words) != std::string::npos) n++;
    return n;
}

// A tree with, on purpose: an upward include, an include of a test file, a cycle between two
// folders of one level, a folder outside the plan, CUDA in host folders, and functions on both
// sides of the length limit. Files in test/, dev/, scripts/ and skipped folders break every rule
// too, and must not be reported.
std::string faulty_tree() {
    static std::string root;
    if (!root.empty()) return root;
    root = tst::make_temp_dir();
    write_file(root, "base/errors.h", "#pragma once\n#include <vector>\n");
    write_file(root, "base/upward.h", "#pragma once\n#include \"base/errors.h\"\n#include \"train/run.h\"\n");
    write_file(root, "base/uses_test.h", "#include \"test/helper.h\"\n");
    write_file(root, "train/run.h", "#pragma once\n#include \"base/errors.h\"\n");
    write_file(root, "kernels/a.h", "#include \"cpu/b.h\"\n");
    write_file(root, "kernels/c.h", "#pragma once\n");
    write_file(root, "cpu/b.h", "#include \"kernels/c.h\"\n");
    write_file(root, "newfolder/thing.cpp", "#include \"train/run.h\"\nint thing() { return 1; }\n");
    write_file(root, "base/alloc.cpp",
               "// cudaFree(p) in a comment\n"
               "void grab(void** p) {\n"
               "    const char* s = \"cudaMemcpy(\";\n"
               "    cudaMalloc (p, 4);\n"
               "}\n");
    write_file(root, "train/gpu_use.cpp",
               "#include <cuda_runtime.h>\n#include \"kernels/c.h\"\n#include \"base/errors.h\"\n");
    write_file(root, "train/long.cpp",
               "int x;\n" + function_of("void just_over()", 81) + function_of("void at_the_limit()", 80) +
                   "struct Holder {\n" + function_of("    int method(int a) const", 90) + "};\n" +
                   "static const int table[] = {\n" + std::string(100, '\n') + "};\n");
    write_file(root, "train/train_flags.cpp", function_of("std::vector<Flag> flag_table(TrainOptions& o)", 100));
    write_file(root, "kernels/k.cu", function_of("__global__ void big_kernel(float* out)", 200));
    write_file(root, "train_gpt.cu", function_of("int main(int argc, char** argv)", 82));
    // Outside the plan or skipped: each would be a finding if it counted.
    write_file(root, "test/helper.h", "#include \"train/run.h\"\n#include <cuda_runtime.h>\n");
    write_file(root, "test/deep/test_x.cpp", function_of("void long_test()", 300));
    write_file(root, "dev/bench.cu", "#include \"train/run.h\"\n");
    write_file(root, "build/gen.cpp", function_of("void generated()", 300));
    write_file(root, "build-san/gen.cpp", "#include \"train/run.h\"\n");
    write_file(root, "data/cache/lib.cpp", function_of("void vendored()", 300));
    write_file(root, ".hidden/x.cpp", function_of("void hidden()", 300));
    write_file(root, "node_modules/m/x.h", "#include \"train/run.h\"\n");
    write_file(root, "base/notes.txt", "#include \"train/run.h\"\n");
    return root;
}

std::string repository_root() {
    const std::string root = layout::find_repository_root();
    CHECK_MSG(!root.empty(), "no folder holding test/layout/floor_plan.h above %s",
              fs::current_path().c_str());
    return root;
}

}  // namespace

// ---- the checks on made-up trees ----

TEST(finds_upward_includes_and_includes_of_tests) {
    const Report r = layout::check_include_levels(faulty_tree());
    CHECK_MSG(r.findings.size() == 2, "want 2 findings, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "base/upward.h", 3, "train/run.h (train/, level 4) from base/, level 0") == 1);
    CHECK(count_findings(r, "base/uses_test.h", 1, "test/helper.h, a test or benchmark file") == 1);
}

TEST(finds_include_cycles) {
    // Two cycles: the one between cpu/ and kernels/, and base/upward.h's include of train/ closes
    // another, through each include of base/ from train/.
    const Report r = layout::check_include_cycles(faulty_tree());
    CHECK_MSG(r.findings.size() == 5, "want 5 findings, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "cpu/b.h", 1, "part of the cycle cpu/ -> kernels/ -> cpu/") == 1);
    CHECK(count_findings(r, "kernels/a.h", 1, "part of the cycle cpu/ -> kernels/ -> cpu/") == 1);
    CHECK(count_findings(r, "base/upward.h", 3, "part of the cycle base/ -> train/ -> base/") == 1);
    CHECK(count_findings(r, "train/run.h", 2, "part of the cycle base/ -> train/ -> base/") == 1);
    CHECK(count_findings(r, "train/gpu_use.cpp", 3, "part of the cycle base/ -> train/ -> base/") == 1);
}

TEST(finds_a_longer_cycle_and_only_its_includes) {
    const std::string root = tst::make_temp_dir();
    write_file(root, "emu/a.h", "#include \"data/b.h\"\n#include \"base/z.h\"\n");
    write_file(root, "data/b.h", "#include \"cpu/c.h\"\n");
    write_file(root, "cpu/c.h", "#include \"emu/a.h\"\n#include \"base/z.h\"\n");
    write_file(root, "base/z.h", "\n");
    const Report r = layout::check_include_cycles(root);
    CHECK_MSG(r.findings.size() == 3, "want 3 findings, got:%s", layout::describe(r.findings).c_str());
    for (const char* file : {"emu/a.h", "data/b.h", "cpu/c.h"})
        CHECK(count_findings(r, file, 1, "cpu/ -> emu/ -> data/ -> cpu/") == 1);
}

TEST(finds_folders_outside_the_plan) {
    const Report r = layout::check_folders_placed(faulty_tree());
    CHECK_MSG(r.findings.size() == 1, "want 1 finding, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "newfolder/thing.cpp", 0, "newfolder/ is not in the floor plan") == 1);
}

TEST(finds_cuda_in_host_folders) {
    const Report r = layout::check_host_code_without_cuda(faulty_tree());
    CHECK_MSG(r.findings.size() == 3, "want 3 findings, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "base/alloc.cpp", 4, "cudaMalloc") == 1);
    CHECK(count_findings(r, "train/gpu_use.cpp", 1, "cuda_runtime.h") == 1);
    CHECK(count_findings(r, "train/gpu_use.cpp", 2, "kernels/c.h") == 1);
}

TEST(finds_long_host_functions) {
    const Report r = layout::check_function_lengths(faulty_tree());
    CHECK_MSG(r.findings.size() == 3, "want 3 findings, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "train/long.cpp", 2, "just_over is 81 lines long") == 1);
    CHECK(count_findings(r, "train/long.cpp", 164, "method is 90 lines long") == 1);
    CHECK(count_findings(r, "train_gpt.cu", 1, "main is 82 lines long") == 1);
}

TEST(reports_an_exemption_that_matches_nothing) {
    const std::vector<layout::LongFunctionExemption> exemptions = {{"train/long.cpp", "at_the_limit", "test"}};
    const Report r = layout::check_function_lengths(faulty_tree(), 80, exemptions);
    CHECK(count_findings(r, "train/long.cpp", 0, "exemption for at_the_limit matches no function") == 1);
    CHECK(count_findings(r, "train/train_flags.cpp", 1, "flag_table is 100 lines long") == 1);
}

TEST(reports_braces_that_do_not_pair) {
    const std::string root = tst::make_temp_dir();
    write_file(root, "train/a.cpp", "void f() {\n    if (x) {\n}\n");
    write_file(root, "train/b.cpp", "void f() {\n}\n}\n");
    const Report r = layout::check_function_lengths(root);
    CHECK(count_findings(r, "train/a.cpp", 0, "the '{' on line 1 is never closed") == 1);
    CHECK(count_findings(r, "train/b.cpp", 0, "a '}' on line 3 closes nothing") == 1);
}

TEST(finds_source_folders_without_tests) {
    // base/ has its tests; parallel/'s two folders share test/parallel/; emu/sub/ has its own (emu/
    // holds no sources); cpu/'s test folder holds only a helper and kernels/ has none. The root's
    // programs, dev/ and scripts/ are not asked for tests.
    const std::string root = tst::make_temp_dir();
    for (const char* source : {"base/a.h", "parallel/comm/c.cpp", "parallel/plan/p.h", "emu/sub/x.h", "cpu/b.h",
                               "kernels/k.cu", "train_gpt.cu", "dev/bench.cu", "scripts/tool/t.cpp"})
        write_file(root, source, "\n");
    for (const char* test : {"test/base/test_a.cpp", "test/parallel/test_p.cpp", "test/emu/sub/test_x.cpp",
                             "test/cpu/helper.h", "test/test_main.cpp"})
        write_file(root, test, "\n");
    const Report r = layout::check_folders_tested(root);
    CHECK_MSG(r.findings.size() == 2, "want 2 findings, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "cpu/", 0, "has no tests: no test/cpu/ holding a test_* file") == 1);
    CHECK(count_findings(r, "kernels/", 0, "has no tests: no test/kernels/ holding a test_* file") == 1);
    // A nested folder names each test folder that would do.
    write_file(root, "parallel/extra/e.h", "\n");
    std::remove((root + "/test/parallel/test_p.cpp").c_str());
    const Report nested = layout::check_folders_tested(root);
    CHECK(count_findings(nested, "parallel/extra/", 0, "no test/parallel/extra/ or test/parallel/ holding") == 1);
}

// ---- reading source text ----

TEST(code_only_blanks_comments_and_literals) {
    const std::string text =
        "int a = '{'; // {\n"
        "/* { */ const char* s = \"}\\\"{\";\n"
        "auto r = R\"x({)\")x\"; int n = 1'000;\n"
        "#define OPEN {\n"
        "int b;\n";
    const std::string code = layout::code_only(text, true);
    CHECK(code.size() == text.size());
    CHECK(code.find('{') == std::string::npos && code.find('}') == std::string::npos);
    CHECK(code.find("int b;") != std::string::npos && code.find("int n = 1") != std::string::npos);
    CHECK(layout::code_only("#define X \\\n  {\nint y;", true).find('{') == std::string::npos);
    CHECK(layout::code_only("#define X {", false).find('{') != std::string::npos);
}

TEST(include_lines_skip_commented_ones) {
    const std::vector<layout::IncludeLine> found = layout::include_lines(
        "#include \"base/a.h\"\n// #include \"base/b.h\"\n  #  include <vector>\n/*\n#include \"c.h\"\n*/\n");
    CHECK(found.size() == 2);
    CHECK(found[0].line == 1 && found[0].target == "base/a.h" && !found[0].angled);
    CHECK(found[1].line == 3 && found[1].target == "vector" && found[1].angled);
}

TEST(function_spans_on_the_shapes_this_codebase_uses) {
    const std::string text =
        "namespace n {\n"                                            // 1
        "struct S : Base<int(float)> {\n"                            // 2
        "    S(int a) : a_{a}, b_(a) {\n"                            // 3
        "        auto f = [&](int x) { return x; };\n"               // 4
        "    }\n"                                                    // 5
        "    bool operator==(const S& o) const noexcept { return true; }\n"  // 6
        "    int operator()(int x) const { return x; }\n"            // 7
        "    int a_{0}; int& operator[](int) { return a_; }\n"      // 8
        "};\n"                                                       // 9
        "auto S::size() const -> int {\n"                            // 10
        "    if (x) {\n"                                             // 11
        "    }\n"                                                    // 12
        "}\n"                                                        // 13
        "static const Entry table[] = {{1, 2}, {3, 4}};\n"           // 14
        "template <typename T> __device__ T twice(T x) {\n"          // 15
        "    return x;\n"                                            // 16
        "}\n"                                                        // 17
        "__global__ void __launch_bounds__(256) k(float* p) {\n"     // 18
        "}\n"                                                        // 19
        "enum class E { A, B };\n"                                   // 20
        "S::~S() {\n"                                                // 21
        "}\n"                                                        // 22
        "}  // namespace n\n"                                        // 23
        "extern \"C\" {\n"                                           // 24
        "void c_function(void) {\n"                                  // 25
        "}\n"                                                        // 26
        "}\n";                                                       // 27
    const layout::FunctionScan scan = layout::function_spans(text);
    CHECK_MSG(scan.error.empty(), "%s", scan.error.c_str());
    std::string seen;
    for (const layout::FunctionSpan& f : scan.functions)
        seen += tst::format("%s %d-%d%s; ", f.name.c_str(), f.open_line, f.close_line, f.device ? " device" : "");
    CHECK_MSG(seen == "S 3-5; operator== 6-6; operator() 7-7; operator[] 8-8; S::size 10-13; twice 15-17 device; "
                      "k 18-19 device; S::~S 21-22; c_function 25-26; ",
              "found: %s", seen.c_str());
}

TEST(finds_gpu_path_includes_of_the_cpu_reference) {
    const Report r = layout::check_gpu_path_apart_from_cpu(faulty_tree());
    CHECK_MSG(r.findings.size() == 1, "want 1 finding, got:%s", layout::describe(r.findings).c_str());
    CHECK(count_findings(r, "kernels/a.h", 1, "cpu/b.h: the GPU path takes nothing from the CPU reference") == 1);
}

// ---- this repository ----

TEST(repository_includes_go_no_higher) {
    const Report r = layout::check_include_levels(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu includes reach a higher level:%s", r.findings.size(),
              layout::describe(r.findings).c_str());
    printf("  floor plan (a): %s\n", r.figure.c_str());
}

TEST(repository_includes_form_no_cycle) {
    const Report r = layout::check_include_cycles(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu includes lie on a cycle of folders:%s", r.findings.size(),
              layout::describe(r.findings).c_str());
    printf("  floor plan (b): %s\n", r.figure.c_str());
}

TEST(repository_folders_are_placed) {
    const Report r = layout::check_folders_placed(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu files lie outside the floor plan:%s", r.findings.size(),
              layout::describe(r.findings).c_str());
    printf("  floor plan (c): %s\n", r.figure.c_str());
}

TEST(repository_host_code_has_no_cuda) {
    const Report r = layout::check_host_code_without_cuda(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu uses of CUDA in host code:%s", r.findings.size(),
              layout::describe(r.findings).c_str());
    printf("  floor plan (d): %s\n", r.figure.c_str());
}

TEST(repository_functions_are_short) {
    const Report r = layout::check_function_lengths(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu functions over %d lines:%s", r.findings.size(),
              layout::MAX_FUNCTION_LINES, layout::describe(r.findings).c_str());
    printf("  floor plan (e): %s\n", r.figure.c_str());
}

TEST(repository_folders_have_tests) {
    const Report r = layout::check_folders_tested(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu source folders without tests under test/:%s", r.findings.size(),
              layout::describe(r.findings).c_str());
    printf("  floor plan (f): %s\n", r.figure.c_str());
}

TEST(repository_gpu_path_takes_nothing_from_the_cpu_reference) {
    const Report r = layout::check_gpu_path_apart_from_cpu(repository_root());
    CHECK_MSG(r.findings.empty(), "%zu includes of cpu/ from the GPU path:%s", r.findings.size(),
              layout::describe(r.findings).c_str());
    printf("  floor plan (g): %s\n", r.figure.c_str());
}
