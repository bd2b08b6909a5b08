// NVML through dlopen (see gpu_telemetry.h): the handful of entry points used are declared here with
// the signatures and constants of NVIDIA's NVML API reference, so nvml.h is not needed to build.
#include "base/gpu_telemetry.h"

#include <dlfcn.h>

#include <cstdio>
#include <mutex>

int dense_bf16_flops_per_clock_per_sm(int cc_major, int cc_minor) {
    if (cc_major == 8 && cc_minor == 0) return 2048;  // A100, A30
    if (cc_major == 8 && (cc_minor == 6 || cc_minor == 7 || cc_minor == 9)) return 1024;  // GA10x, Orin, Ada
    if (cc_major == 9 && cc_minor == 0) return 4096;  // H100, H200, GH200
    return 0;
}

double peak_bf16_flops(int cc_major, int cc_minor, int sm_count, double clock_hz) {
    return (double)dense_bf16_flops_per_clock_per_sm(cc_major, cc_minor) * sm_count * clock_hz;
}

double mfu_percent(double flops, double seconds, double peak_flops) {
    if (peak_flops <= 0 || seconds <= 0) return -1.0;
    return 100.0 * flops / seconds / peak_flops;
}

namespace {

// NVML's C interface, as its API reference documents it.
typedef int nvml_return;  // nvmlReturn_t: 0 = NVML_SUCCESS
typedef struct nvml_device_st* nvml_device;
constexpr int kNvmlClockSm = 1;         // nvmlClockType_t NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU

struct Nvml {
    void* handle = nullptr;  // dlopen's
    std::string error;
    nvml_return (*init)() = nullptr;
    nvml_return (*by_bus_id)(const char*, nvml_device*) = nullptr;
    nvml_return (*by_index)(unsigned, nvml_device*) = nullptr;
    nvml_return (*clock)(nvml_device, int, unsigned*) = nullptr;
    nvml_return (*max_clock)(nvml_device, int, unsigned*) = nullptr;
    nvml_return (*power)(nvml_device, unsigned*) = nullptr;        // milliwatts
    nvml_return (*power_limit)(nvml_device, unsigned*) = nullptr;  // milliwatts
    nvml_return (*temperature)(nvml_device, int, unsigned*) = nullptr;
    nvml_return (*reasons)(nvml_device, unsigned long long*) = nullptr;
};

template <typename F>
bool find(void* library, const char* name, F* out) {
    *out = reinterpret_cast<F>(dlsym(library, name));
    return *out != nullptr;
}

// Opens and initialises NVML once per library name (the program's lifetime; never shut down).
const Nvml& nvml(const char* library_name) {
    static std::mutex lock;
    static std::string opened_name;
    static Nvml loaded;
    std::lock_guard<std::mutex> hold(lock);
    if (loaded.handle || !loaded.error.empty()) {
        if (opened_name == library_name) return loaded;
        if (loaded.handle) dlclose(loaded.handle);
        loaded = Nvml{};
    }
    opened_name = library_name;
    loaded.handle = dlopen(library_name, RTLD_NOW | RTLD_LOCAL);
    if (!loaded.handle) {
        const char* why = dlerror();
        loaded.error = std::string("cannot open ") + library_name + (why ? std::string(": ") + why : "");
        return loaded;
    }
    const bool all = find(loaded.handle, "nvmlInit_v2", &loaded.init) &&
                     find(loaded.handle, "nvmlDeviceGetHandleByPciBusId_v2", &loaded.by_bus_id) &&
                     find(loaded.handle, "nvmlDeviceGetHandleByIndex_v2", &loaded.by_index) &&
                     find(loaded.handle, "nvmlDeviceGetClockInfo", &loaded.clock) &&
                     find(loaded.handle, "nvmlDeviceGetMaxClockInfo", &loaded.max_clock) &&
                     find(loaded.handle, "nvmlDeviceGetPowerUsage", &loaded.power) &&
                     find(loaded.handle, "nvmlDeviceGetEnforcedPowerLimit", &loaded.power_limit) &&
                     find(loaded.handle, "nvmlDeviceGetTemperature", &loaded.temperature) &&
                     find(loaded.handle, "nvmlDeviceGetCurrentClocksThrottleReasons", &loaded.reasons);
    if (!all) {
        loaded.error = std::string(library_name) + " lacks an NVML entry point";
    } else if (const nvml_return status = loaded.init(); status != 0) {
        loaded.error = "nvmlInit failed with status " + std::to_string(status);
    } else {
        return loaded;
    }
    dlclose(loaded.handle);
    loaded.handle = nullptr;
    return loaded;
}

}  // namespace

