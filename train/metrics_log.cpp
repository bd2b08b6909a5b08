// The JSON-lines metrics log (see metrics_log.h).
#include "train/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "base/errors.h"
#include "base/file_io.h"

// JSON has no NaN or infinity: write null so that the line stays parseable.
static std::string number(double value, const char* format) {
    return std::isfinite(value) ? strprintf(format, value) : "null";
}

std::string metrics_json(const StepMetrics& m) {
    std::string line = strprintf("{\"step\":%d", m.step);
    if (m.has_train) {
        line += ",\"loss\":" + number(m.loss, "%.6f");
        line += ",\"lr\":" + number(m.lr, "%.6e");
        line += ",\"norm\":" + number(m.norm, "%.6f");
        line += ",\"ms\":" + number(m.ms, "%.3f");
        line += ",\"tok_per_s\":" + number(m.tokens_per_s, "%.1f");
        if (m.sent_bytes >= 0) line += ",\"sent_bytes\":" + number(m.sent_bytes, "%.0f");
    }
    if (m.has_val) line += ",\"val_loss\":" + number(m.val_loss, "%.6f");
    if (m.has_hellaswag) line += ",\"hellaswag\":" + number(m.hellaswag_accuracy, "%.4f");
    if (m.has_gpu && !m.gpu.available) line += ",\"gpu\":\"n/a\"";
    if (m.has_gpu && m.gpu.available) {
        const GpuTelemetry& g = m.gpu;
        line += strprintf(",\"gpu_sm_mhz\":%u,\"gpu_max_sm_mhz\":%u", g.sm_clock_mhz, g.max_sm_clock_mhz);
        if (g.power_w > 0) line += ",\"gpu_power_w\":" + number(g.power_w, "%.1f");
        if (g.power_limit_w > 0) line += ",\"gpu_power_limit_w\":" + number(g.power_limit_w, "%.1f");
        line += strprintf(",\"gpu_temp_c\":%u,\"gpu_throttle\":\"%s\"", g.temperature_c,
                          throttle_reasons_text(g.throttle_reasons).c_str());
    }
    if (!m.timers_json.empty()) line += "," + m.timers_json;
    return line + "}";
}

MetricsLog::MetricsLog(const std::string& path) : path_(path), file_(fopen(path.c_str(), "a")) {
    if (!file_) fail("%s: cannot open for appending (%s)", path.c_str(), strerror(errno));
}

MetricsLog::~MetricsLog() { fclose(file_); }

void MetricsLog::write(const StepMetrics& m) {
    std::string line = metrics_json(m) + "\n";
    if (fwrite(line.data(), 1, line.size(), file_) != line.size() || fflush(file_) != 0)
        fail("%s: write failed (%s)", path_.c_str(), strerror(errno));
}

void truncate_metrics_log(const std::string& path, long long last_kept_step) {
    if (!path_exists(path)) return;
    std::ifstream in(path);
    std::string line, kept;
    while (std::getline(in, line)) {
        size_t at = line.find("\"step\":");
        if (at != std::string::npos && atoll(line.c_str() + at + 7) > last_kept_step) continue;
        kept += line + "\n";
    }
    AtomicFile out(path);
    out.write(kept.data(), kept.size());
    out.commit();
}
