// Whole-file reading (see read_file.h).
#include "data/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

#include "base/errors.h"

std::string read_file(const std::string& path) {
    struct stat info;
    if (stat(path.c_str(), &info) != 0) fail("%s: cannot open (%s)", path.c_str(), strerror(errno));
    if (S_ISDIR(info.st_mode)) fail("%s: is a directory, expected a file", path.c_str());
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) fail("%s: cannot open (%s)", path.c_str(), strerror(errno));
    std::string bytes;
    char buffer[1 << 16];
    size_t got;
    while ((got = fread(buffer, 1, sizeof buffer, f)) > 0) bytes.append(buffer, got);
    bool failed = ferror(f);
    fclose(f);
    if (failed) fail("%s: read failed", path.c_str());
    return bytes;
}