GpuTelemetry read_gpu_telemetry(const char* pci_bus_id, const char* library) {
    GpuTelemetry t;
    const Nvml& api = nvml(library);
    if (!api.handle) {
        t.why_not = "NVML not available (" + api.error + ")";
        return t;
    }
    nvml_device device = nullptr;
    const nvml_return found = pci_bus_id && *pci_bus_id ? api.by_bus_id(pci_bus_id, &device) : api.by_index(0, &device);
    if (found != 0) {
        t.why_not = std::string("NVML has no device ") + (pci_bus_id && *pci_bus_id ? pci_bus_id : "0") +
                    " (status " + std::to_string(found) + ")";
        return t;
    }
    t.available = true;
    unsigned value = 0;
    if (api.clock(device, kNvmlClockSm, &value) == 0) t.sm_clock_mhz = value;
    if (api.max_clock(device, kNvmlClockSm, &value) == 0) t.max_sm_clock_mhz = value;
    if (api.power(device, &value) == 0) t.power_w = value / 1000.0;
    if (api.power_limit(device, &value) == 0) t.power_limit_w = value / 1000.0;
    if (api.temperature(device, kNvmlTemperatureGpu, &value) == 0) t.temperature_c = value;
    unsigned long long reasons = 0;
    if (api.reasons(device, &reasons) == 0) t.throttle_reasons = reasons;
    return t;
}

std::string throttle_reasons_text(unsigned long long reasons) {
    static const struct {
        unsigned long long bit;
        const char* name;
    } names[] = {{kThrottleGpuIdle, "idle"},
                 {kThrottleApplicationsClocks, "applications-clocks"},
                 {kThrottleSwPowerCap, "sw-power-cap"},
                 {kThrottleHwSlowdown, "hw-slowdown"},
                 {kThrottleSyncBoost, "sync-boost"},
                 {kThrottleSwThermal, "sw-thermal"},
                 {kThrottleHwThermal, "hw-thermal"},
                 {kThrottleHwPowerBrake, "hw-power-brake"},
                 {kThrottleDisplayClocks, "display-clocks"}};
    std::string text;
    unsigned long long known = 0;
    for (const auto& n : names) {
        known |= n.bit;
        if (reasons & n.bit) text += (text.empty() ? "" : "+") + std::string(n.name);
    }
    if (reasons & ~known) {
        char other[40];
        snprintf(other, sizeof other, "0x%llx", reasons & ~known);
        text += (text.empty() ? "" : "+") + std::string(other);
    }
    return text.empty() ? "none" : text;
}

std::string gpu_telemetry_text(const GpuTelemetry& t) {
    if (!t.available) return "telemetry not available: " + t.why_not;
    std::string text;
    char part[80];
    auto add = [&](const char* s) { text += (text.empty() ? "" : " | ") + std::string(s); };
    if (t.sm_clock_mhz) {
        if (t.max_sm_clock_mhz)
            snprintf(part, sizeof part, "SM %u/%u MHz", t.sm_clock_mhz, t.max_sm_clock_mhz);
        else
            snprintf(part, sizeof part, "SM %u MHz", t.sm_clock_mhz);
        add(part);
    }
    if (t.power_w > 0) {
        if (t.power_limit_w > 0)
            snprintf(part, sizeof part, "%.0f/%.0f W", t.power_w, t.power_limit_w);
        else
            snprintf(part, sizeof part, "%.0f W", t.power_w);
        add(part);
    }
    if (t.temperature_c) {
        snprintf(part, sizeof part, "%u C", t.temperature_c);
        add(part);
    }
    add(("throttle: " + throttle_reasons_text(t.throttle_reasons)).c_str());
    return text;
}
