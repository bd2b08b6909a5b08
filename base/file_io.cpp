// File helpers (see file_io.h).
#include "base/file_io.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errors.h"
#include "base/formats.h"

// The temporary paths of the AtomicFiles being written, in fixed storage a signal handler can read:
// a slot's path is complete before its `used` flag is set, and the flag is cleared before the slot
// is reused. Files may be written from several threads (a checkpoint written in the background): a
// mutex orders the registrations; the signal handler takes no lock, it only reads the flags.
namespace {
std::mutex g_temporaries_mutex;
struct TemporarySlot {
    volatile sig_atomic_t used = 0;
    char path[4096];
};
TemporarySlot g_temporaries[16];

int register_temporary(const std::string& path) {
    if (path.size() >= sizeof g_temporaries[0].path) return -1;
    std::lock_guard<std::mutex> lock(g_temporaries_mutex);
    for (int i = 0; i < (int)(sizeof g_temporaries / sizeof g_temporaries[0]); i++) {
        if (g_temporaries[i].used) continue;
        memcpy(g_temporaries[i].path, path.c_str(), path.size() + 1);
        g_temporaries[i].used = 1;
        return i;
    }
    return -1;  // more open at once than slots: that file is left to the start-up clean-up
}

void unregister_temporary(int slot) {
    std::lock_guard<std::mutex> lock(g_temporaries_mutex);
    if (slot >= 0) g_temporaries[slot].used = 0;
}
}  // namespace

void remove_temporary_files_now() {
    for (TemporarySlot& slot : g_temporaries)
        if (slot.used) unlink(slot.path);
}

AtomicFile::AtomicFile(const std::string& path)
    : path_(path), temp_path_(path + ".tmp." + std::to_string(getpid())) {
    slot_ = register_temporary(temp_path_);
    file_ = fopen(temp_path_.c_str(), "wb");
    if (!file_) {
        unregister_temporary(slot_);
        fail("%s: cannot create (%s)", path_.c_str(), strerror(errno));
    }
}

AtomicFile::~AtomicFile() {
    if (file_) {
        fclose(file_);
        remove(temp_path_.c_str());
    }
    unregister_temporary(slot_);
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
        unregister_temporary(slot_);
        slot_ = -1;
        fail("%s: could not be written (%s)", path_.c_str(), strerror(saved_errno));
    }
    unregister_temporary(slot_);
    slot_ = -1;
}

// What a path is when it is not a regular file, for the messages ("a FIFO", "a directory").
static const char* kind_of_file(mode_t mode) {
    return S_ISFIFO(mode)   ? "a FIFO (named pipe)"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "a file of another kind";
}

// Opened without blocking (a FIFO's open would wait for a writer, a device's reads never end), then
// checked to be a regular file before anything is read from it.
FILE* open_regular_file(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail("%s: cannot open (%s)", path.c_str(), strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        const int saved_errno = errno;
        const bool known = fstat(fd, &info) == 0;
        close(fd);
        if (!known) fail("%s: cannot read its type (%s)", path.c_str(), strerror(saved_errno));
        if (S_ISDIR(info.st_mode)) fail("%s: is a directory, not a file", path.c_str());
        fail("%s: is %s, not a regular file", path.c_str(), kind_of_file(info.st_mode));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE* f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        fail("%s: cannot open (%s)", path.c_str(), strerror(errno));
    }
    return f;
}

void check_regular_file(const std::string& path) { fclose(open_regular_file(path)); }

static FILE* open_for_reading(const std::string& path) { return open_regular_file(path); }

uint64_t file_size(const std::string& path) {
    FILE* f = open_for_reading(path);
    fseeko(f, 0, SEEK_END);
    off_t size = ftello(f);
    fclose(f);
    if (size < 0) fail("%s: cannot determine its size", path.c_str());
    return (uint64_t)size;
}

void read_bytes(const std::string& path, uint64_t offset, void* out, size_t bytes) {
    FileReader(path).read(offset, out, bytes);
}

FileReader::FileReader(const std::string& path) : path_(path), file_(open_for_reading(path)) {
    const off_t end = fseeko(file_, 0, SEEK_END) == 0 ? ftello(file_) : -1;
    if (end < 0) {
        fclose(file_);
        fail("%s: cannot determine its size", path.c_str());
    }
    size_ = (uint64_t)end;
}

FileReader::~FileReader() {
    if (file_) fclose(file_);
}

void FileReader::read(uint64_t offset, void* out, size_t bytes) {
    if (fseeko(file_, (off_t)offset, SEEK_SET) != 0 || fread(out, 1, bytes, file_) != bytes)
        fail("%s: cannot read %zu bytes at offset %llu (file too short?)", path_.c_str(), bytes,
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
