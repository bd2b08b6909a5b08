// The repository's floor plan and the checks that hold the source tree to it. Each folder has a
// level; code may include its own level and the levels below, never above, so that the basics stay
// free of the trainer, the host code free of CUDA, and any folder can be built and tested with only
// the folders under it. test/, dev/ and scripts/ stand outside the plan: tests and benchmarks may
// include anything. Each check takes the repository root, reads the sources itself (no git needed)
// and returns what it found, file and line, with a one-line figure of what it looked at.
#pragma once
#include <string>
#include <vector>

namespace layout {

struct Floor {
    const char* folder;  // relative to the root; "" is the root's own files
    int level;
    const char* holds;
};
const std::vector<Floor>& floor_plan();

// Functions allowed past the length limit, each with the reason.
struct LongFunctionExemption {
    const char* file;
    const char* function;
    const char* reason;
};
const std::vector<LongFunctionExemption>& long_function_exemptions();
constexpr int MAX_FUNCTION_LINES = 80;

struct Finding {
    std::string file;  // relative to the root
    int line;          // 0 when the finding is about the whole file or folder
    std::string what;
};
struct Report {
    std::vector<Finding> findings;  // empty when the tree passes
    std::string figure;             // what was looked at, e.g. "214 files, 390 cross-folder includes"
};
// The findings one per line, "file:line: what", sorted by file and line.
std::string describe(const std::vector<Finding>& findings);

// The repository root: the first folder holding test/layout/floor_plan.h, going up from the current
// directory and then from the program's own location. Empty when neither leads to one.
std::string find_repository_root();

// (a) A quoted #include from one folder to another reaches no higher level (and no test/ or dev/ file).
Report check_include_levels(const std::string& root);
// (b) The folders' includes of one another form no cycle.
Report check_include_cycles(const std::string& root);
// (c) Every folder holding sources, outside test/, dev/ and scripts/, is in the floor plan.
Report check_folders_placed(const std::string& root);
// (d) The host-side folders (base, train, parallel/plan) call no CUDA runtime function and include no
// CUDA header nor any kernels/ header.
Report check_host_code_without_cuda(const std::string& root);
// (e) No function in host or model code is longer than max_lines, brace to brace, except the
// exempted ones; kernels and device functions (__global__, __device__) may be. An exemption that
// no longer matches a long function is a finding too, so that the list stays true.
Report check_function_lengths(const std::string& root, int max_lines = MAX_FUNCTION_LINES,
                              const std::vector<LongFunctionExemption>& exemptions =
                                  long_function_exemptions());
// (f) test/ mirrors the source folders: every folder holding sources, outside test/, dev/ and scripts/
// and other than the root, has a test folder holding (directly) a file named test_*: test/ followed by
// the folder's own path, or by the path of a folder above it (parallel/comm/ and parallel/plan/ may
// share test/parallel/). The root's programs are tested by what they do, not by folder, so this asks
// nothing of them: test/convert/ (./convert), test/train/ (./generate and the CPU trainer end to end,
// beside the tests of train/), test/trainer/ (the trainers end to end: scripts that run train_gpt_emu
// and the others as a user would).
Report check_folders_tested(const std::string& root);
// (g) The GPU path takes nothing from the CPU reference: no file of gpu/, kernels/ or parallel/
// includes one of cpu/, which their floors alone would allow, so that the reference the tests trust
// stays apart from what it checks; what both need (RoPE's tables, say) belongs below both, in base/.
Report check_gpu_path_apart_from_cpu(const std::string& root);

}  // namespace layout
