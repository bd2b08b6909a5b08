// Learning-rate schedules (see lr_schedule.h). Computed in double; the trainers round to float.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>

bool parse_schedule_kind(const std::string& name, ScheduleKind* kind) {
    if (name == "cosine")
        *kind = ScheduleKind::COSINE;
    else if (name == "linear")
        *kind = ScheduleKind::LINEAR;
    else if (name == "constant")
        *kind = ScheduleKind::CONSTANT;
    else if (name == "wsd")
        *kind = ScheduleKind::WSD;
    else
        return false;
    return true;
}

const char* schedule_name(ScheduleKind kind) {
    switch (kind) {
        case ScheduleKind::COSINE: return "cosine";
        case ScheduleKind::LINEAR: return "linear";
        case ScheduleKind::CONSTANT: return "constant";
        case ScheduleKind::WSD: return "wsd";
    }
    return "?";
}

double learning_rate_at(const LRSchedule& s, int step) {
    const double lr = s.learning_rate, min_lr = s.learning_rate * s.final_fraction;
    if (s.kind == ScheduleKind::CONSTANT) return lr;
    if (step < s.warmup_steps) return lr * (step + 1) / s.warmup_steps;
    if (s.kind == ScheduleKind::WSD) {
        const int decay_start = (int)(0.8 * s.max_steps);
        if (step < decay_start) return lr;
        double q = std::clamp((double)(step - decay_start) / (s.max_steps - decay_start), 0.0, 1.0);
        return min_lr + (lr - min_lr) * (1.0 - std::sqrt(q));
    }
    // Cosine and linear decay from the end of warmup to max_steps (held at min_lr beyond it).
    const int span = s.max_steps - s.warmup_steps;
    double p = span > 0 ? std::clamp((double)(step - s.warmup_steps) / span, 0.0, 1.0) : 1.0;
    if (s.kind == ScheduleKind::COSINE)
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
    return lr - (lr - min_lr) * p;
}

bool parse_lr_scaling(const std::string& name, LRScaling* rule) {
    for (LRScaling r : {LRScaling::NONE, LRScaling::LINEAR, LRScaling::SQRT})
        if (name == lr_scaling_name(r)) {
            *rule = r;
            return true;
        }
    return false;
}

const char* lr_scaling_name(LRScaling rule) {
    switch (rule) {
        case LRScaling::NONE: return "none";
        case LRScaling::LINEAR: return "linear";
        case LRScaling::SQRT: return "sqrt";
    }
    return "?";
}

double scaled_peak_lr(double learning_rate, LRScaling rule, long long tokens_per_step, long long base_batch) {
    if (rule == LRScaling::NONE) return learning_rate;
    const double ratio = (double)tokens_per_step / (double)base_batch;
    return learning_rate * (rule == LRScaling::LINEAR ? ratio : std::sqrt(ratio));
}

double peak_learning_rate(const TrainOptions& o) {
    LRScaling rule = LRScaling::NONE;
    parse_lr_scaling(o.lr_scaling, &rule);  // checked by validate_train_options
    return scaled_peak_lr(o.learning_rate, rule, o.total_batch, o.base_batch);
}
