// The program's repository (see repository.h).
#include "base/repository.h"

#include <climits>
#include <fstream>
#include <glob.h>
#include <sstream>
#include <unistd.h>

#include "base/file_io.h"

std::string executable_folder() {
    char buffer[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
    if (n <= 0) return "";
    std::string path(buffer, (size_t)n);
    return path.substr(0, path.rfind('/'));
}

std::string repository_root() {
    std::string folder = executable_folder();
    for (int level = 0; level <= 3 && !folder.empty(); level++) {
        if (path_exists(folder + "/Makefile") && path_exists(folder + "/base")) return folder;
        const size_t slash = folder.rfind('/');
        folder = slash == std::string::npos || slash == 0 ? "" : folder.substr(0, slash);
    }
    return "";
}

bool matches_something(const std::string& pattern) {
    glob_t matches;
    const bool found = glob(pattern.c_str(), 0, nullptr, &matches) == 0 && matches.gl_pathc > 0;
    globfree(&matches);
    return found;
}

std::string locate_default_path(const std::string& relative) {
    if (relative.empty() || relative[0] == '/' || matches_something(relative)) return relative;
    const std::string root = repository_root();
    if (root.empty()) return relative;
    const std::string inside = root + "/" + relative;
    return matches_something(inside) ? inside : relative;
}

// The first line of a file, without its newline ("" if it cannot be read).
static std::string first_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// HEAD is either a commit id (detached) or "ref: refs/heads/NAME", whose id is in its own file or,
// after `git gc`, in packed-refs.
std::string repository_commit() {
    const std::string root = repository_root();
    if (root.empty()) return "unknown";
    const std::string git = root + "/.git";
    const std::string head = first_line(git + "/HEAD");
    if (head.rfind("ref: ", 0) != 0) return head.empty() ? "unknown" : head;
    const std::string ref = head.substr(5);
    const std::string loose = first_line(git + "/" + ref);
    if (!loose.empty()) return loose;
    std::ifstream packed(git + "/packed-refs");
    std::string line;
    while (std::getline(packed, line)) {
        std::istringstream fields(line);
        std::string id, name;
        if (fields >> id >> name && name == ref) return id;
    }
    return "unknown";
}
