// Chrome trace JSON from the ranks' timed events (chrome_trace.h).
#include "train/chrome_trace.h"

#include <algorithm>
#include <tuple>

#include "base/errors.h"
#include "base/file_io.h"

void align_clocks(std::vector<TraceEvent>* events, const std::vector<double>& offsets_us) {
    for (TraceEvent& e : *events)
        if (e.rank >= 0 && e.rank < (int)offsets_us.size()) e.start_us += offsets_us[e.rank];
}

// Rank, track, start; the longer first on a tie (a parent before the children that start with it).
static bool drawn_before(const TraceEvent& a, const TraceEvent& b) {
    return std::make_tuple(a.rank, a.track, a.start_us, -a.duration_us) <
           std::make_tuple(b.rank, b.track, b.start_us, -b.duration_us);
}

bool events_nest(const std::vector<TraceEvent>& events, std::string* why) {
    std::vector<TraceEvent> sorted = events;
    std::sort(sorted.begin(), sorted.end(), drawn_before);
    std::vector<const TraceEvent*> open;  // the enclosing events of the current one, outermost first
    for (size_t i = 0; i < sorted.size(); i++) {
        const TraceEvent& e = sorted[i];
        if (i > 0 && (e.rank != sorted[i - 1].rank || e.track != sorted[i - 1].track)) open.clear();
        const double end = e.start_us + e.duration_us;
        while (!open.empty() && open.back()->start_us + open.back()->duration_us <= e.start_us) open.pop_back();
        if (!open.empty() && end > open.back()->start_us + open.back()->duration_us) {
            if (why)
                *why = strprintf("rank %d track %d: '%s' [%.3f, %.3f] us overlaps '%s' [%.3f, %.3f] us without "
                                 "nesting", e.rank, e.track, e.name.c_str(), e.start_us, end,
                                 open.back()->name.c_str(), open.back()->start_us,
                                 open.back()->start_us + open.back()->duration_us);
            return false;
        }
        open.push_back(&e);
    }
    return true;
}

// `text` as a JSON string literal.
static std::string json_string(const std::string& text) {
    std::string out = "\"";
    for (unsigned char c : text) {
        if (c == '"' || c == '\\') out += '\\', out += (char)c;
        else if (c < 0x20) out += strprintf("\\u%04x", c);
        else out += (char)c;
    }
    return out + "\"";
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const std::vector<TraceTrack>& tracks,
                              const std::vector<std::string>& process_names) {
    std::string json = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    bool first = true;
    auto add = [&](const std::string& object) {
        json += (first ? "" : ",\n") + object;
        first = false;
    };
    for (int r = 0; r < (int)process_names.size(); r++) {
        add(strprintf("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":%s}}", r,
                      json_string(process_names[r]).c_str()));
        add(strprintf("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
                      r, r));
    }
    for (const TraceTrack& t : tracks)
        add(strprintf("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%s}}", t.rank,
                      t.track, json_string(t.name).c_str()));
    std::vector<TraceEvent> sorted = events;
    std::sort(sorted.begin(), sorted.end(), drawn_before);
    for (const TraceEvent& e : sorted)
        add(strprintf("{\"ph\":\"X\",\"name\":%s,\"cat\":%s,\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
                      json_string(e.name).c_str(), json_string(e.category).c_str(), e.rank, e.track, e.start_us,
                      e.duration_us));
    return json + "\n]}\n";
}

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                        const std::vector<TraceTrack>& tracks, const std::vector<std::string>& process_names) {
    const std::string json = chrome_trace_json(events, tracks, process_names);
    AtomicFile file(path);
    file.write(json.data(), json.size());
    file.commit();
}
