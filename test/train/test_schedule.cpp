// Tests of the learning-rate schedules against values worked out by hand from llm.c's definitions
// (lr 1e-3, final fraction 0.1 → min 1e-4), of the peak's scaling to the batch (--lr-scaling), and of
// the outlier detector behind -sl / -sg.
#include <cmath>

#include "base/outlier_detector.h"
#include "test/test.h"
#include "train/lr_schedule.h"

static LRSchedule make(ScheduleKind kind, int warmup, int max_steps, double final_fraction) {
    LRSchedule s;
    s.kind = kind;
    s.learning_rate = 1e-3;
    s.warmup_steps = warmup;
    s.max_steps = max_steps;
    s.final_fraction = final_fraction;
    return s;
}

TEST(cosine_schedule) {
    LRSchedule s = make(ScheduleKind::COSINE, 10, 110, 0.1);
    CHECK_NEAR(learning_rate_at(s, 0), 1e-4, 1e-15);  // (0+1)/10 of the peak
    CHECK_NEAR(learning_rate_at(s, 4), 5e-4, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 9), 1e-3, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 10), 1e-3, 1e-15);  // decay starts at the peak
    CHECK_NEAR(learning_rate_at(s, 35), 1e-4 + 9e-4 * 0.5 * (1 + std::sqrt(0.5)),
               1e-15);                                   // p = 1/4
    CHECK_NEAR(learning_rate_at(s, 60), 5.5e-4, 1e-15);  // p = 1/2: halfway between peak and min
    CHECK_NEAR(learning_rate_at(s, 110), 1e-4, 1e-15);
}

TEST(linear_schedule) {
    LRSchedule s = make(ScheduleKind::LINEAR, 10, 110, 0.1);
    CHECK_NEAR(learning_rate_at(s, 2), 3e-4, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 35), 7.75e-4, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 60), 5.5e-4, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 110), 1e-4, 1e-15);
}

TEST(constant_schedule_ignores_warmup) {
    LRSchedule s = make(ScheduleKind::CONSTANT, 10, 110, 0.1);
    for (int step : {0, 5, 50, 109}) CHECK_NEAR(learning_rate_at(s, step), 1e-3, 0);
}

TEST(wsd_schedule) {
    LRSchedule s = make(ScheduleKind::WSD, 10, 100, 0.0);
    CHECK_NEAR(learning_rate_at(s, 5), 6e-4, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 50), 1e-3, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 79), 1e-3, 1e-15);
    CHECK_NEAR(learning_rate_at(s, 80), 1e-3, 1e-15);                         // q = 0
    CHECK_NEAR(learning_rate_at(s, 84), 1e-3 * (1 - std::sqrt(0.2)), 1e-15);  // q = 4/20
    CHECK_NEAR(learning_rate_at(s, 95), 1e-3 * (1 - std::sqrt(0.75)), 1e-15);
    CHECK_NEAR(learning_rate_at(s, 100), 0.0, 1e-15);
    LRSchedule to_min = make(ScheduleKind::WSD, 0, 100, 0.5);
    CHECK_NEAR(learning_rate_at(to_min, 90), 5e-4 + 5e-4 * (1 - std::sqrt(0.5)), 1e-15);
}

TEST(schedule_names) {
    ScheduleKind k;
    for (const char* name : {"cosine", "linear", "constant", "wsd"}) {
        CHECK(parse_schedule_kind(name, &k));
        CHECK(std::string(schedule_name(k)) == name);
    }
    CHECK(!parse_schedule_kind("Cosine", &k));
}

// --lr-scaling: -l 1e-3 tuned at 65536 tokens per step, a run of 524288 (8 times as many).
TEST(learning_rate_scaled_to_the_batch) {
    CHECK_NEAR(scaled_peak_lr(1e-3, LRScaling::NONE, 524288, 65536), 1e-3, 0);
    CHECK_NEAR(scaled_peak_lr(1e-3, LRScaling::LINEAR, 524288, 65536), 8e-3, 1e-15);
    CHECK_NEAR(scaled_peak_lr(1e-3, LRScaling::SQRT, 524288, 65536), 1e-3 * std::sqrt(8.0), 1e-15);
    CHECK_NEAR(scaled_peak_lr(1e-3, LRScaling::LINEAR, 16384, 65536), 2.5e-4, 1e-15);  // a smaller batch
    TrainOptions o;
    o.learning_rate = 6e-4, o.total_batch = 4096, o.lr_scaling = "sqrt", o.base_batch = 1024;
    CHECK_NEAR(peak_learning_rate(o), 1.2e-3, 1e-15);
    LRScaling rule;
    for (const char* name : {"none", "linear", "sqrt"}) {
        CHECK(parse_lr_scaling(name, &rule));
        CHECK(std::string(lr_scaling_name(rule)) == name);
    }
    CHECK(!parse_lr_scaling("square-root", &rule));
}

TEST(outlier_z_scores) {
    OutlierDetector d;
    // 127 values give no verdict; the window then holds 0, 1, ..., 127 → mean 63.5.
    for (int i = 0; i < 127; i++) CHECK(std::isnan(d.update(i)));
    // Population std of 0..127 is sqrt((128^2 - 1) / 12).
    const double std0 = std::sqrt((128.0 * 128.0 - 1) / 12);
    CHECK_NEAR(d.update(127), (127 - 63.5) / std0, 1e-12);
    // The next value replaces the oldest (0): window 1..127, 1000.
    double mean = (127.0 * 128 / 2 + 1000) / 128, var = 0;
    for (int i = 1; i < 128; i++) var += (i - mean) * (i - mean);
    var += (1000 - mean) * (1000 - mean);
    CHECK_NEAR(d.update(1000), (1000 - mean) / std::sqrt(var / 128), 1e-12);
    OutlierDetector flat;
    for (int i = 0; i < 128; i++) flat.update(2.5);
    CHECK(flat.update(2.5) == 0.0);
}
