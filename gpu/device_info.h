// The telemetry and the bf16 peak of base/gpu_telemetry.h for a CUDA device number, through the CUDA
// runtime (its PCI bus id for NVML; its compute capability, SM count and clock for the peak). Under
// the emulator (EMU_CUDA) there is no GPU to read: telemetry "not available (emulated device)" and a
// peak of 0.
#pragma once
#include <string>

#include "base/gpu_telemetry.h"
#include "kernels/common.h"

// The telemetry of CUDA device `device` (NVML finds it by its PCI bus id).
inline GpuTelemetry read_cuda_device_telemetry(int device) {
#ifdef EMU_CUDA
    (void)device;
    GpuTelemetry t;
    t.why_not = "emulated device";
    return t;
#else
    char bus_id[32] = {0};
    if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
        cudaGetLastError();
        GpuTelemetry t;
        t.why_not = "no PCI bus id for CUDA device " + std::to_string(device);
        return t;
    }
    return read_gpu_telemetry(bus_id);
#endif
}

// Peak dense bf16 FLOP/s of CUDA device `device` at its peak clock (cudaDevAttrClockRate); 0 when
// unknown (and under the emulator).
inline double cuda_device_peak_bf16_flops(int device) {
#ifdef EMU_CUDA
    (void)device;
    return 0.0;
#else
    int major = 0, minor = 0, sms = 0, clock_khz = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    return peak_bf16_flops(major, minor, sms, clock_khz * 1e3);
#endif
}
