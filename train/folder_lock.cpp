// The output folder's lock (see folder_lock.h).
#include "train/folder_lock.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/errors.h"
#include "base/file_io.h"
#include "train/run_folder.h"

std::string folder_lock_path(const std::string& dir) { return dir + "/run.lock"; }

// ---- who holds it

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot (0: unknown). The
// command name (field 2) may hold spaces and parentheses, so the count starts after its last ')'.
static unsigned long long process_start_ticks(long pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char text[1024];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char* at = strrchr(text, ')');
    if (!at) return 0;
    unsigned long long ticks = 0;
    // After ')': field 3 (state) ... field 22 (starttime): skip 19 fields.
    if (sscanf(at + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
               &ticks) != 1)
        return 0;
    return ticks;
}

static std::string host_name() {
    char name[256] = {0};
    if (gethostname(name, sizeof name - 1) != 0) return "unknown";
    return name;
}

LockHolder this_process_as_holder() {
    LockHolder h;
    h.pid = (long)getpid();
    h.host = host_name();
    h.since = utc_now();
    h.started = process_start_ticks(h.pid);
    h.valid = true;
    return h;
}

// "pid 4242\nhost node07\nsince 2026-12-02T07:50:11Z\nstarted 123456\n"
std::string lock_holder_text(const LockHolder& h) {
    return strprintf("pid %ld\nhost %s\nsince %s\nstarted %llu\n", h.pid, h.host.c_str(), h.since.c_str(),
                     h.started);
}

// Reads what lock_holder_text wrote; anything else (an empty or cut file, another program's) is
// not valid, and is treated as a holder nobody can name.
LockHolder parse_lock_holder(const std::string& text) {
    LockHolder h;
    bool pid = false, host = false, since = false;
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(at, end - at);
        at = end + 1;
        const size_t space = line.find(' ');
        if (space == std::string::npos) continue;
        const std::string key = line.substr(0, space), value = line.substr(space + 1);
        if (value.empty() || value.size() > 255 || value.find_first_of(" \t\r") != std::string::npos) continue;
        char* rest = nullptr;
        if (key == "pid") {
            errno = 0;
            const long n = strtol(value.c_str(), &rest, 10);
            pid = errno == 0 && *rest == '\0' && n > 0;
            if (pid) h.pid = n;
        } else if (key == "host") {
            h.host = value, host = true;
        } else if (key == "since") {
            h.since = value, since = true;
        } else if (key == "started") {
            errno = 0;
            const unsigned long long n = strtoull(value.c_str(), &rest, 10);
            if (errno == 0 && *rest == '\0' && value[0] != '-') h.started = n;
        }
    }
    h.valid = pid && host && since;
    return h;
}

bool lock_holder_is_gone(const LockHolder& h) {
    if (!h.valid) return true;  // no holder named: nothing to wait for
    if (h.host != host_name()) return false;
    if (kill((pid_t)h.pid, 0) != 0 && errno == ESRCH) return true;
    const unsigned long long started = process_start_ticks(h.pid);
    return h.started != 0 && started != 0 && started != h.started;  // the pid was reused
}

static std::string read_small_file(int fd) {
    std::string text;
    char buffer[1024];
    ssize_t n;
    if (lseek(fd, 0, SEEK_SET) != 0) return text;
    while (text.size() < 4096 && (n = read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, (size_t)n);
    return text;
}

static std::string read_small_file(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return "";
    struct stat info;
    const std::string text = fstat(fd, &info) == 0 && S_ISREG(info.st_mode) ? read_small_file(fd) : "";
    close(fd);
    return text;
}

[[noreturn]] static void fail_in_use(const std::string& dir, const LockHolder& h, bool unverifiable) {
    if (!h.valid)
        fail("-o (--output-dir): %s is in use by another process (its lock file %s names no holder)", dir.c_str(),
             folder_lock_path(dir).c_str());
    fail("-o (--output-dir): %s is in use by pid %ld on host %s since %s%s", dir.c_str(), h.pid, h.host.c_str(),
         h.since.c_str(),
         unverifiable ? strprintf(" (this filesystem cannot lock, and another host cannot be checked from here: once "
                                  "that run is gone, remove %s)", folder_lock_path(dir).c_str()).c_str()
                      : "");
}

static void write_holder(int fd, const std::string& path) {
    const std::string text = lock_holder_text(this_process_as_holder());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != (ssize_t)text.size())
        fail("%s: cannot write the output folder's lock file (%s)", path.c_str(), strerror(errno));
}

// ---- taking it

