// What the GPU is doing while it trains, and what it could do at best:
//   - GpuTelemetry: SM clock (now and maximum), power draw and limit, temperature, and the reasons the
//     clocks are held down (power cap, thermal, ...), read through NVML, with a one-line text form;
//   - the dense bf16 tensor-core peak of any NVIDIA GPU from its compute capability, SM count and
//     clock, the denominator of MFU (model FLOPs utilisation).
// Both for a CUDA device number, through the CUDA runtime: gpu/device_info.h.
// NVML (libnvidia-ml.so.1, part of the driver) is opened at run time with dlopen: programs build
// without nvml.h and without linking it, and where the driver or the library is missing (a build
// machine, the emulated device) the telemetry says "not available" instead of failing.
#pragma once
#include <cstdint>
#include <string>

// ---- the peak: FLOPs per clock per SM of dense bf16 tensor-core math with fp32 accumulation
// (one fused multiply-add = 2 FLOPs), by compute capability. Checked against NVIDIA's published dense
// (non-sparse) figures: A100 SXM (sm_80) 108 SMs x 1.41 GHz x 2048 = 312 TFLOP/s; RTX A6000 (sm_86)
// 84 x 1.80 GHz x 1024 = 155 TFLOP/s; L40S (sm_89) 142 x 2.52 GHz x 1024 = 366 TFLOP/s (datasheet
// 362 TFLOP/s, i.e. at ~2.49 GHz); H100 SXM (sm_90) 132 x 1.83 GHz x 4096 = 989 TFLOP/s.
// Products that run fp32 accumulation at half rate (GeForce cards, the L40) reach half of this.
// 0 where not known (no bf16 tensor cores before sm_80; architectures not checked here).
int dense_bf16_flops_per_clock_per_sm(int cc_major, int cc_minor);

// Peak dense bf16 FLOP/s of a GPU: sm_count x clock x the per-SM rate; 0 when the rate is unknown.
double peak_bf16_flops(int cc_major, int cc_minor, int sm_count, double clock_hz);

// MFU in percent: flops done in `seconds` over the peak; negative (print "n/a") when the peak is 0
// or the time is not positive.
double mfu_percent(double flops, double seconds, double peak_flops);

// ---- telemetry
struct GpuTelemetry {
    bool available = false;
    std::string why_not;                     // when !available: e.g. "NVML not available (...)"
    unsigned sm_clock_mhz = 0, max_sm_clock_mhz = 0;
    double power_w = 0, power_limit_w = 0;   // 0: not reported by this device
    unsigned temperature_c = 0;
    unsigned long long throttle_reasons = 0; // NVML's clocks-event reason bits (below)
};

// NVML's documented clock-event ("throttle") reason bits (nvmlClocksEventReason*, formerly
// nvmlClocksThrottleReason*).
constexpr unsigned long long kThrottleGpuIdle = 0x1ull, kThrottleApplicationsClocks = 0x2ull,
                             kThrottleSwPowerCap = 0x4ull, kThrottleHwSlowdown = 0x8ull,
                             kThrottleSyncBoost = 0x10ull, kThrottleSwThermal = 0x20ull,
                             kThrottleHwThermal = 0x40ull, kThrottleHwPowerBrake = 0x80ull,
                             kThrottleDisplayClocks = 0x100ull;

// Reads the GPU with this PCI bus id (as cudaDeviceGetPCIBusId writes it, e.g. "0000:19:00.0"; null
// or "": NVML's device 0). library: the NVML shared library to open (tests name a missing one).
GpuTelemetry read_gpu_telemetry(const char* pci_bus_id, const char* library = "libnvidia-ml.so.1");

// "SM 1755/1980 MHz | 612/700 W | 61 C | throttle: sw-power-cap" (fields the device does not report
// are left out); "telemetry not available: <why>" when !available.
std::string gpu_telemetry_text(const GpuTelemetry& t);

// The throttle reasons as words joined by '+' ("none" when no bit is set).
std::string throttle_reasons_text(unsigned long long reasons);
