// A timeline of a few training steps on every rank, as a Chrome trace (the JSON "trace event format"
// that Perfetto, ui.perfetto.dev, and chrome://tracing open): one process per rank ("rank 3 (host h,
// GPU 1)"), one track per stream or phase within it ("compute stream", "communication stream",
// "phases"), and one complete event ("ph":"X") per timed piece of work, with its start and duration
// in microseconds. Each rank times its own events on its own clock; before they are merged, each
// rank's are moved by its clock's offset from rank 0's (measured at start-up), so that a collective
// lines up across ranks.
//
// Events on one track nest the way the viewers draw them: two events either do not overlap or one lies
// inside the other (a layer's forward inside the forward phase).
#pragma once
#include <string>
#include <vector>

struct TraceEvent {
    std::string name;      // "forward", "layer 3 backward", "all-reduce 24.0 MiB"
    std::string category;  // "phase", "layer", "communication"
    int rank = 0;          // the process it is drawn in
    int track = 0;         // the track within the rank (see TraceTrack)
    double start_us = 0, duration_us = 0;
};

struct TraceTrack {
    int rank = 0, track = 0;
    std::string name;  // "phases", "compute stream", ...
};

// The events moved onto rank 0's clock: rank r's by offsets_us[r] (rank 0's clock minus rank r's).
void align_clocks(std::vector<TraceEvent>* events, const std::vector<double>& offsets_us);

// Whether the events of every (rank, track) nest; otherwise false, with the first two that overlap
// without nesting described in *why.
bool events_nest(const std::vector<TraceEvent>& events, std::string* why);

// The trace document: process names (process_names[r] for rank r), track names, then the events
// sorted by rank, track and start (longer first on a tie, so a parent comes before its children).
std::string chrome_trace_json(const std::vector<TraceEvent>& events, const std::vector<TraceTrack>& tracks,
                              const std::vector<std::string>& process_names);
// The same, written to `path` atomically (base/file_io.h); InputError naming the file on failure.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                        const std::vector<TraceTrack>& tracks, const std::vector<std::string>& process_names);
