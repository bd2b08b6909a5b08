// The loop's phase timers, straggler detection and timeline (step_profile.h).
#include "train/step_profile.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "base/errors.h"
#include "train/run_folder.h"
#include "train/train_flags.h"

namespace {

// What each rank sends rank 0 on a logged step (a plain struct: one gather of bytes).
struct RankReport {
    double phase_ms[kStepPhases];
    char host[64];
    int device;
    int telemetry_available;
    unsigned sm_clock_mhz, max_sm_clock_mhz, temperature_c;
    double power_w, power_limit_w;
    unsigned long long throttle_reasons;
};

std::vector<char> bytes_of(const RankReport& r) {
    const char* p = reinterpret_cast<const char*>(&r);
    return std::vector<char>(p, p + sizeof r);
}

GpuTelemetry telemetry_of(const RankReport& r) {
    GpuTelemetry t;
    t.available = r.telemetry_available != 0;
    t.why_not = "no GPU telemetry";
    t.sm_clock_mhz = r.sm_clock_mhz, t.max_sm_clock_mhz = r.max_sm_clock_mhz, t.temperature_c = r.temperature_c;
    t.power_w = r.power_w, t.power_limit_w = r.power_limit_w, t.throttle_reasons = r.throttle_reasons;
    return t;
}

// One rank: its phases in a row ("phases: data=0.4 forward=12.1 ... ms"), those under 0.05 ms left out
// (name=value, as slowest_phase_summary: the step line's "| loss 3.21 |" stays its only loss).
std::string phase_row(const PhaseTimes& t) {
    std::string row;
    for (int p = 0; p < kStepPhases; p++)
        if (t.ms[p] >= 0.05) row += strprintf("%s%s=%.1f", row.empty() ? "phases: " : " ", phase_name((StepPhase)p), t.ms[p]);
    return row.empty() ? row : row + " ms";
}

// "rank 2 (host n1, GPU 1)".
std::string rank_title(int rank, const RankReport& r) {
    return r.device >= 0 ? strprintf("rank %d (host %s, GPU %d)", rank, r.host, r.device)
                         : strprintf("rank %d (host %s)", rank, r.host);
}

// Spans as text for the gather: fields split by 0x1f, spans by 0x1e.
std::vector<char> serialize(const std::vector<TraceEvent>& events) {
    std::string text;
    for (const TraceEvent& e : events)
        text += strprintf("%s\x1f%s\x1f%d\x1f%.3f\x1f%.3f\x1e", e.name.c_str(), e.category.c_str(), e.track,
                          e.start_us, e.duration_us);
    return std::vector<char>(text.begin(), text.end());
}
std::vector<TraceEvent> deserialize(const std::vector<char>& bytes, int rank) {
    std::vector<TraceEvent> events;
    std::string text(bytes.begin(), bytes.end());
    size_t at = 0;
    while (at < text.size()) {
        const size_t end = text.find('\x1e', at);
        std::vector<std::string> f;
        size_t from = at;
        for (size_t sep; (sep = text.find('\x1f', from)) < end; from = sep + 1) f.push_back(text.substr(from, sep - from));
        f.push_back(text.substr(from, end - from));
        if (f.size() == 5)
            events.push_back({f[0], f[1], rank, atoi(f[2].c_str()), atof(f[3].c_str()), atof(f[4].c_str())});
        at = end + 1;
    }
    return events;
}

std::string track_name(int track) {
    if (track == kPhaseTrack) return "step phases";
    if (track == kLayerTrack) return "layers (compute stream)";
    return strprintf("collectives (stream %d)", track - kFirstCommunicationTrack);
}

}  // namespace

