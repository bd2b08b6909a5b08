// The optimizer a run asks for: --optimizer and its constants (base/train_options.h), checked and
// turned into the OptimizerSettings a model's update takes (base/optimizer_settings.h). Defaults,
// where a flag is left at -1:
//   adamw  β1 0.9, β2 0.95,  eps 1e-8
//   lamb   β1 0.9, β2 0.999, eps 1e-6
//   lars   --momentum 0.9, --trust-coefficient 0.001 (no betas, no eps)
//   muon   --muon-lr 0.02, --muon-momentum 0.95, --muon-nesterov 1, --ns-steps 5 on the blocks'
//          matrices; AdamW's defaults on the other tensors. Muon's flags with another optimizer are
//          refused.
#pragma once
#include <string>

#include "base/optimizer_settings.h"
#include "base/train_options.h"

// Checks --optimizer, --beta1, --beta2, --eps, --momentum, --trust-coefficient, --layer-adaptation
// and Muon's --muon-lr, --muon-momentum, --muon-nesterov, --ns-steps, and replaces each -1 by the
// optimizer's default. Throws InputError naming the
// flag; called by validate_train_options (train/train_flags.h).
void check_optimizer_options(TrainOptions* options);

// The settings of every step of a checked run; the step fills in the learning rate and the clipping
// factor.
OptimizerSettings optimizer_settings(const TrainOptions& options);

// One line for the start-up report, e.g. "lamb (beta1 0.9, beta2 0.999, eps 1e-06, weight decay 0.1
// on 2-D weights, trust ratios: every tensor)".
std::string describe_optimizer(const OptimizerSettings& settings);
