// A slow disk for the checkpoint tests: loaded with LD_PRELOAD, this fsync sleeps FSYNC_DELAY_MS
// milliseconds (0 if unset) before the real one, as a disk that takes that long to make a file
// durable would. The trainer's other calls are untouched; it is built by the test that uses it
// (cc -shared -fPIC), so nothing of it is in the trainer.
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int fsync(int fd) {
    const char* setting = getenv("FSYNC_DELAY_MS");
    long ms = setting ? atol(setting) : 0;
    struct timespec delay = {ms / 1000, (ms % 1000) * 1000000L};
    if (ms > 0) nanosleep(&delay, NULL);
    return (int)syscall(SYS_fsync, fd);
}