StepProfile::StepProfile(const TrainOptions& opt, RankGroup& ranks, TrainModel& model, std::vector<int> stage_of_rank)
    : timers_(opt.timers), ranks_(ranks), model_(model), output_dir_(opt.output_dir),
      stage_of_rank_(std::move(stage_of_rank)), stragglers_(opt.straggler_threshold) {
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    host_ = host;
    if (!timers_) return;
    model_.set_step_timeline(&timeline_);
    {  // what one mark costs: the clock read and the append, as the model and the loop make them
        StepTimeline scratch;
        const int n = 20000;
        const double start = clock_us();
        for (int i = 0; i < n; i++) scratch.mark(StepPhase::FORWARD, clock_us(), i % 12, false);
        mark_cost_us_ = (clock_us() - start) / n;
    }
    if (!profile_step_range(opt, &first_profiled_, &last_profiled_)) return;
    // Each rank's clock against rank 0's, just after a barrier that every rank leaves at about once.
    ranks_.barrier();
    const double now = clock_us();
    const std::vector<char> mine(reinterpret_cast<const char*>(&now), reinterpret_cast<const char*>(&now + 1));
    const std::vector<std::vector<char>> all = ranks_.gather_on_rank0(mine);
    for (const std::vector<char>& bytes : all) {
        double t = 0;
        memcpy(&t, bytes.data(), sizeof t);
        clock_offsets_us_.push_back(now - t);
    }
}

void StepProfile::step_begins(int step) {
    (void)step;
    if (!timers_) return;
    const double start = clock_us();
    timeline_.clear();
    timeline_.mark(StepPhase::COUNT, clock_us());
    own_us_ += clock_us() - start;
}

TrainModel::NextBatch StepProfile::timed_reads(TrainModel::NextBatch next_batch) {
    if (!timers_) return next_batch;
    return [this, next_batch](int* inputs, int* targets) {
        timeline_.mark(StepPhase::DATA, clock_us());
        next_batch(inputs, targets);
        timeline_.mark(StepPhase::COUNT, clock_us());
    };
}

void StepProfile::checkpoint_written(int step, double start_us, double ms) {
    if (!timers_) return;
    pending_[StepPhase::CHECKPOINT] += ms;
    if (step >= first_profiled_ && step <= last_profiled_)
        spans_.push_back({"checkpoint", "phase", ranks_.rank, kPhaseTrack, start_us, ms * 1000});
}

std::string StepProfile::step_ends(int step, double step_ms, bool logged, std::string* timers_json) {
    if (!timers_) return "";
    const double start = clock_us();
    timeline_.mark(StepPhase::COUNT, clock_us());
    marks_ += (long long)timeline_.marks().size();
    steps_++, steps_ms_ += step_ms;
    if (step >= first_profiled_ && step <= last_profiled_) keep_spans(step);
    std::string line;
    if (logged) gather_and_report(step, &line, timers_json);
    own_us_ += clock_us() - start;  // writing the timeline (--profile-steps) is not counted
    if (step == last_profiled_) write_trace();
    return line;
}

std::string StepProfile::overhead_report() const {
    if (!timers_ || steps_ == 0) return "";
    const double per_step_us = (marks_ * mark_cost_us_ + own_us_ - waited_us_) / steps_;
    return strprintf("timers: %.0f marks per step; the host's timing work %.3f ms per step on average, %.3f%% of the step "
                     "time\n",
                     (double)marks_ / steps_, per_step_us / 1000, 100 * per_step_us / 1000 / (steps_ms_ / steps_));
}