static std::string stale_lock_note(const std::string& path, const LockHolder& h) {
    return strprintf("note: %s was left by pid %ld on host %s (since %s), which ended without releasing it: taken "
                     "over", path.c_str(), h.pid, h.host.c_str(), h.since.c_str());
}

// The folder, made if missing. A dangling symbolic link would make mkdir fail with "File exists":
// say what it is instead.
static bool make_output_folder(const std::string& dir) {
    struct stat link_info, info;
    if (lstat(dir.c_str(), &link_info) == 0 && S_ISLNK(link_info.st_mode) && stat(dir.c_str(), &info) != 0) {
        char target[4096];
        const ssize_t n = readlink(dir.c_str(), target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        fail("-o (--output-dir): %s is a symbolic link to '%s', which does not exist", dir.c_str(), target);
    }
    const bool existed = stat(dir.c_str(), &info) == 0;
    if (existed && !S_ISDIR(info.st_mode)) fail("-o (--output-dir): %s exists and is not a folder", dir.c_str());
    with_flag("-o (--output-dir)", [&] { make_directory(dir); });
    return !existed;
}

// The lock file as the lock (filesystems without flock): created whole under a temporary name and
// linked to run.lock, which fails when it exists. A stale one is removed and the link tried again.
static void take_file_lock(const std::string& dir, const std::string& path, std::string* note) {
    const std::string temp = path + ".tmp." + std::to_string(getpid());
    for (int attempt = 0; attempt < 3; attempt++) {
        {
            AtomicFile staged(temp);  // the holder's lines, complete before they are linked into place
            const std::string text = lock_holder_text(this_process_as_holder());
            staged.write(text.data(), text.size());
            staged.commit();
        }
        const int linked = link(temp.c_str(), path.c_str());
        const int link_errno = errno;
        unlink(temp.c_str());
        if (linked == 0) return;
        if (link_errno != EEXIST)
            fail("%s: cannot create the output folder's lock file (%s)", path.c_str(), strerror(link_errno));
        const LockHolder holder = parse_lock_holder(read_small_file(path));
        if (!lock_holder_is_gone(holder)) fail_in_use(dir, holder, holder.host != host_name());
        if (holder.valid) *note = stale_lock_note(path, holder);
        unlink(path.c_str());
    }
    fail("%s: the output folder's lock file keeps changing: is another trainer starting there?", path.c_str());
}

void FolderLock::take(const std::string& dir, LockMethod method) {
    release();
    dir_ = dir;
    path_ = folder_lock_path(dir);
    created_dir_ = make_output_folder(dir);
    try {
        if (method == LockMethod::KERNEL && take_kernel_lock()) return;
        take_file_lock(dir, path_, &note_);
        file_only_ = true;
    } catch (...) {
        if (created_dir_) rmdir(dir_.c_str());
        created_dir_ = false;
        throw;
    }
}

// flock(2) on the lock file; false where the filesystem cannot lock.
bool FolderLock::take_kernel_lock() {
    for (int attempt = 0; attempt < 8; attempt++) {
        const int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
        if (fd < 0) fail("%s: cannot open the output folder's lock file (%s)", path_.c_str(), strerror(errno));
        struct stat held, now;
        if (fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
            close(fd);
            fail("%s: the output folder's lock file is not a regular file", path_.c_str());
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int lock_errno = errno;
            const std::string text = read_small_file(fd);
            close(fd);
            if (lock_errno == EWOULDBLOCK) fail_in_use(dir_, parse_lock_holder(text), false);
            if (lock_errno == ENOLCK || lock_errno == EOPNOTSUPP || lock_errno == ENOSYS || lock_errno == EINVAL)
                return false;
            fail("%s: cannot lock (%s)", path_.c_str(), strerror(lock_errno));
        }
        // Locked, but maybe a file its holder removed between our open and our lock: then the path
        // names another file (or none), and we try again with whatever is there now.
        if (stat(path_.c_str(), &now) == 0 && held.st_dev == now.st_dev && held.st_ino == now.st_ino) {
            const LockHolder left = parse_lock_holder(read_small_file(fd));
            if (left.valid) note_ = stale_lock_note(path_, left);  // its holder died holding it
            fd_ = fd;
            write_holder(fd_, path_);
            return true;
        }
        close(fd);
    }
    fail("%s: the output folder's lock file keeps changing: is another trainer starting there?", path_.c_str());
}

void FolderLock::release() {
    if (!held()) return;
    unlink(path_.c_str());  // first, while still locked: a process waiting on it sees it went
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    file_only_ = false;
    if (created_dir_) rmdir(dir_.c_str());  // only where nothing else was written into it
    created_dir_ = false;
}
