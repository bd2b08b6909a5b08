// A step's marks and collectives as phase times, timeline spans and per-kind totals (step_timeline.h).
#include "base/step_timeline.h"

#include <algorithm>
#include <chrono>

#include "base/errors.h"

double clock_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<StepMark> StepTimeline::sorted_marks() const {
    std::vector<StepMark> marks = marks_;
    std::stable_sort(marks.begin(), marks.end(),
                     [](const StepMark& a, const StepMark& b) { return a.time_us < b.time_us; });
    return marks;
}

PhaseTimes StepTimeline::phase_times() const {
    PhaseTimes times = extra_;
    const std::vector<StepMark> marks = sorted_marks();
    for (size_t i = 0; i + 1 < marks.size(); i++)
        if (marks[i].phase != StepPhase::COUNT)
            times[marks[i].phase] += (marks[i + 1].time_us - marks[i].time_us) / 1000.0;
    return times;
}

// "layer 3 forward", "layer 3 backward".
static std::string layer_pass_name(const StepMark& m) {
    return strprintf("layer %d %s", m.layer, m.backward ? "backward" : "forward");
}

std::vector<TimedSpan> StepTimeline::spans(const std::string& step_name) const {
    std::vector<TimedSpan> spans;
    const std::vector<StepMark> marks = sorted_marks();
    if (marks.size() >= 2)
        spans.push_back({step_name, "step", kPhaseTrack, marks.front().time_us,
                         marks.back().time_us - marks.front().time_us});
    // Consecutive marks of one phase make one span; so do consecutive marks of one layer's pass (a
    // wait inside a layer stays inside its span).
    auto add_runs = [&](auto same, auto named, const char* category, int track) {
        for (size_t i = 0; i + 1 < marks.size();) {
            size_t j = i + 1;
            while (j + 1 < marks.size() && same(marks[i], marks[j])) j++;
            const std::string name = named(marks[i]);
            if (!name.empty())
                spans.push_back({name, category, track, marks[i].time_us, marks[j].time_us - marks[i].time_us});
            i = j;
        }
    };
    add_runs([](const StepMark& a, const StepMark& b) { return a.phase == b.phase; },
             [](const StepMark& m) { return m.phase == StepPhase::COUNT ? std::string() : phase_name(m.phase); },
             "phase", kPhaseTrack);
    add_runs([](const StepMark& a, const StepMark& b) { return a.layer == b.layer && a.backward == b.backward; },
             [](const StepMark& m) { return m.layer < 0 ? std::string() : layer_pass_name(m); }, "layer",
             kLayerTrack);
    for (const TimedCollective& c : collectives_)
        spans.push_back({strprintf("%s %.2f MiB", c.kind.c_str(), c.size_bytes / (1 << 20)), "communication",
                         kFirstCommunicationTrack + c.stream, c.start_us, c.duration_us});
    return spans;
}

std::vector<CollectiveTotals> StepTimeline::collective_totals() const {
    std::vector<CollectiveTotals> totals;
    for (const TimedCollective& c : collectives_) {
        auto it = std::find_if(totals.begin(), totals.end(), [&](const CollectiveTotals& t) { return t.kind == c.kind; });
        if (it == totals.end()) it = totals.insert(totals.end(), CollectiveTotals{c.kind});
        it->count++;
        it->size_bytes += c.size_bytes, it->bus_bytes += c.bus_bytes, it->ms += c.duration_us / 1000.0;
    }
    return totals;
}

std::string collective_metrics_json(const std::vector<CollectiveTotals>& totals) {
    if (totals.empty()) return "";
    std::string json = "\"comm\":{";
    for (size_t i = 0; i < totals.size(); i++) {
        const CollectiveTotals& t = totals[i];
        json += strprintf("%s\"%s\":{\"count\":%d,\"bytes\":%.0f,\"ms\":%.3f,\"bus_gbps\":%.3f}", i ? "," : "",
                          t.kind.c_str(), t.count, t.size_bytes, t.ms, t.bus_gbps());
    }
    return json + "}";
}

std::string collective_summary(const std::vector<CollectiveTotals>& totals) {
    std::string line;
    for (const CollectiveTotals& t : totals)
        line += strprintf("%s%s %.2f MiB in %.2f ms (%.3g GB/s bus)", line.empty() ? "comm: " : " | ", t.kind.c_str(),
                          t.size_bytes / (1 << 20), t.ms, t.bus_gbps());
    return line;
}
