// LAUNCH(kernel, grid, block, shared_bytes, stream, args...): the one way this project launches a
// kernel. Under nvcc it is kernel<<<grid, block, shared_bytes, stream>>>(args...); under g++ (the
// emulator, emu/) it runs the kernel on the CPU and names it in any error report. Wrap a template
// kernel's name in parentheses: LAUNCH((scale<float, 4>), ...).
#pragma once

#ifdef __CUDACC__
#define LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
    kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)
#else
#define LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
    ::emu::launch(#kernel, kernel, (grid), (block), (shared_bytes), (stream), ##__VA_ARGS__)
#endif
