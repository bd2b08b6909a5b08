// The floor plan's table and its checks (see floor_plan.h).
// The folders described, and the order to read the code in: docs/ARCHITECTURE.md.
#include "test/layout/floor_plan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "test/layout/source_text.h"

namespace fs = std::filesystem;

namespace layout {

// Level 0 depends on nothing of ours; each level above may use those below it. Folders on one
// level may use one another as long as no cycle forms (check_include_cycles).
const std::vector<Floor>& floor_plan() {
    static const std::vector<Floor> floors = {
        {"base", 0, "basics: errors, file I/O, formats, rng, model config, run settings, the model interface"},
        {"kernels", 1, "the CUDA kernels"},
        {"cpu", 1, "the fp32 CPU reference model"},
        {"emu", 1, "the CUDA emulator, which runs the kernels on the CPU"},
        {"data", 1, "the tokenizer tool and data preparation"},
        {"parallel/plan", 2, "the planning of the ranks (host only)"},
        {"parallel/comm", 2, "the ranks' communication (MPI, NCCL)"},
        {"gpu", 3, "the GPU model"},
        {"train", 4, "the training loop, flags, run folders, checkpoints, Hugging Face files"},
        {"", 5, "the programs at the root: train_gpt.cu, train_gpt_cpu.cpp, generate.cpp, convert.cpp"},
    };
    return floors;
}

const std::vector<LongFunctionExemption>& long_function_exemptions() {
    static const std::vector<LongFunctionExemption> exemptions = {
        {"train/train_flags.cpp", "flag_table",
         "the table of every flag, one entry per flag: splitting it would scatter the flags"},
    };
    return exemptions;
}

std::string describe(const std::vector<Finding>& findings) {
    std::vector<Finding> sorted = findings;
    std::sort(sorted.begin(), sorted.end(), [](const Finding& a, const Finding& b) {
        return a.file != b.file ? a.file < b.file : a.line < b.line;
    });
    std::string text;
    for (const Finding& f : sorted)
        text += "\n    " + f.file + (f.line ? ":" + std::to_string(f.line) : "") + ": " + f.what;
    return text;
}

std::string find_repository_root() {
    auto search_up = [](fs::path dir) -> std::string {
        std::error_code ec;
        for (; !dir.empty(); dir = dir.parent_path()) {
            if (fs::exists(dir / "test/layout/floor_plan.h", ec)) return dir.string();
            if (dir == dir.parent_path()) break;
        }
        return "";
    };
    std::error_code ec;
    std::string root = search_up(fs::current_path(ec));
    if (root.empty()) root = search_up(fs::read_symlink("/proc/self/exe", ec).parent_path());
    return root;
}

// ---- the source tree ----

namespace {

struct SourceFile {
    std::string path;    // relative to the root, e.g. "train/hf_gpt2.cpp"
    std::string folder;  // its directory relative to the root; "" for the root's own files
    std::string text;
};

bool is_source(const fs::path& path) {
    const std::string ext = path.extension().string();
    return ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh";
}

// Folders that hold no sources of ours: build outputs, fetched or generated data, crash dumps, and
// hidden folders (.git, and others' checkouts kept beside ours).
bool skipped_folder(const std::string& relative, const std::string& name) {
    static const std::set<std::string> names = {"node_modules", "gpu_bundle", "fuzz-crashes"};
    return name.rfind("build", 0) == 0 || name[0] == '.' || names.count(name) || relative == "data/cache";
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<SourceFile> read_sources(const std::string& root) {
    std::vector<SourceFile> sources;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it); it.increment(ec)) {
        const fs::path relative = fs::relative(it->path(), root, ec);
        if (it->is_directory(ec)) {
            if (skipped_folder(relative.generic_string(), relative.filename().string()))
                it.disable_recursion_pending();
        } else if (it->is_regular_file(ec) && is_source(relative)) {
            sources.push_back({relative.generic_string(), relative.parent_path().generic_string(),
                               read_file(it->path())});
        }
    }
    std::sort(sources.begin(), sources.end(),
              [](const SourceFile& a, const SourceFile& b) { return a.path < b.path; });
    return sources;
}

bool outside_plan(const std::string& folder) {
    for (const char* top : {"test", "dev", "scripts"})
        if (folder == top || folder.rfind(std::string(top) + "/", 0) == 0) return true;
    return false;
}

const Floor* floor_of(const std::string& folder) {
    for (const Floor& floor : floor_plan())
        if (folder == floor.folder) return &floor;
    return nullptr;
}

std::string folder_name(const std::string& folder) { return folder.empty() ? "the root" : folder + "/"; }

// A quoted #include that names one of the repository's files, as the build finds it: from the
// root (-I.), else beside the including file.
struct ProjectInclude {
    const SourceFile* from;
    int line;
    std::string target;         // relative to the root
    std::string target_folder;  // "" for the root's own files
};

std::vector<ProjectInclude> project_includes(const std::string& root, const std::vector<SourceFile>& sources) {
    std::vector<ProjectInclude> found;
    std::error_code ec;
    for (const SourceFile& file : sources) {
        for (const IncludeLine& include : include_lines(file.text)) {
            if (include.angled) continue;
            for (const fs::path& candidate : {fs::path(include.target), fs::path(file.folder) / include.target}) {
                const fs::path relative = candidate.lexically_normal();
                if (!fs::is_regular_file(fs::path(root) / relative, ec)) continue;
                found.push_back({&file, include.line, relative.generic_string(),
                                 relative.parent_path().generic_string()});
                break;
            }
        }
    }
    return found;
}

// The includes from one folder to another, both outside test/, dev/ and scripts/, by folder pair.
using FolderGraph = std::map<std::string, std::map<std::string, std::vector<const ProjectInclude*>>>;
FolderGraph folder_graph(const std::vector<ProjectInclude>& includes) {
    FolderGraph graph;
    for (const ProjectInclude& include : includes) {
        const std::string& from = include.from->folder;
        if (outside_plan(from) || outside_plan(include.target_folder)) continue;
        graph[from];
        graph[include.target_folder];
        if (from != include.target_folder) graph[from][include.target_folder].push_back(&include);
    }
    return graph;
}

// The graph's strongly connected components (Tarjan): folders that reach one another.
std::vector<std::vector<std::string>> strongly_connected(const FolderGraph& graph) {
    std::map<std::string, int> index, low;
    std::vector<std::string> stack;
    std::set<std::string> on_stack;
    std::vector<std::vector<std::string>> components;
    std::function<void(const std::string&)> visit = [&](const std::string& v) {
        index[v] = low[v] = (int)index.size();
        stack.push_back(v);
        on_stack.insert(v);
        for (const auto& edge : graph.at(v)) {
            const std::string& w = edge.first;
            if (!index.count(w)) {
                visit(w);
                low[v] = std::min(low[v], low[w]);
            } else if (on_stack.count(w)) {
                low[v] = std::min(low[v], index[w]);
            }
        }
        if (low[v] != index[v]) return;
        std::vector<std::string> component;
        std::string w;
        do {
            w = stack.back();
            stack.pop_back();
            on_stack.erase(w);
            component.push_back(w);
        } while (w != v);
        components.push_back(component);
    };
    for (const auto& node : graph)
        if (!index.count(node.first)) visit(node.first);
    return components;
}

// A shortest cycle through `start` within `component`, as "a -> b -> a" (breadth first).
std::string cycle_through(const FolderGraph& graph, const std::string& start,
                          const std::set<std::string>& component) {
    std::map<std::string, std::string> came_from;
    std::vector<std::string> frontier = {start};
    while (!frontier.empty() && !came_from.count(start)) {
        std::vector<std::string> next;
        for (const std::string& v : frontier)
            for (const auto& edge : graph.at(v))
                if (component.count(edge.first) && !came_from.count(edge.first)) {
                    came_from[edge.first] = v;
                    next.push_back(edge.first);
                }
        frontier = next;
    }
    std::string cycle = folder_name(start);
    for (std::string v = came_from[start]; v != start; v = came_from[v]) cycle = folder_name(v) + " -> " + cycle;
    return folder_name(start) + " -> " + cycle;
}

// The positions of identifiers cuda[A-Z]... followed by '(' in the code: CUDA runtime calls.
std::vector<std::pair<int, std::string>> cuda_calls(const std::string& code) {
    std::vector<std::pair<int, std::string>> calls;
    int line = 1;
    for (size_t i = 0; i < code.size(); i++) {
        if (code[i] == '\n') line++;
        const bool word_starts = i == 0 || !(std::isalnum((unsigned char)code[i - 1]) || code[i - 1] == '_');
        if (!word_starts || code.compare(i, 4, "cuda") != 0 || i + 4 >= code.size() ||
            !std::isupper((unsigned char)code[i + 4]))
            continue;
        size_t end = i + 4;
        while (end < code.size() && (std::isalnum((unsigned char)code[end]) || code[end] == '_')) end++;
        size_t after = end;
        while (after < code.size() && (code[after] == ' ' || code[after] == '\t' || code[after] == '\n')) after++;
        if (after < code.size() && code[after] == '(') calls.push_back({line, code.substr(i, end - i)});
        i = end - 1;
    }
    return calls;
}

}  // namespace

