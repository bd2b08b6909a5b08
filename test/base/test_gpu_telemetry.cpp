// base/gpu_telemetry: the bf16 peak against NVIDIA's published dense figures for a few devices, MFU,
// the text forms, and NVML missing (a library that does not exist) reported as "not available".
#include <cmath>
#include <string>

#include "base/gpu_telemetry.h"
#include "test/test.h"
#include "train/metrics_log.h"

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

// -lg's metrics.jsonl fields: the readings after the other keys (power only where reported), or n/a.
TEST(metrics_line_carries_the_telemetry) {
    StepMetrics m;
    m.step = 20, m.has_train = true, m.loss = 3.5, m.lr = 1e-4, m.norm = 0.5, m.ms = 100, m.tokens_per_s = 1000;
    m.has_gpu = true;
    m.gpu.available = true;
    m.gpu.sm_clock_mhz = 1755, m.gpu.max_sm_clock_mhz = 1980, m.gpu.temperature_c = 61;
    m.gpu.power_w = 612.44, m.gpu.power_limit_w = 700;
    m.gpu.throttle_reasons = kThrottleSwPowerCap | kThrottleHwThermal;
    const std::string line = metrics_json(m);
    CHECK_MSG(line.find(",\"tok_per_s\":1000.0,\"gpu_sm_mhz\":1755,\"gpu_max_sm_mhz\":1980,\"gpu_power_w\":612.4,"
                        "\"gpu_power_limit_w\":700.0,\"gpu_temp_c\":61,\"gpu_throttle\":\"sw-power-cap+hw-thermal\"}") !=
                  std::string::npos,
              "%s", line.c_str());
    m.gpu.power_w = m.gpu.power_limit_w = 0;  // not reported: left out
    CHECK(metrics_json(m).find("gpu_power") == std::string::npos);
    m.gpu = GpuTelemetry();
    CHECK_MSG(metrics_json(m).find(",\"gpu\":\"n/a\"}") != std::string::npos, "%s", metrics_json(m).c_str());
    m.has_gpu = false;
    CHECK(metrics_json(m).find("gpu") == std::string::npos);
}
