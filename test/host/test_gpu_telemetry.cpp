// host/gpu_telemetry: the bf16 peak against NVIDIA's published dense figures for a few devices, MFU,
// the text forms, and NVML missing (a library that does not exist) reported as "not available".
#include <cmath>
#include <string>

#include "host/gpu_telemetry.h"
#include "test/test.h"

// Published dense bf16 tensor peaks (TFLOP/s) at the clock the vendor quotes them for.
TEST(peak_matches_published_figures) {
    struct Device {
        const char* name;
        int major, minor, sms;
        double clock_ghz, published_tflops, tolerance;
    } devices[] = {
        {"A100 SXM", 8, 0, 108, 1.41, 312.0, 0.005},
        {"RTX A6000", 8, 6, 84, 1.80, 154.8, 0.005},
        {"L40S", 8, 9, 142, 2.52, 362.05, 0.015},  // datasheet at ~2.49 GHz: within 1.5%
        {"H100 SXM", 9, 0, 132, 1.83, 989.4, 0.005},
    };
    for (const Device& d : devices) {
        const double tflops = peak_bf16_flops(d.major, d.minor, d.sms, d.clock_ghz * 1e9) / 1e12;
        CHECK_MSG(std::fabs(tflops - d.published_tflops) <= d.tolerance * d.published_tflops,
                  "%s: %.1f TFLOP/s, published %.1f", d.name, tflops, d.published_tflops);
    }
    CHECK(dense_bf16_flops_per_clock_per_sm(8, 0) == 2048 && dense_bf16_flops_per_clock_per_sm(9, 0) == 4096);
    CHECK(dense_bf16_flops_per_clock_per_sm(7, 5) == 0);  // Turing: no bf16 tensor cores
    CHECK(peak_bf16_flops(7, 0, 80, 1.5e9) == 0.0);
}

TEST(mfu_percent_and_unknown_peak) {
    const double peak = peak_bf16_flops(9, 0, 132, 1.83e9);
    CHECK(std::fabs(mfu_percent(0.5 * peak * 2.0, 2.0, peak) - 50.0) < 1e-9);
    CHECK(mfu_percent(1e12, 1.0, 0.0) < 0);  // unknown peak: n/a
    CHECK(mfu_percent(1e12, 0.0, peak) < 0);
}

TEST(telemetry_text_forms) {
    GpuTelemetry t;
    t.available = true;
    t.sm_clock_mhz = 1755;
    t.max_sm_clock_mhz = 1980;
    t.power_w = 612.4;
    t.power_limit_w = 700;
    t.temperature_c = 61;
    t.throttle_reasons = kThrottleSwPowerCap;
    CHECK_MSG(gpu_telemetry_text(t) == "SM 1755/1980 MHz | 612/700 W | 61 C | throttle: sw-power-cap", "%s",
              gpu_telemetry_text(t).c_str());
    t.throttle_reasons = 0;
    t.power_w = 0;
    CHECK_MSG(gpu_telemetry_text(t) == "SM 1755/1980 MHz | 61 C | throttle: none", "%s", gpu_telemetry_text(t).c_str());
    CHECK(throttle_reasons_text(kThrottleHwThermal | kThrottleSwThermal) == "sw-thermal+hw-thermal");
    CHECK(throttle_reasons_text(0x8000ull | kThrottleGpuIdle) == "idle+0x8000");
}

TEST(telemetry_without_nvml_is_not_available) {
    const GpuTelemetry t = read_gpu_telemetry(nullptr, "libnvidia-ml-does-not-exist.so.1");
    CHECK(!t.available);
    const std::string text = gpu_telemetry_text(t);
    CHECK_MSG(text.find("telemetry not available: NVML not available") == 0, "%s", text.c_str());
    // The real library, where this machine has one: either readings or a reason, never a crash.
    const GpuTelemetry real = read_gpu_telemetry(nullptr);
    CHECK(real.available || !real.why_not.empty());
}