// One gather of every rank's report; rank 0 reports.
void StepProfile::gather_and_report(int step, std::string* line, std::string* timers_json) {
    PhaseTimes mine = timeline_.phase_times();
    for (int p = 0; p < kStepPhases; p++) mine.ms[p] += pending_.ms[p];
    pending_ = PhaseTimes();
    RankReport report = {};
    std::copy(mine.ms, mine.ms + kStepPhases, report.phase_ms);
    strncpy(report.host, host_.c_str(), sizeof report.host - 1);
    report.device = model_.device_index();
    if (ranks_.num_ranks > 1) {  // for the straggler line, where NVML answers
        const GpuTelemetry t = model_.device_telemetry();
        report.telemetry_available = t.available;
        report.sm_clock_mhz = t.sm_clock_mhz, report.max_sm_clock_mhz = t.max_sm_clock_mhz;
        report.temperature_c = t.temperature_c, report.power_w = t.power_w, report.power_limit_w = t.power_limit_w;
        report.throttle_reasons = t.throttle_reasons;
    }
    // The gather is where a rank that finished its step early first waits for a slower one (without the
    // timers it would wait in the next step's first collective): that wait counts as the next logged
    // step's comm wait, not as the timers' own work.
    const double gather_start = clock_us();
    const std::vector<std::vector<char>> gathered = ranks_.gather_on_rank0(bytes_of(report));
    const double gather_us = clock_us() - gather_start;
    pending_[StepPhase::COMM_WAIT] += gather_us / 1000;
    waited_us_ += gather_us;
    if (ranks_.rank != 0) return;
    std::vector<RankReport> reports(gathered.size());
    std::vector<PhaseTimes> by_rank(gathered.size());
    for (size_t r = 0; r < gathered.size(); r++) {
        memcpy(&reports[r], gathered[r].data(), sizeof(RankReport));
        std::copy(reports[r].phase_ms, reports[r].phase_ms + kStepPhases, by_rank[r].ms);
    }
    const std::vector<PhaseSpread> spreads = phase_spreads(by_rank);
    const std::string comm = collective_metrics_json(timeline_.collective_totals());
    *timers_json = phase_metrics_json(spreads) + (comm.empty() ? "" : "," + comm);
    *line = by_rank.size() > 1 ? slowest_phase_summary(spreads) : phase_row(by_rank[0]);
    if (timers_ >= 2) {
        printf("%s", phase_table(spreads, step).c_str());
        const std::string collectives = collective_summary(timeline_.collective_totals());
        if (!collectives.empty()) printf("  rank 0's %s\n", collectives.c_str());
    }
    if (by_rank.size() < 2) return;
    for (int r : stragglers_.observe(by_rank, stage_of_rank_)) {
        const GpuTelemetry t = telemetry_of(reports[r]);
        printf("straggler: %s, compute %.0f%% slower than its peers' median over recent logged steps (step %d: "
               "%s)%s\n",
               rank_title(r, reports[r]).c_str(), 100 * stragglers_.excess(r), step, phase_row(by_rank[r]).c_str(),
               t.available ? (" | GPU " + gpu_telemetry_text(t)).c_str() : "");
    }
}

// This step's spans on this rank's clock, for the timeline.
void StepProfile::keep_spans(int step) {
    for (const TimedSpan& s : timeline_.spans(strprintf("step %d", step)))
        spans_.push_back({s.name, s.category, ranks_.rank, s.track, s.start_us, s.duration_us});
}

// Every rank's spans to rank 0, onto its clock, into trace.json in the output folder (a collective).
void StepProfile::write_trace() {
    const std::vector<std::vector<char>> gathered = ranks_.gather_on_rank0(serialize(spans_));
    spans_.clear();
    const std::vector<char> mine_host(host_.begin(), host_.end());
    const std::vector<std::vector<char>> hosts = ranks_.gather_on_rank0(mine_host);
    if (ranks_.rank != 0) return;
    std::vector<TraceEvent> events;
    std::vector<std::string> process_names;
    std::map<std::pair<int, int>, bool> seen;
    std::vector<TraceTrack> tracks;
    for (int r = 0; r < (int)gathered.size(); r++) {
        for (TraceEvent& e : deserialize(gathered[r], r)) {
            if (!seen[{r, e.track}]) tracks.push_back({r, e.track, track_name(e.track)}), seen[{r, e.track}] = true;
            events.push_back(std::move(e));
        }
        process_names.push_back(strprintf("rank %d (host %s)", r, std::string(hosts[r].begin(), hosts[r].end()).c_str()));
    }
    align_clocks(&events, clock_offsets_us_);
    const std::string path = output_dir_ + "/trace.json";
    write_chrome_trace(path, events, tracks, process_names);
    printf("timeline of steps %d to %d written to %s (open it in ui.perfetto.dev or chrome://tracing)\n",
           first_profiled_, last_profiled_, path.c_str());
}