// ---- the checks ----

Report check_include_levels(const std::string& root) {
    const std::vector<SourceFile> sources = read_sources(root);
    const std::vector<ProjectInclude> includes = project_includes(root, sources);
    Report report;
    int cross_folder = 0;
    for (const ProjectInclude& include : includes) {
        const Floor* from = floor_of(include.from->folder);
        if (!from || include.from->folder == include.target_folder) continue;
        cross_folder++;
        const Floor* to = floor_of(include.target_folder);
        if (outside_plan(include.target_folder))
            report.findings.push_back({include.from->path, include.line,
                                       "includes " + include.target + ", a test or benchmark file"});
        else if (to && to->level > from->level)
            report.findings.push_back(
                {include.from->path, include.line,
                 "includes " + include.target + " (" + folder_name(to->folder) + ", level " +
                     std::to_string(to->level) + ") from " + folder_name(from->folder) + ", level " +
                     std::to_string(from->level)});
    }
    report.figure = std::to_string(sources.size()) + " files, " + std::to_string(cross_folder) +
                    " cross-folder includes";
    return report;
}

Report check_include_cycles(const std::string& root) {
    const std::vector<SourceFile> sources = read_sources(root);
    const std::vector<ProjectInclude> includes = project_includes(root, sources);
    const FolderGraph graph = folder_graph(includes);
    Report report;
    int dependencies = 0;
    for (const auto& node : graph) dependencies += (int)node.second.size();
    for (const std::vector<std::string>& component : strongly_connected(graph)) {
        if (component.size() < 2) continue;
        const std::set<std::string> members(component.begin(), component.end());
        const std::string cycle = cycle_through(graph, *members.begin(), members);
        // Every include between two folders of the component lies on some cycle among them.
        for (const std::string& from : members)
            for (const auto& edge : graph.at(from))
                if (members.count(edge.first))
                    for (const ProjectInclude* include : edge.second)
                        report.findings.push_back({include->from->path, include->line,
                                                   "includes " + include->target + ": part of the cycle " + cycle});
    }
    report.figure = std::to_string(graph.size()) + " folders, " + std::to_string(dependencies) +
                    " folder-to-folder dependencies";
    return report;
}

