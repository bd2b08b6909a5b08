// Fuzz target: an output folder's lock file (train/folder_lock.h), as a starting trainer reads what
// a holder left there: parsed, judged alive or gone, and taken over or refused, with flock and
// without (the lock file alone).
#include <sys/stat.h>

#include "test/fuzz/fuzz_target.h"
#include "train/folder_lock.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string dir = scratch_file("run");
    mkdir(dir.c_str(), 0700);
    for (LockMethod method : {LockMethod::KERNEL, LockMethod::FILE_ONLY}) {
        write_scratch("run/run.lock", data, size);
        expect_clean([&] {
            FolderLock lock;
            lock.take(dir, method);
        });
    }
    expect_clean([&] { lock_holder_is_gone(parse_lock_holder(std::string((const char*)data, size))); });
    return 0;
}
