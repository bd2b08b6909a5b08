// State shared by the emulated CUDA runtime (cuda_runtime_host.cpp) and the kernel launcher
// (grid_launch.cpp): the calling host thread's last error and the kernels' attributes.
#pragma once
#include <string>

namespace emu {

// Records err as the last error of this host thread (kept until cudaGetLastError), with the
// report that explains a failed launch.
void record_error(cudaError_t err, const std::string& report = "");
// Most dynamic shared memory a launch of `kernel` may use (48 KiB unless raised through
// cudaFuncSetAttribute).
size_t max_dynamic_shared_bytes(const void* kernel);
// Sets launch_count() back to 0 (reset_counters() calls it).
void reset_launch_count();
constexpr size_t kDefaultSharedBytes = 48 << 10;
constexpr size_t kMaxSharedBytesOptIn = 227 << 10;  // an H100's opt-in limit per block

}  // namespace emu