Report check_folders_placed(const std::string& root) {
    Report report;
    std::set<std::string> placed;
    for (const SourceFile& file : read_sources(root)) {
        if (outside_plan(file.folder)) continue;
        if (floor_of(file.folder))
            placed.insert(file.folder);
        else
            report.findings.push_back({file.path, 0, folder_name(file.folder) +
                                                         " is not in the floor plan (give it a level in "
                                                         "test/layout/floor_plan.cpp)"});
    }
    report.figure = std::to_string(placed.size()) + " folders placed";
    return report;
}

Report check_host_code_without_cuda(const std::string& root) {
    static const std::set<std::string> host_folders = {"base", "train", "parallel/plan"};
    static const std::set<std::string> cuda_headers = {"cuda_runtime.h", "cuda_bf16.h", "nccl.h",
                                                       "cublasLt.h", "cuda.h", "cuda_fp16.h"};
    const std::vector<SourceFile> sources = read_sources(root);
    Report report;
    int host_files = 0;
    for (const SourceFile& file : sources) {
        if (!host_folders.count(file.folder)) continue;
        host_files++;
        for (const IncludeLine& include : include_lines(file.text))
            if (cuda_headers.count(include.target))
                report.findings.push_back({file.path, include.line, "includes the CUDA header " + include.target});
        for (const auto& call : cuda_calls(code_only(file.text, false)))
            report.findings.push_back({file.path, call.first, "calls the CUDA runtime: " + call.second});
    }
    for (const ProjectInclude& include : project_includes(root, sources))
        if (host_folders.count(include.from->folder) && include.target_folder == "kernels")
            report.findings.push_back({include.from->path, include.line, "includes the kernel header " + include.target});
    report.figure = std::to_string(host_files) + " host files";
    return report;
}

