// A base for the tests' fake models that only evaluate: every training method of TrainModel is a
// no-op, so a fake defines just model_config(), description(), forward() and logits_at().
#pragma once
#include "base/train_model.h"

class EvalOnlyModel : public TrainModel {
public:
    void zero_grad() override {}
    float forward_backward(const int*, const int*, int, int, float, bool) override { return 0; }
    double grad_norm() override { return 0; }
    void update(const OptimizerSettings&, int) override {}
    WeightType working_weight_type() const override { return WeightType::FP32; }
    void set_working_weights(const std::vector<float>&) override {}
    std::vector<float> working_weights() override { return {}; }
    void set_optimizer_state(const std::vector<float>&, const std::vector<float>&,
                             const std::vector<float>&) override {}
    OptimizerPart optimizer_part() override { return {}; }
    ModelMemory memory() const override { return {}; }
};
