// One run per output folder. Rank 0 of a run holds an exclusive lock on its output folder (-o DIR)
// from before anything is written there until the process ends, so that a second trainer started
// on the same folder (a supervisor's restart while the previous job's ranks linger, two jobs given
// the same -o) stops at once instead of mixing two runs' files:
//   error: -o (--output-dir): out/run is in use by pid 4242 on host node07 since 2026-12-02T07:50:11Z
//
// How: DIR/run.lock is opened and locked with flock(2). The kernel releases the lock when the
// process ends, however it ends (SIGKILL, a crash, a node's reboot), so a restart after a crash is
// never blocked: the lock file a dead run left behind is only its last words, overwritten by the
// next holder. While held, the file says who holds it (pid, host, start time) for the message
// above. The holder removes it when it ends; a process that opened the file just before it was
// removed finds that the file it locked is no longer the one at the path, and tries again.
//
// Where the filesystem cannot lock (flock fails with ENOLCK or EOPNOTSUPP: some network
// filesystems), the file itself is the lock: created atomically (link(2) of a complete temporary
// file, atomic on NFS too) and held while it exists. A lock file found there is stale when its
// holder is on this host and no longer alive (no such pid, or a pid now running another process:
// its start time differs); a holder on another host cannot be checked from here, so the message
// names it and says to remove DIR/run.lock once that run is known to be gone.
//
// Generation and conversion only read a run folder: they take no lock.
#pragma once
#include <string>

enum class LockMethod {
    KERNEL,     // flock(2), falling back to the lock file where the filesystem refuses it
    FILE_ONLY,  // the lock file alone (what a filesystem without locks gets; for tests)
};

class FolderLock {
public:
    FolderLock() = default;
    // Takes the lock of `dir`, creating the folder if it is missing (and removing it again when the
    // lock is released while the folder is still empty: a run that stopped at a bad flag leaves
    // nothing behind). Throws InputError naming the holder when another process has it, or why the
    // folder cannot be made (a dangling symbolic link, a file of that name).
    void take(const std::string& dir, LockMethod method = LockMethod::KERNEL);
    ~FolderLock() { release(); }
    FolderLock(const FolderLock&) = delete;
    FolderLock& operator=(const FolderLock&) = delete;

    void release();
    bool held() const { return fd_ >= 0 || file_only_; }
    // One line for the start-up report where the lock was taken over from a dead holder, else "".
    const std::string& note() const { return note_; }

private:
    bool take_kernel_lock();
    std::string dir_, path_, note_;
    int fd_ = -1;             // the locked file (KERNEL)
    bool file_only_ = false;  // the lock file itself is the lock
    bool created_dir_ = false;
};

// The lock file of a folder, and what it says of its holder (for tests and the fuzzer).
std::string folder_lock_path(const std::string& dir);
struct LockHolder {
    long pid = 0;
    std::string host, since;        // since: UTC, ISO 8601
    unsigned long long started = 0;  // the process's start time in clock ticks since boot (/proc)
    bool valid = false;
};
LockHolder parse_lock_holder(const std::string& text);
std::string lock_holder_text(const LockHolder& holder);
// This process as a holder.
LockHolder this_process_as_holder();
// Whether a holder is known to be gone: on this host, and its pid not running, or running a
// process that started at another time. A holder on another host is never known to be gone.
bool lock_holder_is_gone(const LockHolder& holder);