Report check_function_lengths(const std::string& root, int max_lines,
                              const std::vector<LongFunctionExemption>& exemptions) {
    Report report;
    std::set<std::pair<std::string, std::string>> exemptions_used;
    int files = 0, functions = 0, longest = 0;
    std::string longest_name;
    for (const SourceFile& file : read_sources(root)) {
        if (outside_plan(file.folder)) continue;
        files++;
        const FunctionScan scan = function_spans(file.text);
        if (!scan.error.empty()) {
            report.findings.push_back({file.path, 0, "cannot measure its functions: " + scan.error});
            continue;
        }
        for (const FunctionSpan& function : scan.functions) {
            if (function.device) continue;
            functions++;
            const bool exempt = std::any_of(exemptions.begin(), exemptions.end(), [&](const LongFunctionExemption& e) {
                return file.path == e.file && function.name == e.function;
            });
            if (exempt) {
                if (function.lines() > max_lines) exemptions_used.insert({file.path, function.name});
                continue;
            }
            if (function.lines() > longest) longest = function.lines(), longest_name = function.name;
            if (function.lines() > max_lines)
                report.findings.push_back({file.path, function.open_line,
                                           function.name + " is " + std::to_string(function.lines()) +
                                               " lines long (at most " + std::to_string(max_lines) + ")"});
        }
    }
    for (const LongFunctionExemption& e : exemptions)
        if (!exemptions_used.count({e.file, e.function}))
            report.findings.push_back({e.file, 0, std::string("the exemption for ") + e.function +
                                                      " matches no function over " +
                                                      std::to_string(max_lines) + " lines: take it off the list"});
    report.figure = std::to_string(files) + " files, " + std::to_string(functions) +
                    " host functions, the longest not exempted " + longest_name + " (" +
                    std::to_string(longest) + " lines)";
    return report;
}

namespace {

// Whether `folder` holds, directly, a file named test_*.
bool holds_a_test(const fs::path& folder) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(folder, ec); !ec && it != fs::end(it); it.increment(ec))
        if (it->is_regular_file(ec) && it->path().filename().string().rfind("test_", 0) == 0) return true;
    return false;
}

}  // namespace

Report check_folders_tested(const std::string& root) {
    std::set<std::string> folders;
    for (const SourceFile& file : read_sources(root))
        if (!file.folder.empty() && !outside_plan(file.folder)) folders.insert(file.folder);
    Report report;
    for (const std::string& folder : folders) {
        bool tested = false;
        std::string candidates;
        for (fs::path p = folder; !p.empty() && !tested; p = p.parent_path()) {
            tested = holds_a_test(fs::path(root) / "test" / p);
            candidates += (candidates.empty() ? "" : " or ") + ("test/" + p.generic_string() + "/");
        }
        if (!tested)
            report.findings.push_back({folder_name(folder), 0, "has no tests: no " + candidates +
                                                                   " holding a test_* file"});
    }
    report.figure = std::to_string(folders.size()) + " source folders, " +
                    std::to_string(folders.size() - report.findings.size()) + " with their tests";
    return report;
}

Report check_gpu_path_apart_from_cpu(const std::string& root) {
    const std::vector<SourceFile> sources = read_sources(root);
    Report report;
    int checked = 0;
    for (const ProjectInclude& include : project_includes(root, sources)) {
        const std::string& from = include.from->folder;
        const bool gpu_path = from == "gpu" || from == "kernels" || from.rfind("parallel", 0) == 0;
        if (!gpu_path) continue;
        checked++;
        if (include.target_folder == "cpu")
            report.findings.push_back({include.from->path, include.line,
                                       "includes " + include.target + ": the GPU path takes nothing from the CPU "
                                       "reference (put what both need in base/)"});
    }
    report.figure = std::to_string(checked) + " includes of gpu/, kernels/ and parallel/ checked";
    return report;
}

}  // namespace layout
