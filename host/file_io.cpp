// File helpers (see file_io.h).
#include "host/file_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include "host/errors.h"
#include "host/formats.h"

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), temp_path_(path + ".tmp." + std::to_string(getpid())) {
    file_ = fopen(temp_path_.c_str(), "wb");
    if (!file_) fail("%s: cannot create (%s)", path_.c_str(), strerror(errno));
}

AtomicFile::~AtomicFile() {
    if (file_) {
        fclose(file_);
        remove(temp_path_.c_str());
    }
}

void AtomicFile::write(const void* data, size_t bytes) {
    if (bytes && fwrite(data, 1, bytes, file_) != bytes)
        fail("%s: write failed (%s)", path_.c_str(), strerror(errno));
}

void AtomicFile::commit() {
    bool ok = fflush(file_) == 0 && fsync(fileno(file_)) == 0;
    int saved_errno = errno;
    ok = (fclose(file_) == 0) && ok;
    file_ = nullptr;
    if (!ok || rename(temp_path_.c_str(), path_.c_str()) != 0) {
        if (ok) saved_errno = errno;
        remove(temp_path_.c_str());
        fail("%s: could not be written (%s)", path_.c_str(), strerror(saved_errno));
    }
}

uint64_t file_size(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) fail("%s: cannot open (%s)", path.c_str(), strerror(errno));
    fseeko(f, 0, SEEK_END);
    off_t size = ftello(f);
    fclose(f);
    if (size < 0) fail("%s: cannot determine its size", path.c_str());
    return (uint64_t)size;
}

void read_bytes(const std::string& path, uint64_t offset, void* out, size_t bytes) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) fail("%s: cannot open (%s)", path.c_str(), strerror(errno));
    bool ok = fseeko(f, (off_t)offset, SEEK_SET) == 0 && fread(out, 1, bytes, f) == bytes;
    fclose(f);
    if (!ok)
        fail("%s: cannot read %zu bytes at offset %llu (file too short?)", path.c_str(), bytes,
             (unsigned long long)offset);
}

std::vector<int32_t> read_header(const std::string& path) {
    if (file_size(path) < (uint64_t)FILE_HEADER_BYTES)
        fail("%s: shorter than the %d-byte header", path.c_str(), FILE_HEADER_BYTES);
    std::vector<int32_t> header(FILE_HEADER_INTS);
    read_bytes(path, 0, header.data(), FILE_HEADER_BYTES);
    return header;
}

bool path_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

void make_directory(const std::string& path) {
    std::error_code error;
    std::filesystem::create_directories(path, error);
    if (error || !std::filesystem::is_directory(path))
        fail("%s: cannot create directory (%s)", path.c_str(),
             error ? error.message().c_str() : "a file of that name exists");
}
