// WAIT_FOR_EVENT(name, stream, event): cudaStreamWaitEvent(stream, event) for a wait that orders work
// across streams, under a name. A test builds a trainer missing exactly one such wait
// (-DTEST_DROP_WAIT=<name>) and checks that the emulator's queued streams (EMU_STREAMS, emu/README.md)
// turn the missing wait into a wrong result (test/parallel/test_stream_order.sh). Without
// TEST_DROP_WAIT it is the plain call.
#pragma once
#include "kernels/common.h"

#ifdef TEST_DROP_WAIT
#include <cstring>
#define WAIT_NAME_TEXT(name) #name
#define WAIT_NAME(name) WAIT_NAME_TEXT(name)
#define WAIT_FOR_EVENT(name, stream, event)                                                                  \
    do {                                                                                                     \
        if (strcmp(#name, WAIT_NAME(TEST_DROP_WAIT)) != 0) CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0)); \
    } while (0)
#else
#define WAIT_FOR_EVENT(name, stream, event) CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0))
#endif
