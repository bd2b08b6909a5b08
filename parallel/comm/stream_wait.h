// WAIT_FOR_EVENT(name, stream, event): cudaStreamWaitEvent(stream, event) for a wait that orders work
// across streams, under a name. A test builds a trainer whose gpu/passes.cu can leave out the wait
// named by the environment variable TEST_DROP_WAIT (compiled with -DTEST_BROKEN_VARIANTS) and checks that the
// emulator's queued streams (EMU_STREAMS, emu/README.md) turn each missing wait into a wrong result
// (test/parallel/test_stream_order.cpp). Otherwise it is the plain call.
#pragma once
#include "kernels/common.h"

#ifdef TEST_BROKEN_VARIANTS
#include <cstdlib>
#include <cstring>
inline bool wait_dropped(const char* name) {
    const char* dropped = getenv("TEST_DROP_WAIT");
    return dropped && strcmp(dropped, name) == 0;
}
#define WAIT_FOR_EVENT(name, stream, event)                                      \
    do {                                                                         \
        if (!wait_dropped(#name)) CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0)); \
    } while (0)
#else
#define WAIT_FOR_EVENT(name, stream, event) CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0))
#endif
