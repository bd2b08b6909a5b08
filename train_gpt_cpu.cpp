// train_gpt_cpu: trains GPT-2 on the CPU in fp32, with the reference model of cpu/gpt_cpu.h.
// The training loop (flags, data, schedule, checkpoints, metrics, sampling) is the shared one of
// train/train_loop.h, driving the CPU model of cpu/cpu_train_model.h; this file is only main().
#include <cstdio>

#include "cpu/cpu_train_model.h"
#include "train/memory_check.h"
#include "train/train_loop.h"

int main(int argc, char** argv) {
#ifdef TRAIN_GPT_WITHOUT_CUDA  // built as ./train_gpt where make found no nvcc
    printf("train_gpt: built without CUDA (make found no nvcc), so training runs on the CPU with the "
           "fp32 reference model\n");
#endif
    TrainerSpec spec;
    spec.defaults = cpu_trainer_defaults();
    spec.create_model = create_cpu_train_model;
    spec.host_memory_needed = cpu_train_model_memory;
    spec.plan_memory = [](const ModelConfig& config, const TrainOptions& opt, int, bool) {
        return cpu_train_model_memory(config, opt);
    };
    spec.device_memory = [] { return (double)available_host_memory().bytes; };
    spec.report_ignored_flags = [](const TrainOptions& opt) {
        if (opt.zero_stage) printf("note: -z (ZeRO) has no effect in the single-process CPU trainer\n");
    };
    return run_training(argc, argv, spec);
}
