// Which optimizer a step runs and with what constants, as the training loop hands them to a model
// (TrainModel::update, base/train_model.h). Four optimizers:
//   AdamW  elementwise Adam with decoupled weight decay (cpu/adamw.h)
//   LAMB   Adam's step, rescaled per tensor by ‖p‖ / ‖step‖ (cpu/lamb.h)
//   LARS   momentum SGD whose gradient is rescaled per tensor by η · ‖p‖ / ‖g‖ (cpu/lars.h)
//   Muon   the blocks' weight matrices: momentum orthogonalized by Newton–Schulz (cpu/muon.h);
//          AdamW on every other tensor (base/muon_layout.h)
// LAMB and LARS keep every tensor's update in proportion to its weights, which is what lets a run
// raise its global batch (and its learning rate) far beyond what AdamW tolerates.
#pragma once
#include <cstdint>
#include <cstring>

// The numbers are saved in training-state files (train/training_state.h): AdamW must stay 0.
enum class OptimizerKind : int32_t { ADAMW = 0, LAMB = 1, LARS = 2, MUON = 3 };
constexpr int kOptimizerKinds = 4;

// Which tensors LAMB and LARS rescale: every one, or only the 2-D weight matrices (biases and
// LayerNorm parameters then keep a ratio of 1).
enum class LayerAdaptation : int32_t { ALL = 0, MATRICES = 1 };

struct OptimizerSettings {
    float learning_rate;
    OptimizerKind kind = OptimizerKind::ADAMW;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;     // AdamW and LAMB
    float momentum = 0.9f, trust_coefficient = 0.001f;  // LARS: μ and η
    LayerAdaptation layer_adaptation = LayerAdaptation::ALL;  // LAMB and LARS
    // Muon: this step's rate on its matrices (--muon-lr times the schedule's factor; learning_rate is
    // AdamW's on the other tensors), the momentum, Nesterov's lookahead, the Newton–Schulz iterations.
    float muon_learning_rate = 0.0f, muon_momentum = 0.95f;
    bool muon_nesterov = true;
    int ns_steps = 5;
    float weight_decay = 0.0f;  // applied only where is_weight_matrix()
    float grad_scale = 1.0f;    // multiplies every gradient first (global-norm clipping)
};

inline const char* optimizer_name(OptimizerKind kind) {
    switch (kind) {
        case OptimizerKind::ADAMW: return "adamw";
        case OptimizerKind::LAMB: return "lamb";
        case OptimizerKind::LARS: return "lars";
        case OptimizerKind::MUON: return "muon";
    }
    return "?";
}

// "AdamW", "LAMB", "LARS", "Muon": as the reports print them.
inline const char* optimizer_title(OptimizerKind kind) {
    switch (kind) {
        case OptimizerKind::ADAMW: return "AdamW";
        case OptimizerKind::LAMB: return "LAMB";
        case OptimizerKind::LARS: return "LARS";
        case OptimizerKind::MUON: return "Muon";
    }
    return "?";
}

// "adamw" | "lamb" | "lars" | "muon" → kind; false if unknown.
inline bool parse_optimizer_kind(const char* name, OptimizerKind* kind) {
    for (int k = 0; k < kOptimizerKinds; k++)
        if (strcmp(name, optimizer_name((OptimizerKind)k)) == 0) {
            *kind = (OptimizerKind)k;
            return true;
        }
    return false;
}
