// The profiling building blocks against values worked out here: phase times reduced across ranks
// (base/step_phases.h), the straggler detector (train/straggler_detector.h), the Chrome trace
// (train/chrome_trace.h: parsed by Python's json module where python3 exists), nccl-tests' bus
// bandwidth (parallel/plan/traffic.h), and a step's timeline (base/step_timeline.h): its marks as phase
// times, spans and per-kind collective totals.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/step_phases.h"
#include "base/step_timeline.h"
#include "parallel/plan/traffic.h"
#include "test/test.h"
#include "train/chrome_trace.h"
#include "train/straggler_detector.h"

namespace {

// A rank's times: forward f, backward b, communication wait w, the rest 0.
PhaseTimes times(double f, double b, double w = 0) {
    PhaseTimes t;
    t[StepPhase::FORWARD] = f, t[StepPhase::BACKWARD] = b, t[StepPhase::COMM_WAIT] = w;
    return t;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether python3 parses `json` (true where python3 is missing: then the caller's own checks stand).
bool python_parses_json(const std::string& json, std::string* error) {
    if (system("command -v python3 >/dev/null 2>&1") != 0) return true;
    const std::string dir = tst::make_temp_dir(), path = dir + "/doc.json";
    FILE* f = fopen(path.c_str(), "w");
    fwrite(json.data(), 1, json.size(), f);
    fclose(f);
    const std::string command = "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' " + path + " 2>&1";
    return tst::run_command(command, error) == 0;
}

}  // namespace

// Three ranks: rank 2's backward is slowest, rank 1's fastest; the others waited for rank 2.
TEST(phase_spreads_name_the_ranks_at_either_end) {
    const std::vector<PhaseTimes> ranks = {times(10, 20, 15), times(10, 18, 17), times(11, 35, 0)};
    const std::vector<PhaseSpread> s = phase_spreads(ranks);
    const PhaseSpread& backward = s[(int)StepPhase::BACKWARD];
    CHECK(backward.min_ms == 18 && backward.min_rank == 1 && backward.max_ms == 35 && backward.max_rank == 2);
    const PhaseSpread& forward = s[(int)StepPhase::FORWARD];  // a tie: the lowest rank
    CHECK(forward.min_ms == 10 && forward.min_rank == 0 && forward.max_rank == 2);
    CHECK(!s[(int)StepPhase::CHECKPOINT].measured());
    CHECK(ranks[2].compute() == 46 && ranks[0].total() == 45);
    // The widest phase is the backward's (17 ms), ahead of the wait's (17 ms on rank 1 vs 0: also 17,
    // but later in the order): the first widest is reported.
    const std::string summary = slowest_phase_summary(s);
    CHECK_MSG(summary == "slowest: backward=18.0-35.0 ms (rank 2)", "%s", summary.c_str());
    const std::string table = phase_table(s, 7);
    CHECK_MSG(contains(table, "phases of step 7") && contains(table, "backward") && contains(table, "comm wait") &&
                  !contains(table, "checkpoint") && !contains(table, "bubble"),
              "%s", table.c_str());
    const std::string json = "{" + phase_metrics_json(s) + "}";
    CHECK_MSG(contains(json, "\"backward\":{\"min_ms\":18.000,\"min_rank\":1,\"max_ms\":35.000,\"max_rank\":2}") &&
                  contains(json, "\"comm_wait\":") && !contains(json, "checkpoint"),
              "%s", json.c_str());
    std::string error;
    CHECK_MSG(python_parses_json(json, &error), "%s\n%s", json.c_str(), error.c_str());
    CHECK(slowest_phase_summary(phase_spreads({PhaseTimes()})).empty());
}

// Four ranks, rank 3 slower by 50% on some steps: named at the second slow step within the window,
// once; not for a single spike; named again only after a whole window back to normal.
TEST(straggler_named_when_repeatedly_slower_than_the_median) {
    const std::vector<PhaseTimes> normal = {times(10, 20), times(10, 21), times(11, 20), times(10, 20)};
    std::vector<PhaseTimes> slow = normal;
    slow[3] = times(15, 30);  // 45 ms against a median of 31: 45% slower
    StragglerDetector d(0.2, 4, 2);
    CHECK(d.observe(normal).empty());
    CHECK(d.observe(slow).empty());  // one slow step: not yet
    CHECK(std::fabs(d.excess(3) - (45.0 / 31 - 1)) < 1e-12);
    CHECK(d.observe(normal).empty());
    const std::vector<int> named = d.observe(slow);  // two of the last four
    CHECK(named.size() == 1 && named[0] == 3);
    CHECK(d.observe(slow).empty());  // already named
    for (int i = 0; i < 4; i++) CHECK(d.observe(normal).empty());
    CHECK(d.observe(slow).empty());
    CHECK(d.observe(slow) == std::vector<int>{3});  // back to normal for a window, then slow again
    // A single spike never names anyone; 15% slower is under the threshold.
    StragglerDetector spikes(0.2, 4, 2);
    std::vector<PhaseTimes> mild = normal;
    mild[1] = times(11.5, 23.5);  // 35 ms: 14.8% over 30.5
    for (int i = 0; i < 6; i++) CHECK(spikes.observe(i == 2 ? slow : mild).empty());
}

// Pipeline stages do different work: a rank is compared with its own stage's median only.
TEST(straggler_compared_within_its_stage) {
    // Stage 0 (ranks 0, 1) computes 30 ms; stage 1 (ranks 2, 3) 60 ms, rank 3 slow at 100 (25% over
    // its stage's median of 80).
    const std::vector<PhaseTimes> ranks = {times(10, 20), times(10, 20), times(20, 40), times(30, 70)};
    StragglerDetector by_stage(0.2, 2, 2), together(0.2, 2, 2);
    for (int i = 0; i < 2; i++) {
        const std::vector<int> named = by_stage.observe(ranks, {0, 0, 1, 1});
        CHECK(named == (i == 1 ? std::vector<int>{3} : std::vector<int>{}));
    }
    // Without the stages, the median (45 ms) calls both of stage 1's ranks slow.
    together.observe(ranks);
    CHECK((together.observe(ranks) == std::vector<int>{2, 3}));
}

TEST(straggler_settings_are_checked) {
    bool threw = false;
    try {
        StragglerDetector bad(0.2, 2, 3);
    } catch (const InputError&) {
        threw = true;
    }
    CHECK(threw);
}

// Two ranks, two tracks each: the document parses, names every rank and track, keeps every event,
// puts rank 1's events on rank 0's clock; an event that straddles its parent's end does not nest.
TEST(chrome_trace_parses_nests_and_aligns) {
    std::vector<TraceEvent> events = {
        {"forward", "phase", 0, 0, 100, 50},        {"layer 0 forward", "layer", 0, 0, 100, 20},
        {"layer 1 forward", "layer", 0, 0, 120, 30}, {"all-reduce", "communication", 0, 1, 110, 60},
        {"forward", "phase", 1, 0, 5000, 55},       {"layer 0 \"quoted\"", "layer", 1, 0, 5010, 10},
    };
    std::string why;
    CHECK_MSG(events_nest(events, &why), "%s", why.c_str());
    align_clocks(&events, {0, -4900});
    CHECK(events[4].start_us == 100 && events[5].start_us == 110 && events[0].start_us == 100);
    const std::vector<TraceTrack> tracks = {{0, 0, "phases"}, {0, 1, "communication stream"}, {1, 0, "phases"}};
    const std::string json = chrome_trace_json(events, tracks, {"rank 0 (host a, GPU 0)", "rank 1 (host a, GPU 1)"});
    std::string error;
    CHECK_MSG(python_parses_json(json, &error), "%s\n%s", json.c_str(), error.c_str());
    size_t complete = 0;
    for (size_t at = 0; (at = json.find("\"ph\":\"X\"", at)) != std::string::npos; at++) complete++;
    CHECK(complete == events.size());
    CHECK(contains(json, "\"name\":\"rank 1 (host a, GPU 1)\"") && contains(json, "\"name\":\"communication stream\"") &&
          contains(json, "layer 0 \\\"quoted\\\""));
    CHECK(json.find("\"name\":\"forward\"") < json.find("\"name\":\"layer 0 forward\""));  // parent first
    // Overlapping without nesting: layer 1 runs past the forward's end.
    events[2].duration_us = 40;
    CHECK(!events_nest(events, &why));
    CHECK_MSG(contains(why, "layer 1 forward") && contains(why, "'forward'"), "%s", why.c_str());
    // The same times on different tracks or ranks never conflict.
    events[2].track = 2;
    CHECK(events_nest(events, &why));
    const std::string path = tst::make_temp_dir() + "/trace.json";
    write_chrome_trace(path, events, tracks, {"rank 0", "rank 1"});
    FILE* f = fopen(path.c_str(), "r");
    CHECK(f != nullptr);
    if (f) fclose(f);
}

// nccl-tests' definitions, by hand: 1 GiB all-reduced over 8 ranks in 0.1 s is 10.74 GB/s of
// algorithm bandwidth and 18.79 GB/s of bus bandwidth; an all-gather of 8 × 128 MiB in the same time
// 9.40; a send 10.74.
TEST(bus_bandwidth_follows_nccl_tests) {
    const double size = 1073741824.0, t = 0.1, algorithm = size / t;
    CHECK(std::fabs(bus_bandwidth(CollectiveKind::ALL_REDUCE, size, 8, t) - algorithm * 14 / 8) < 1);
    CHECK(std::fabs(bus_bandwidth(CollectiveKind::ALL_GATHER, size, 8, t) - algorithm * 7 / 8) < 1);
    CHECK(std::fabs(bus_bandwidth(CollectiveKind::REDUCE_SCATTER, size, 8, t) - algorithm * 7 / 8) < 1);
    CHECK(bus_bandwidth(CollectiveKind::SEND, size, 2, t) == algorithm);
    CHECK(bus_bandwidth(CollectiveKind::BROADCAST, size, 4, t) == algorithm);
    CHECK(bus_bandwidth(CollectiveKind::ALL_REDUCE, size, 1, t) == 0);  // one rank moves nothing
    CHECK(bus_bandwidth(CollectiveKind::ALL_REDUCE, size, 8, 0) == 0);
    CHECK(std::fabs(bus_bandwidth(CollectiveKind::ALL_REDUCE, size, 8, t) / 1e9 - 18.79) < 0.01);
}

// A step marked by hand (µs): data 0-100, forward 100-400 with layer 0 to 250 and layer 1 after it,
// a wait for a gather inside layer 1 (300-350), loss 400-450, backward 450-800 (layer 1 then 0), the
// optimizer 800-900, then the loop's own 900-910; marks given out of order (the GPU's come after the
// loop's). Phase times are the intervals by phase; a layer's span keeps the wait inside it.
TEST(step_timeline_turns_marks_into_phases_and_spans) {
    StepTimeline t;
    t.mark(StepPhase::COUNT, 910);
    t.mark(StepPhase::DATA, 0);
    t.mark(StepPhase::FORWARD, 100, 0);
    t.mark(StepPhase::FORWARD, 250, 1);
    t.mark(StepPhase::COMM_WAIT, 300, 1);
    t.mark(StepPhase::FORWARD, 350, 1);
    t.mark(StepPhase::LOSS, 400);
    t.mark(StepPhase::BACKWARD, 450, 1, true);
    t.mark(StepPhase::BACKWARD, 600, 0, true);
    t.mark(StepPhase::OPTIMIZER, 800);
    t.mark(StepPhase::COUNT, 900);
    t.add_time(StepPhase::CHECKPOINT, 2.5);
    const PhaseTimes p = t.phase_times();
    CHECK_NEAR(p[StepPhase::DATA], 0.1, 1e-12);
    CHECK_NEAR(p[StepPhase::FORWARD], 0.25, 1e-12);
    CHECK_NEAR(p[StepPhase::COMM_WAIT], 0.05, 1e-12);
    CHECK_NEAR(p[StepPhase::LOSS], 0.05, 1e-12);
    CHECK_NEAR(p[StepPhase::BACKWARD], 0.35, 1e-12);
    CHECK_NEAR(p[StepPhase::OPTIMIZER], 0.1, 1e-12);
    CHECK_NEAR(p[StepPhase::CHECKPOINT], 2.5, 1e-12);
    CHECK_NEAR(p.total(), 0.9 + 2.5, 1e-12);  // the loop's own 10 µs belong to no phase

    std::vector<TraceEvent> events;
    std::string names;
    for (const TimedSpan& s : t.spans("step 7")) {
        events.push_back({s.name, s.category, 0, s.track, s.start_us, s.duration_us});
        names += strprintf("%s@%d:%.0f+%.0f ", s.name.c_str(), s.track, s.start_us, s.duration_us);
    }
    CHECK_MSG(names == "step 7@0:0+910 data@0:0+100 forward@0:100+200 comm wait@0:300+50 forward@0:350+50 "
                       "loss@0:400+50 backward@0:450+350 optimizer@0:800+100 layer 0 forward@1:100+150 "
                       "layer 1 forward@1:250+150 layer 1 backward@1:450+150 layer 0 backward@1:600+200 ",
              "spans: %s", names.c_str());
    std::string why;
    CHECK_MSG(events_nest(events, &why), "%s", why.c_str());
    t.clear();
    CHECK(t.phase_times().total() == 0 && t.spans("s").empty());
}

// Collectives by kind, by hand: two all-reduces of 24 MiB over 4 ranks in 2 ms each move 2 × 24 MiB ×
// 2·3/4 bus bytes in 4 ms: 18.87 GB/s; one all-gather of 8 MiB over 4 ranks in 1 ms: 6.29 GB/s.
TEST(step_timeline_totals_collectives_by_kind) {
    StepTimeline t;
    const double mib = 1 << 20;
    for (double start : {0.0, 5000.0})
        t.add_collective({"all-reduce", 24 * mib, bus_bandwidth(CollectiveKind::ALL_REDUCE, 24 * mib, 4, 1.0), 0,
                          start, 2000});
    t.add_collective({"all-gather", 8 * mib, bus_bandwidth(CollectiveKind::ALL_GATHER, 8 * mib, 4, 1.0), 1, 100,
                      1000});
    const std::vector<CollectiveTotals> totals = t.collective_totals();
    CHECK(totals.size() == 2 && totals[0].kind == "all-reduce" && totals[1].kind == "all-gather");
    CHECK(totals[0].count == 2 && totals[0].size_bytes == 48 * mib && totals[0].ms == 4);
    CHECK_NEAR(totals[0].bus_gbps(), 48 * mib * 1.5 / 4e-3 / 1e9, 1e-9);
    CHECK_NEAR(totals[0].bus_gbps(), 18.87, 0.01);
    CHECK_NEAR(totals[1].bus_gbps(), 6.29, 0.01);
    const std::string json = collective_metrics_json(totals);
    CHECK_MSG(json == "\"comm\":{\"all-reduce\":{\"count\":2,\"bytes\":50331648,\"ms\":4.000,\"bus_gbps\":18.874},"
                      "\"all-gather\":{\"count\":1,\"bytes\":8388608,\"ms\":1.000,\"bus_gbps\":6.291}}",
              "%s", json.c_str());
    std::string error;
    CHECK_MSG(python_parses_json("{" + json + "}", &error), "%s", error.c_str());
    CHECK(contains(collective_summary(totals), "all-reduce 48.00 MiB in 4.00 ms (18.9 GB/s bus)"));
    CHECK(collective_metrics_json({}).empty() && collective_summary({}).empty());
    // Collectives are drawn on their stream's track.
    const std::vector<TimedSpan> spans = t.spans("step 1");
    CHECK(spans.size() == 3 && spans[2].track == kFirstCommunicationTrack + 1 && spans[2].name == "all-gather 8.00 MiB");
}
