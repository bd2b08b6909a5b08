// A step's phase times across ranks (step_phases.h).
#include "base/step_phases.h"

#include "base/errors.h"

const char* phase_name(StepPhase phase) {
    switch (phase) {
        case StepPhase::DATA: return "data";
        case StepPhase::FORWARD: return "forward";
        case StepPhase::LOSS: return "loss";
        case StepPhase::BACKWARD: return "backward";
        case StepPhase::COMM_WAIT: return "comm wait";
        case StepPhase::OPTIMIZER: return "optimizer";
        case StepPhase::CHECKPOINT: return "checkpoint";
        case StepPhase::BUBBLE: return "bubble";
        case StepPhase::TENSOR_WAIT: return "tensor wait";
        case StepPhase::COUNT: break;
    }
    return "?";
}

bool is_compute_phase(StepPhase phase) {
    return phase == StepPhase::FORWARD || phase == StepPhase::LOSS || phase == StepPhase::BACKWARD ||
           phase == StepPhase::OPTIMIZER;
}

double PhaseTimes::total() const {
    double sum = 0;
    for (double t : ms) sum += t;
    return sum;
}

double PhaseTimes::compute() const {
    double sum = 0;
    for (int p = 0; p < kStepPhases; p++)
        if (is_compute_phase((StepPhase)p)) sum += ms[p];
    return sum;
}

std::vector<PhaseSpread> phase_spreads(const std::vector<PhaseTimes>& by_rank) {
    std::vector<PhaseSpread> spreads(kStepPhases);
    if (by_rank.empty()) return spreads;
    for (int p = 0; p < kStepPhases; p++) {
        PhaseSpread& s = spreads[p];
        s.min_ms = s.max_ms = by_rank[0].ms[p];
        for (int r = 1; r < (int)by_rank.size(); r++) {
            const double t = by_rank[r].ms[p];
            if (t < s.min_ms) s.min_ms = t, s.min_rank = r;
            if (t > s.max_ms) s.max_ms = t, s.max_rank = r;
        }
    }
    return spreads;
}

std::string slowest_phase_summary(const std::vector<PhaseSpread>& spreads) {
    int widest = -1;
    for (int p = 0; p < (int)spreads.size(); p++)
        if (spreads[p].measured() &&
            (widest < 0 || spreads[p].max_ms - spreads[p].min_ms > spreads[widest].max_ms - spreads[widest].min_ms))
            widest = p;
    if (widest < 0) return "";
    const PhaseSpread& s = spreads[widest];
    return strprintf("slowest: %s=%.1f-%.1f ms (rank %d)", phase_name((StepPhase)widest), s.min_ms, s.max_ms,
                     s.max_rank);
}

std::string phase_table(const std::vector<PhaseSpread>& spreads, int step) {
    std::string table = strprintf("phases of step %d     min ms (rank)      max ms (rank)\n", step);
    for (int p = 0; p < (int)spreads.size(); p++) {
        const PhaseSpread& s = spreads[p];
        if (!s.measured()) continue;
        table += strprintf("  %-18s %9.2f (%4d) %12.2f (%4d)\n", phase_name((StepPhase)p), s.min_ms, s.min_rank,
                           s.max_ms, s.max_rank);
    }
    return table;
}

std::string phase_metrics_json(const std::vector<PhaseSpread>& spreads) {
    std::string json = "\"phases\":{";
    bool first = true;
    for (int p = 0; p < (int)spreads.size(); p++) {
        const PhaseSpread& s = spreads[p];
        if (!s.measured()) continue;
        std::string key = phase_name((StepPhase)p);
        for (char& c : key)
            if (c == ' ') c = '_';
        json += strprintf("%s\"%s\":{\"min_ms\":%.3f,\"min_rank\":%d,\"max_ms\":%.3f,\"max_rank\":%d}",
                          first ? "" : ",", key.c_str(), s.min_ms, s.min_rank, s.max_ms, s.max_rank);
        first = false;
    }
    return json + "}";
}
