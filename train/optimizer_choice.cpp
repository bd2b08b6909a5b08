// The optimizer's flags (see optimizer_choice.h).
#include "train/optimizer_choice.h"

#include "base/errors.h"

static OptimizerKind kind_of(const TrainOptions& o) {
    OptimizerKind kind;
    if (!parse_optimizer_kind(o.optimizer.c_str(), &kind))
        fail("--optimizer: unknown optimizer '%s' (adamw, lamb, lars, muon)", o.optimizer.c_str());
    return kind;
}

// A -1 flag takes the default; any other value must lie in [low, high) (or (low, high) when
// exclusive_low).
static void resolve(double* value, double default_value, const char* flag, double low, double high,
                    bool exclusive_low) {
    if (*value == -1) *value = default_value;
    const bool too_low = exclusive_low ? !(*value > low) : !(*value >= low);
    if (too_low || !(*value < high))
        fail("%s: %g is outside %s%g, %g)", flag, *value, exclusive_low ? "(" : "[", low, high);
}

// Muon's flags: refused with another optimizer (they would change nothing), else checked and defaulted.
static void check_muon_options(TrainOptions* o, OptimizerKind kind) {
    if (kind != OptimizerKind::MUON) {
        const struct {
            const char* flag;
            bool given;
        } flags[] = {{"--muon-lr", o->muon_lr != -1},
                     {"--muon-momentum", o->muon_momentum != -1},
                     {"--muon-nesterov", o->muon_nesterov != -1},
                     {"--ns-steps", o->ns_steps != -1}};
        for (const auto& f : flags)
            if (f.given)
                fail("%s: a Muon flag, given with --optimizer %s (add --optimizer muon, or leave it out)", f.flag,
                     optimizer_name(kind));
        return;
    }
    if (o->muon_lr == -1) o->muon_lr = 0.02;
    if (!(o->muon_lr > 0)) fail("--muon-lr: %g must be positive", o->muon_lr);
    resolve(&o->muon_momentum, 0.95, "--muon-momentum", 0, 1, false);
    if (o->muon_nesterov == -1) o->muon_nesterov = 1;
    if (o->muon_nesterov != 0 && o->muon_nesterov != 1)
        fail("--muon-nesterov: %d is neither 1 (Nesterov's lookahead) nor 0", o->muon_nesterov);
    if (o->ns_steps == -1) o->ns_steps = 5;
    if (o->ns_steps < 1 || o->ns_steps > 20) fail("--ns-steps: %d is outside 1..20", o->ns_steps);
}

void check_optimizer_options(TrainOptions* o) {
    const OptimizerKind kind = kind_of(*o);
    check_muon_options(o, kind);
    const bool lamb = kind == OptimizerKind::LAMB;
    resolve(&o->beta1, 0.9, "--beta1", 0, 1, false);
    resolve(&o->beta2, lamb ? 0.999 : 0.95, "--beta2", 0, 1, false);
    resolve(&o->eps, lamb ? 1e-6 : 1e-8, "--eps", 0, 1, true);
    if (!(o->momentum >= 0 && o->momentum < 1)) fail("--momentum: %g is outside [0, 1)", o->momentum);
    if (!(o->trust_coefficient > 0)) fail("--trust-coefficient: %g must be positive", o->trust_coefficient);
    if (o->layer_adaptation != "all" && o->layer_adaptation != "matrices")
        fail("--layer-adaptation: unknown choice '%s' (all, matrices)", o->layer_adaptation.c_str());
}

OptimizerSettings optimizer_settings(const TrainOptions& o) {
    OptimizerSettings s{0.0f};
    s.kind = kind_of(o);
    s.beta1 = (float)o.beta1, s.beta2 = (float)o.beta2, s.eps = (float)o.eps;
    s.momentum = (float)o.momentum, s.trust_coefficient = (float)o.trust_coefficient;
    s.layer_adaptation = o.layer_adaptation == "matrices" ? LayerAdaptation::MATRICES : LayerAdaptation::ALL;
    s.weight_decay = (float)o.weight_decay;
    if (s.kind == OptimizerKind::MUON) {
        s.muon_learning_rate = (float)o.muon_lr, s.muon_momentum = (float)o.muon_momentum;
        s.muon_nesterov = o.muon_nesterov == 1, s.ns_steps = o.ns_steps;
    }
    return s;
}

std::string describe_optimizer(const OptimizerSettings& s) {
    const std::string decay = strprintf("weight decay %g on 2-D weights", s.weight_decay);
    const char* ratios = s.layer_adaptation == LayerAdaptation::ALL ? "every tensor" : "2-D weights only";
    switch (s.kind) {
        case OptimizerKind::ADAMW:
            return strprintf("adamw (beta1 %g, beta2 %g, eps %g, %s)", s.beta1, s.beta2, s.eps, decay.c_str());
        case OptimizerKind::LAMB:
            return strprintf("lamb (beta1 %g, beta2 %g, eps %g, %s, trust ratios: %s)", s.beta1, s.beta2, s.eps,
                             decay.c_str(), ratios);
        case OptimizerKind::LARS:
            return strprintf("lars (momentum %g, trust coefficient %g, %s, trust ratios: %s)", s.momentum,
                             s.trust_coefficient, decay.c_str(), ratios);
        case OptimizerKind::MUON:
            return strprintf("muon on the blocks' matrices (peak lr %g, momentum %g, %s, %d Newton-Schulz steps, "
                             "weight decay %g); adamw on the rest (-l, beta1 %g, beta2 %g, eps %g, %s)",
                             s.muon_learning_rate, s.muon_momentum, s.muon_nesterov ? "nesterov" : "no nesterov",
                             s.ns_steps, s.weight_decay, s.beta1, s.beta2, s.eps, decay.c_str());
    }
    return "?";
}
